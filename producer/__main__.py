from runtime.grpc_env import quiet_grpc_core

quiet_grpc_core()  # before grpc is first imported

from producer.cli import main  # noqa: E402 - after quiet_grpc_core()

raise SystemExit(main())
