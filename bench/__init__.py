"""The benchmarks (``make bench``; bench/README.md). gRPC's C core is kept quiet before
any of them imports grpc, as in the producer and the consumer (runtime.grpc_env)."""

from replywire.runtime.grpc_env import quiet_grpc_core

quiet_grpc_core()
