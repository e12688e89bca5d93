"""replywire: the one import namespace of all that is installed
(docs/operations.md#installing-replywire).

``replywire.shared``, ``.runtime``, ``.producer``, ``.consumer``, ``.traces`` and ``.native``
are the repository's top-level folders (here, links to them; installed, the folders
themselves), and ``replywire/fixtures`` the recordings. This package's own modules are the
commands above both processes, ``python -m replywire demo | join-traces | trace | health |
services``:

* ``commands.py``: the installed commands' entries (``replywire``, ``replywire-producer``,
  ``replywire-consumer``), which ``python -m`` runs too;
* ``flags.py``: their flag table, from which argparse, ``--help`` and the docs' table are
  made, and the parser built from it;
* ``cli.py``: each command's thin entry: ``demo`` (``make demo``) runs ``demo.py``,
  ``join-traces`` and ``trace`` run ``traces.commands``, ``health`` and ``services``
  ``probes.py``;
* ``children.py``: a producer started as a child process and stopped by its pid (the demo,
  the tests, the tools and the benchmarks use it).

These modules sit on top: they may import every package, and no package imports them.
"""
