"""What runs the processes rather than being one: the demo, child processes, a fake Gemini.

* ``demo.py``: ``make demo`` (``python -m replywire demo``): a producer started as a
  child, the cases and the fault catalogue streamed through it, one table;
* ``children.py``: start a producer as a child process, read its port, stop a child
  by its pid (the demo, the tests, the tools and the benchmarks use it);
* ``fake_gemini/``: a loopback HTTP server that speaks Gemini's streaming protocol,
  for trying ``--source gemini`` without a key (``python -m harness.fake_gemini``) and
  for the tests (its ``__init__`` says which module does what).

This package sits above both processes: it may import them (and ``traces/``); neither
imports it. The command line above it all, ``replywire/``, runs its demo.
"""
