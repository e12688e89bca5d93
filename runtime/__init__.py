"""What both processes do at run time around the pure core, and that does I/O.

``shared/`` is sans-IO: no sockets, files, clocks or gRPC. The producer and the
consumer are the I/O edges; this package is what the two edges share without
importing each other: the logging set-up (``runtime.logs``), reading the
recording file (``runtime.recording_file``) and keeping gRPC's C-core logging out
of the trace (``runtime.grpc_env``).
"""
