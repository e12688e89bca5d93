"""Keep gRPC's C-core log lines out of the trace.

The C core writes its own lines to stderr, where the JSON trace goes; they can
carry a peer's text (a GOAWAY's debug data) and would break "one line, one
record". ``quiet_grpc_core()`` must run before grpc is first imported, which is
when the C core reads ``GRPC_VERBOSITY``, so this module imports nothing of grpc.
An operator who wants the lines back sets ``GRPC_VERBOSITY`` (then ``--trace-file``
keeps them out of the trace). Set but empty counts as unset: gRPC would read it as
its default, INFO.
"""

from __future__ import annotations

import os


def quiet_grpc_core() -> None:
    if not os.environ.get("GRPC_VERBOSITY"):
        os.environ["GRPC_VERBOSITY"] = "NONE"
