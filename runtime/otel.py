"""OpenTelemetry when it is on (``runtime/tracing.py`` decides): the tracer, the W3C
trace context in and out of a call's metadata, the ids a record carries, and export.

* **Context.** ``traceparent`` and ``tracestate`` are read by OpenTelemetry's W3C
  propagator, after a bound on their length: a value that is too long or that the
  propagator does not accept is ignored (the span starts a trace of its own) and said
  in a ``trace_context_ignored`` record, never an error for the stream (a ``tracestate``
  the propagator cannot read is dropped, the ``traceparent`` kept, and said the same way).
  Repeated headers as W3C Trace Context reads them (``context_from_metadata``).
* **Records.** While a stream's span is current its ids are bound in the stream's
  structlog context (``bind_ids``), as ``trace_id`` and ``span_id`` in lowercase hex (the
  OpenTelemetry log data model's form): a record pays nothing more than the
  ``stream_id`` it already carries.
* **Export.** OTLP/gRPC with the maintained exporter (its standard ``OTEL_EXPORTER_OTLP_*``
  variables: headers, TLS, timeout) behind a ``BatchSpanProcessor`` (``OTEL_BSP_*``): a
  bounded queue and a thread of its own, so a slow or absent collector costs a stream
  nothing. A span the queue has no room for, or whose export failed, is a drop: counted
  (``dropped``, and the ``on_drop`` hook: the producer's metric), said in a
  ``trace_spans_dropped`` record the first time, and in the ``trace_export_ended``
  record at exit. Exit waits for the export at most ``EXIT_FLUSH_S``.
* **Resource and sampler**: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
  ``OTEL_TRACES_SAMPLER`` (and its argument), as the SDK reads them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from replywire.runtime.library_logs import route_stdlib_logging

#: The longest ``traceparent`` read (version 00 is 55 characters; a later version may
#: add fields, which a reader of version 00 accepts, but not without bound).
MAX_TRACEPARENT_CHARS: Final = 256
#: The longest ``tracestate`` passed on (W3C Trace Context: at least 512 are propagated).
MAX_TRACESTATE_CHARS: Final = 512
#: The most list-members a ``tracestate`` has (W3C Trace Context, "tracestate Header
#: Field Values"); beyond it the right-most are dropped.
MAX_TRACESTATE_MEMBERS: Final = 32
#: How long a process's exit waits for its spans to be exported.
EXIT_FLUSH_S: Final = 1.0
#: First spans of the streams served here, for a resume's link (bounded: oldest go first).
MAX_FIRST_SPANS: Final = 4096
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"

_PROPAGATOR: Final = TraceContextTextMapPropagator()


class _Counts:
    """Spans exported and dropped (queue full, export failed, never exported)."""

    def __init__(self, on_drop: Callable[[int], None] | None) -> None:
        self.exported = 0
        self.dropped = 0
        self.on_drop = on_drop
        self._lock = threading.Lock()
        self._said = False

    def add_exported(self, count: int) -> None:
        with self._lock:
            self.exported += count

    def add_dropped(self, count: int, why: str) -> None:
        with self._lock:
            self.dropped += count
            first, self._said = not self._said, True
        if self.on_drop is not None:
            self.on_drop(count)
        if first:
            structlog.get_logger().warning("trace_spans_dropped", spans=count, why=why)


class _CountingExporter(SpanExporter):
    """The exporter, with what it exported and what it failed to export counted."""

    def __init__(self, inner: SpanExporter, counts: _Counts) -> None:
        self._inner = inner
        self._counts = counts
        #: Spans in the export under way (a collector that never answers holds them).
        self.in_flight = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.in_flight = len(spans)
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        finally:
            self.in_flight = 0
        if result is SpanExportResult.SUCCESS:
            self._counts.add_exported(len(spans))
        else:
            self._counts.add_dropped(len(spans), "export_failed")
        return result

    def shutdown(self, timeout_millis: float = 30_000) -> None:
        shutdown: Any = self._inner.shutdown
        shutdown(timeout_millis=timeout_millis)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingBatch(BatchSpanProcessor):
    """The SDK's batch processor, with a span that finds its queue full counted (the SDK
    drops it with a log line and its own metric, which needs a meter)."""

    def __init__(self, exporter: SpanExporter, counts: _Counts) -> None:
        super().__init__(exporter)
        self._counts = counts
        # The SDK's queue (a bounded deque): read for its length only.
        self._queue: Any = getattr(self._batch_processor, "_queue", None)

    def on_end(self, span: ReadableSpan) -> None:
        queue = self._queue
        sampled = span.context is not None and span.context.trace_flags.sampled
        if sampled and queue is not None and len(queue) >= (queue.maxlen or len(queue) + 1):
            self._counts.add_dropped(1, "queue_full")
        super().on_end(span)

    def held(self) -> int:
        return 0 if self._queue is None else len(self._queue)


def _resource(service: str, environ: Mapping[str, str]) -> Resource:
    """``service`` as ``service.name`` unless the environment names the service."""
    named = environ.get("OTEL_SERVICE_NAME") or any(
        part.split("=", 1)[0].strip() == SERVICE_NAME
        for part in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")
    )
    return Resource.create({} if named else {SERVICE_NAME: service})


def joined_tracestate(values: Sequence[str]) -> tuple[str | None, bool]:
    """Several ``tracestate`` headers as the one list W3C Trace Context says they are
    (combined in order, with commas, as HTTP combines a repeated field), its empty members
    left out, cut to its first ``MAX_TRACESTATE_MEMBERS``; and whether it was cut. None
    for no header at all."""
    if not values:
        return None, False
    members = [m for m in (m.strip(" \t") for v in values for m in v.split(",")) if m]
    cut = len(members) > MAX_TRACESTATE_MEMBERS
    return ",".join(members[:MAX_TRACESTATE_MEMBERS]), cut


class Tracing:
    """A process's tracer, its export, and the trace context's way in and out."""

    def __init__(
        self,
        service: str,
        endpoint: str | None,
        *,
        environ: Mapping[str, str] | None = None,
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        environ = os.environ if environ is None else environ
        route_stdlib_logging("opentelemetry")  # its warnings are trace records, not stderr
        # A tracestate it cannot read is a warning quoting the caller's text, before any span
        # is current: said instead by our own record (trace_context_ignored, bounded).
        logging.getLogger("opentelemetry.trace.span").setLevel(logging.ERROR)
        self.counts = _Counts(on_drop)
        # No exit hook of the SDK's own: its shutdown may wait 30 s for a collector.
        self.provider = TracerProvider(resource=_resource(service, environ), shutdown_on_exit=False)
        self._batch: _CountingBatch | None = None
        self._exporter: _CountingExporter | None = None
        if endpoint is not None:
            exporter = _CountingExporter(OTLPSpanExporter(endpoint=endpoint), self.counts)
            self._exporter, self._batch = exporter, _CountingBatch(exporter, self.counts)
            self.provider.add_span_processor(self._batch)
        self.tracer = self.provider.get_tracer("replywire")
        self.endpoint = endpoint
        self._first_spans: OrderedDict[Any, SpanContext] = OrderedDict()
        #: The context this process was handed (the consumer's ``--traceparent``), the
        #: parent of its streams' spans; None: each stream starts a trace.
        self.parent: Context | None = None
        self._stopped = False

    def set_on_drop(self, on_drop: Callable[[int], None]) -> None:
        self.counts.on_drop = on_drop

    # --- the context in ---------------------------------------------------------------------

    def context_from(
        self, traceparent: str | None, tracestate: str | None
    ) -> tuple[Context | None, str | None]:
        """The parent context these values carry, or None (a new trace), and why a value
        was ignored (None: none was). Never raises."""
        if not traceparent:
            return None, None
        if len(traceparent) > MAX_TRACEPARENT_CHARS:
            return None, "traceparent_oversized"
        carrier = {TRACEPARENT: traceparent}
        why = None
        if tracestate:
            if len(tracestate) > MAX_TRACESTATE_CHARS:
                why = "tracestate_oversized"
            else:
                carrier[TRACESTATE] = tracestate
        try:
            context = _PROPAGATOR.extract(carrier)
        except Exception:  # the propagator's own parsing: nothing of it may end a stream
            return None, "traceparent_malformed"
        span_context = trace.get_current_span(context).get_span_context()
        if not span_context.is_valid:
            return None, "traceparent_malformed"
        if TRACESTATE in carrier and carrier[TRACESTATE].strip() and not span_context.trace_state:
            why = "tracestate_malformed"  # the propagator drops a tracestate it cannot read
        return context, why

    def context_from_metadata(
        self, metadata: Iterable[tuple[str, str | bytes]]
    ) -> tuple[Context | None, str | None]:
        """``context_from`` for a call's metadata, as W3C Trace Context reads repeated
        headers (grpc.aio gives each as a pair of its own): more than one ``traceparent``
        makes the context invalid (a new trace, ``traceparent_repeated``); several
        ``tracestate`` are one list, joined with commas in order, of at most
        ``MAX_TRACESTATE_MEMBERS`` members (the right-most beyond dropped,
        ``tracestate_truncated``), then bounded and checked as one."""
        traceparents: list[str] = []
        tracestates: list[str] = []
        for key, value in metadata:  # bounded: the call's metadata is (--max-metadata-bytes)
            if key == TRACEPARENT:
                traceparents.append(value if isinstance(value, str) else "")
            elif key == TRACESTATE:
                tracestates.append(value if isinstance(value, str) else "")
        if len(traceparents) > 1:
            return None, "traceparent_repeated"
        tracestate, truncated = joined_tracestate(tracestates)
        context, why = self.context_from(traceparents[0] if traceparents else None, tracestate)
        if why is None and truncated and context is not None:
            why = "tracestate_truncated"
        return context, why

    # --- spans ------------------------------------------------------------------------------

    def start(
        self,
        name: str,
        *,
        kind: SpanKind,
        parent: Context | None = None,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] = (),
    ) -> Span:
        return self.tracer.start_span(
            name, context=parent, kind=kind, attributes=attributes, links=links
        )

    def start_child(self, name: str, attributes: Mapping[str, Any] | None = None) -> Span:
        """A span under the current one (this task's context), of a call this process makes."""
        return self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)

    @staticmethod
    def metadata(span: Span) -> tuple[tuple[str, str], ...]:
        """``traceparent`` (and ``tracestate``) naming ``span`` as the parent."""
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
        return tuple(carrier.items())

    @staticmethod
    def ids(span: Span) -> dict[str, str]:
        context = span.get_span_context()
        return {
            "trace_id": trace.format_trace_id(context.trace_id),
            "span_id": trace.format_span_id(context.span_id),
        }

    def bind_ids(self, span: Span) -> Mapping[str, Any]:
        """The span's ids in every record of this task's context from now on; the tokens
        that ``unbind_ids`` takes."""
        return structlog.contextvars.bind_contextvars(**self.ids(span))

    @staticmethod
    def unbind_ids(tokens: Mapping[str, Any]) -> None:
        structlog.contextvars.reset_contextvars(**tokens)

    @staticmethod
    def current(span: Span) -> object:
        """Make ``span`` this task's current span (its children's parent); the token for
        ``not_current``."""
        from opentelemetry import context as otel_context  # noqa: PLC0415

        return otel_context.attach(trace.set_span_in_context(span))

    @staticmethod
    def not_current(token: object) -> None:
        from opentelemetry import context as otel_context  # noqa: PLC0415

        otel_context.detach(token)  # type: ignore[arg-type]

    @staticmethod
    def end(span: Span, *, error: str | None, attributes: Mapping[str, Any]) -> None:
        """End ``span`` with its outcome: OK, or an error whose description is the reason."""
        span.set_attributes(dict(attributes))
        if error is None:
            span.set_status(Status(StatusCode.OK))
        else:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    # --- a resume's link --------------------------------------------------------------------

    def link_to_first(self, key: Any) -> Link | None:
        """A link to the first span of ``key``'s stream served here (for a resume's span),
        or None when none was (a first delivery)."""
        first = self._first_spans.get(key)
        return None if first is None else Link(first, {"replywire.link": "first_delivery"})

    def current_traceparent(self) -> str | None:
        """The current span as a ``traceparent`` (a reply log keeps it for a resume
        elsewhere), or None when no span is current."""
        span = trace.get_current_span()
        if not span.get_span_context().is_valid:
            return None
        return dict(self.metadata(span)).get(TRACEPARENT)

    def link_current_to_first(self, traceparent: str) -> bool:
        """Link the current span (a resume's) to the first delivery's span the reply log
        kept (``traceparent``, validated as an incoming one), unless it links to one
        already or is that span. Whether a link was added."""
        span = trace.get_current_span()
        own = span.get_span_context()
        parent, _ = self.context_from(traceparent, None)
        if parent is None or not own.is_valid or not span.is_recording():
            return False
        first = trace.get_current_span(parent).get_span_context()
        links: Sequence[Link] = getattr(span, "links", ())
        linked = any(
            link.attributes and link.attributes.get("replywire.link") == "first_delivery"
            for link in links
        )
        if linked or first.span_id == own.span_id:
            return False
        span.add_link(first, {"replywire.link": "first_delivery"})
        return True

    def remember_first(self, key: Any, span: Span) -> None:
        """``span`` is the first of ``key``'s stream (bounded: the oldest are forgotten)."""
        self._first_spans[key] = span.get_span_context()
        while len(self._first_spans) > MAX_FIRST_SPANS:
            self._first_spans.popitem(last=False)

    # --- the end ----------------------------------------------------------------------------

    def shutdown(self, timeout_s: float = EXIT_FLUSH_S) -> None:
        """Export what is held, waiting at most ``timeout_s``; what is still held then is
        dropped (counted). A ``trace_export_ended`` record says how many of each."""
        if self._stopped:
            return
        self._stopped = True
        worker = threading.Thread(target=self.provider.shutdown, name="otel-exit", daemon=True)
        worker.start()
        worker.join(timeout_s)
        unfinished = worker.is_alive()
        if unfinished and self._batch is not None and self._exporter is not None:
            left = self._batch.held() + self._exporter.in_flight
            if left:
                self.counts.add_dropped(left, "exit")
        if self._batch is not None:
            structlog.get_logger().info(
                "trace_export_ended",
                spans_exported=self.counts.exported,
                spans_dropped=self.counts.dropped,
                unfinished=unfinished,
            )
