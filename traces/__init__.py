"""Both processes' traces read as one: ``python -m replywire join-traces`` and ``trace``.

* ``timeline.py``: one stream's records, from both sides, as a timeline (entries,
  spans, the verdict), and the streams found in a set of records;
* ``table.py``: the timeline as terminal text (the table of records, summary lines);
* ``result_events.py``: the result document's events at the times of their records;
* ``svg.py``: the picture (a producer and a consumer lane on one time axis);
* ``page.py``: the picture, the table and the events as one HTML page, and an index;
* ``commands.py``: reads the trace files; ``join-traces``, ``trace``, the pages written.

The timeline reads the state and input names of all three machines (the consumer
core's, ``shared.consumer_core``; the producer's, ``producer.states``; the reader's,
``consumer.reader_states``), so this package sits above both processes: it imports
their machine specs and nothing else of theirs, and neither process imports it: the
command line above it all, ``replywire/``, runs those two commands. All but
``commands.py`` are pure (no files, no clock), like ``shared/``.
"""
