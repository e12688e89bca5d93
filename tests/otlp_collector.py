"""The tests' OTLP/gRPC collector: ``harness/otlp_collector.py`` (shared with the
benchmarks), its names as the tests import them."""

from __future__ import annotations

from harness.otlp_collector import (
    KIND_CLIENT,
    KIND_CONSUMER,
    KIND_INTERNAL,
    KIND_PRODUCER,
    KIND_SERVER,
    STATUS_ERROR,
    STATUS_OK,
    Collector,
    Received,
    otlp_collector,
)

__all__ = [
    "KIND_CLIENT",
    "KIND_CONSUMER",
    "KIND_INTERNAL",
    "KIND_PRODUCER",
    "KIND_SERVER",
    "STATUS_ERROR",
    "STATUS_OK",
    "Collector",
    "Received",
    "otlp_collector",
]
