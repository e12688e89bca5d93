"""The three commands, installed (``pyproject.toml``'s ``[project.scripts]``:
``replywire-producer``, ``replywire-consumer``, ``replywire``) and as ``python -m
producer | consumer | replywire`` in the repository (each ``__main__`` calls its function
here). Each quiets gRPC's core before grpc is first imported, then runs its command's
``main``; the consumer and ``replywire`` end quietly when the reader of their output leaves
(``runtime.closed_pipe``). Each returns the exit code."""

from __future__ import annotations

from replywire.runtime.grpc_env import quiet_grpc_core


def producer() -> int:
    quiet_grpc_core()  # before grpc is first imported
    from replywire.producer.cli import main  # noqa: PLC0415 - after quiet_grpc_core()

    return main()


def consumer() -> int:
    quiet_grpc_core()
    from replywire.consumer.cli import main  # noqa: PLC0415
    from replywire.runtime.closed_pipe import run_printing  # noqa: PLC0415

    return run_printing(main)


def replywire() -> int:
    quiet_grpc_core()
    from replywire.cli import main  # noqa: PLC0415
    from replywire.runtime.closed_pipe import run_printing  # noqa: PLC0415

    return run_printing(main)
