"""The commands above both processes: ``python -m replywire demo | join-traces | trace``.

* ``flags.py``: their flag table, from which argparse, ``--help`` and the docs' table are
  made, and the parser built from it;
* ``cli.py``: each command's thin entry: ``demo`` (``make demo``) runs ``harness.demo``,
  ``join-traces`` and ``trace`` run ``traces.commands``.

This package sits on top: it may import every other (the processes, ``traces/``,
``harness/``), and nothing imports it.
"""
