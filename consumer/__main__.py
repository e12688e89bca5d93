from runtime.grpc_env import quiet_grpc_core

quiet_grpc_core()  # before grpc is first imported

from consumer.cli import main  # noqa: E402 - after quiet_grpc_core()
from runtime.closed_pipe import run_printing  # noqa: E402

raise SystemExit(run_printing(main))
