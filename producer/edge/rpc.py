"""The ``replywire.v1.ReplyStream`` methods as the server registers them: bounded request
deserializers that never raise (grpc would answer a raising one with a bare status the
trace never sees), and their registration."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import grpc
from google.protobuf.message import DecodeError

from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.requests import MAX_REQUEST_BYTES

#: What HTTP/2 adds to each header's name and value when it sizes a header list.
HEADER_OVERHEAD_BYTES: Final = 32
#: gRPC's INT limit on a header list (its channel arguments are C ints).
MAX_GRPC_METADATA_LIMIT: Final = 2**31 - 1

#: The service names the health service reports on ("" is the whole server).
SERVICE_NAME: Final = pb.DESCRIPTOR.services_by_name["ReplyStream"].full_name
HEALTH_SERVICES: Final = ("", SERVICE_NAME)


@dataclass(frozen=True, slots=True)
class MalformedRequest:
    """What the request deserializer hands the handler for bytes that are no OpenRequest."""

    why: str


def metadata_bytes(metadata: Iterable[tuple[str, str | bytes]]) -> int:
    """A call's metadata as HTTP/2 sizes a header list (RFC 9113 §6.5.2, as gRPC counts
    it): each name and value in octets, plus 32. What the handler sees: gRPC's own headers
    (the pseudo-headers, ``te``, ``content-type``, ``grpc-*``) are not in it."""
    total = 0
    for key, value in metadata:
        size = len(value) if isinstance(value, bytes) else len(value.encode())
        total += len(key.encode()) + size + HEADER_OVERHEAD_BYTES
    return total


def grpc_metadata_limit(max_metadata_bytes: int) -> int:
    """gRPC's own limit on a request's header list, for ``--max-metadata-bytes``: twice it.

    gRPC refuses a header list past its limit before any handler runs, with no trace
    record; between its soft and hard limit it refuses at random. With both at twice the
    bound, a request past the bound reaches the servicer, which refuses it
    ``metadata_too_large`` with a record and a count; one past twice the bound is refused
    by gRPC, always (RESOURCE_EXHAUSTED, "received metadata size exceeds hard limit"),
    which the consumer names ``metadata_too_large`` as well."""
    return min(2 * max_metadata_bytes, MAX_GRPC_METADATA_LIMIT)


def parse_open_request(data: bytes) -> pb.OpenRequest | MalformedRequest:
    """The RPC's request deserializer: a bounded parse that never raises (grpc would answer
    a raising deserializer with a bare status the trace never sees)."""
    if len(data) > MAX_REQUEST_BYTES:
        return MalformedRequest(f"request over {MAX_REQUEST_BYTES} bytes")
    try:
        return pb.OpenRequest.FromString(data)
    except DecodeError:  # e.g. a string field that is not UTF-8
        return MalformedRequest("not an OpenRequest")


def parse_cancel_request(data: bytes) -> pb.CancelRequest | MalformedRequest:
    """``Cancel``'s request deserializer, bounded and never raising like ``Open``'s."""
    if len(data) > MAX_REQUEST_BYTES:
        return MalformedRequest(f"request over {MAX_REQUEST_BYTES} bytes")
    try:
        return pb.CancelRequest.FromString(data)
    except DecodeError:
        return MalformedRequest("not a CancelRequest")


class Serves(Protocol):
    """What serves the service: an ``Open`` and a ``Cancel`` handler (the producer's
    servicer, or the conformance mode's)."""

    async def Open(self, request: Any, context: Any) -> Any: ...  # noqa: N802

    async def Cancel(self, request: Any, context: Any) -> Any: ...  # noqa: N802


def add_servicer(servicer: Serves, server: grpc.aio.Server) -> None:
    """Register ``Open`` and ``Cancel`` with bounded deserializers (the generated helper's
    are not)."""
    handlers = {
        "Open": grpc.unary_stream_rpc_method_handler(
            servicer.Open,
            request_deserializer=parse_open_request,
            response_serializer=pb.Chunk.SerializeToString,
        ),
        "Cancel": grpc.unary_unary_rpc_method_handler(
            servicer.Cancel,
            request_deserializer=parse_cancel_request,
            response_serializer=pb.CancelReply.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    # Registered with gRPC's core too (as the generated helper does): a call to a method
    # it knows is matched there, not looked up through the generic handlers per call.
    server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]
