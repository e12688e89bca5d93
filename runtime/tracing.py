"""Whether a process takes part in OpenTelemetry tracing, and the one check that says so.

Off by default: nothing of OpenTelemetry is imported, no span is made, no exporter thread
runs, and the code that would make a span asks ``active()`` (a global read) once per
stream, never per chunk. On (``start_tracing``): the process's spans go to an OTLP/gRPC
collector (``--otlp-endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``), and the W3C trace
context (``traceparent``, ``tracestate``) crosses the call in its metadata
(``runtime/otel.py`` does the work; docs/traces.md says what a person sees).

``OTEL_SDK_DISABLED=true`` turns it off whatever else is set, as the OpenTelemetry
environment conventions say.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # imported only when tracing is on
    from replywire.runtime.otel import Tracing

#: The standard variables: the collector, the switch that overrides everything.
ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_ENV: Final = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
DISABLED_ENV: Final = "OTEL_SDK_DISABLED"
#: The consumer continues the trace of whoever started it (the environment conventions'
#: name for a context handed to a process).
TRACEPARENT_ENV: Final = "TRACEPARENT"
TRACESTATE_ENV: Final = "TRACESTATE"
OTLP_ENDPOINT_HELP: Final = (
    "export spans over OTLP/gRPC to this collector (e.g. http://127.0.0.1:4317; unset: "
    f"${ENDPOINT_ENV}, else no tracing)"
)

_active: Tracing | None = None


def active() -> Tracing | None:
    """The process's tracing, or None (off): the one check on a stream's path."""
    return _active


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """What a process was asked for: ``service`` is its default ``service.name``
    (``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` win), ``endpoint`` the
    collector (None: spans are made for the trace context and the records, not exported)."""

    service: str
    endpoint: str | None


def endpoint_from(flag: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The collector: the flag, else the standard variables; None when tracing is off
    (no collector, or ``OTEL_SDK_DISABLED=true``)."""
    environ = os.environ if environ is None else environ
    if environ.get(DISABLED_ENV, "").strip().lower() == "true":
        return None
    return flag or environ.get(TRACES_ENDPOINT_ENV) or environ.get(ENDPOINT_ENV) or None


def disabled(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    return environ.get(DISABLED_ENV, "").strip().lower() == "true"


def start_tracing(config: TracingConfig) -> Tracing:
    """Turn tracing on for this process (once, at start-up)."""
    global _active  # noqa: PLW0603 - one tracing per process, read by active()
    from replywire.runtime.otel import Tracing  # noqa: PLC0415 - OpenTelemetry only when it is on

    if _active is not None:
        _active.shutdown()
    _active = Tracing(config.service, config.endpoint)
    return _active


def stop_tracing() -> None:
    """Export what is held (bounded: ``runtime.otel.EXIT_FLUSH_S``) and turn tracing off."""
    global _active  # noqa: PLW0603
    if _active is not None:
        _active.shutdown()
        _active = None
