"""Both processes' traces read as one: ``python -m consumer join-traces`` and ``trace``.

``timeline.py`` turns one stream's records, from both sides, into a timeline; the
other modules draw it (a terminal table, an SVG in an HTML page) and ``commands.py``
reads the trace files and writes the pages. The timeline reads the state and input
names of all three machines (the consumer core's, ``shared.consumer_core``; the
producer's, ``producer.states``; the reader's, ``consumer.reader_states``), so this
package sits above both processes: it imports their machine specs and nothing else
of theirs, and neither process imports it except the consumer's command line, which
hands it the two commands. The timeline and its drawing are pure (no files, no clock).
"""
