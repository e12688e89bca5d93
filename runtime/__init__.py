"""What both processes do at run time around the pure core, and that does I/O.

``shared/`` is sans-IO: no sockets, files, clocks or gRPC. The producer and the
consumer are the I/O edges; this package is what the two edges share without
importing each other: the logging set-up (``runtime.logs``), reading the
recording file (``runtime.recording_file``), keeping gRPC's C-core logging out
of the trace (``runtime.grpc_env``) and the flag tables' type and validators, from
which each process's argparse and environment defaults are made
(``runtime.flags``).
"""

from replywire.native import package_path

__path__ = package_path(__path__, __name__)
