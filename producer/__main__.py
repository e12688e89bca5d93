import os

# gRPC's C core writes its own log lines to stderr, where the JSON trace goes; they can
# carry a peer's text (a GOAWAY's debug data) and would break "one line, one record".
# Set before grpc is first imported, which is when the C core reads it; an operator who
# wants them back sets GRPC_VERBOSITY themselves (then --trace-file keeps them out of the
# trace). Set but empty counts as unset: gRPC would read it as its default, INFO.
if not os.environ.get("GRPC_VERBOSITY"):
    os.environ["GRPC_VERBOSITY"] = "NONE"

from producer.cli import main

raise SystemExit(main())
