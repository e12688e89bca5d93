"""What the tests and the benchmarks run beside the processes; not installed.

* ``fake_gemini/``: a loopback HTTP server that speaks Gemini's streaming protocol,
  for trying ``--source gemini`` without a key (``python -m harness.fake_gemini``) and
  for the tests (its ``__init__`` says which module does what);
* ``otlp_collector.py``: an OTLP/gRPC collector, in a thread for the tests or a process of
  its own for ``make bench``.

The demo and the children it starts are the installed ``replywire.demo`` and
``replywire.children``. This package may import every other; nothing installed imports it.
"""
