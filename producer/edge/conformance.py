"""``python -m producer --conformance DIR``: serve the conformance vectors, and nothing else.

No recording and no provider: an ``Open`` whose stream id is a vector's is answered with
that vector's chunks, each one ``Chunk`` message, verbatim, and then the RPC ends as the
vector says: OK for ``eof``, ``UNAVAILABLE`` / ``controlled_transport_abort`` for
``transport_error``. The request must be the vector's (its case id, its binding's exact
canonical bytes, its wire, no fault, no resume); anything else is refused with a registered
reason, so a consumer that sends another request is never served a verdict for it:

* an unknown stream id, another wire, or a malformed request: ``invalid_request``;
* another reply kind than the vector's binding names: ``kind_unsupported``;
* another case id or other binding bytes: ``request_binding_mismatch``;
* a fault: ``faults_not_allowed``; a resume: ``resume_unavailable``.

The kit's runner (``python -m conformance run --wire``) starts it on a free port.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any, Final

import grpc
import structlog

from replywire.producer.edge.rpc import (
    MalformedRequest,
    add_servicer,
)
from replywire.producer.edge.security import is_loopback
from replywire.producer.edge.server import server_options
from replywire.producer.files import write_atomically
from replywire.runtime.logs import flush_trace
from replywire.shared.errors import ConfigurationError, RequestRefused
from replywire.shared.kinds import kind_of
from replywire.shared.pb import replywire_pb2 as pb
from replywire.shared.reason_registry import REASONS
from replywire.shared.reasons import Reason
from replywire.shared.requests import KIND_CODES, WIRE_CODES, check_envelope
from replywire.shared.vectors import End, Vector, VectorError, load_vectors
from replywire.shared.wire import WireFormat

#: The wire a request's ``wire_format`` names (unspecified is the length-prefixed wire).
_WIRES: Final = {code: wire.value for wire, code in WIRE_CODES.items()} | {
    pb.WIRE_FORMAT_UNSPECIFIED: WireFormat.LENGTH_PREFIXED.value
}


def load_folder(folder: Path) -> dict[str, Vector]:
    """Every vector of every ``*.json`` file in ``folder``, by stream id
    (``ConfigurationError`` for a folder without vectors, a bad file or a stream id twice)."""
    vectors: dict[str, Vector] = {}
    try:
        paths = sorted(folder.glob("*.json"))
        for path in paths:
            for vector in load_vectors(path.read_bytes()):
                if vector.stream_id in vectors:
                    raise ConfigurationError(f"--conformance: stream id {vector.stream_id} twice")
                vectors[vector.stream_id] = vector
    except OSError as error:
        raise ConfigurationError(f"--conformance {folder}: {error.strerror}") from error
    except VectorError as error:
        raise ConfigurationError(f"--conformance {folder}: {error}") from error
    if not vectors:
        raise ConfigurationError(f"--conformance {folder}: no vectors in it")
    return vectors


def refusal(request: pb.OpenRequest | MalformedRequest, vector: Vector | None) -> Reason | None:
    """Why ``request`` is not the request of the vector its stream id names, or None."""
    if isinstance(request, MalformedRequest) or vector is None:
        return Reason.INVALID_REQUEST
    if request.HasField("fault") and request.fault.kind != pb.FAULT_KIND_UNSPECIFIED:
        return Reason.FAULTS_NOT_ALLOWED
    if request.resume_after:
        return Reason.RESUME_UNAVAILABLE
    if _WIRES.get(request.wire_format) != vector.wire:
        return Reason.INVALID_REQUEST
    if request.kind != KIND_CODES[kind_of(vector.binding)]:
        return Reason.KIND_UNSUPPORTED
    if request.case_id != vector.case_id or request.binding_json != vector.binding_bytes:
        return Reason.REQUEST_BINDING_MISMATCH
    return None


class ConformanceServicer:
    """``Open`` serves a vector's chunks; ``Cancel`` cancels nothing (a vector's stream is
    over when its chunks are sent)."""

    def __init__(self, vectors: dict[str, Vector]) -> None:
        self.vectors = vectors
        self._log: structlog.typing.FilteringBoundLogger = structlog.get_logger()

    async def Open(  # noqa: N802  # the RPC's name
        self, request: pb.OpenRequest | MalformedRequest, context: Any
    ) -> None:
        stream_id = "" if isinstance(request, MalformedRequest) else request.stream_id
        vector = None if isinstance(request, MalformedRequest) else self.vectors.get(stream_id)
        if isinstance(request, pb.OpenRequest):
            try:
                check_envelope(request)
            except RequestRefused:  # an id no trace may hold
                stream_id, vector = "", None
        reason = refusal(request, vector)
        if reason is not None or vector is None:
            reason = reason or Reason.INVALID_REQUEST
            self._log.info("conformance_refused", stream_id=stream_id, reason=reason.value)
            await context.abort(grpc.StatusCode[REASONS[reason].grpc_code], reason.value)
            return
        self._log.info("conformance_serving", stream_id=stream_id, chunks=len(vector.chunks))
        for chunk in vector.chunks:
            await context.write(pb.Chunk(data=chunk))
        self._log.info("conformance_served", stream_id=stream_id, end=vector.end.value)
        if vector.end is End.TRANSPORT_ERROR:
            ending = Reason.CONTROLLED_TRANSPORT_ABORT
            await context.abort(grpc.StatusCode[REASONS[ending].grpc_code], ending.value)

    async def Cancel(  # noqa: N802  # the RPC's name
        self, request: pb.CancelRequest | MalformedRequest, context: Any
    ) -> pb.CancelReply:
        return pb.CancelReply(cancelled=False)


async def serve_conformance(
    folder: Path, host: str, port: int, ready_file: Path | None, *, insecure: bool = False
) -> int:
    """Serve ``folder``'s vectors on ``host:port`` until SIGINT / SIGTERM: plaintext, so on
    a loopback address only unless ``insecure``."""
    if not is_loopback(host) and not insecure:
        raise ConfigurationError(
            f"refusing to serve the conformance vectors on {host} (not a loopback address) "
            "without --insecure"
        )
    vectors = load_folder(folder)
    servicer = ConformanceServicer(vectors)
    server = grpc.aio.server(options=server_options())
    add_servicer(servicer, server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as error:
        raise OSError("the address is in use or not an address of this host") from error
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    structlog.get_logger().info(
        "producer_listening", host=host, port=bound, conformance=str(folder), vectors=len(vectors)
    )
    flush_trace()
    print(f"listening on {host}:{bound}", flush=True)
    if ready_file is not None:
        write_atomically(ready_file, f"{host}:{bound}".encode())
    await stop.wait()
    await server.stop(1.0)
    structlog.get_logger().info("producer_stopped")
    return 0


def run(
    folder: Path, host: str, port: int, ready_file: Path | None, *, insecure: bool = False
) -> int:
    """The conformance mode's entry from ``producer.cli``: exit 0, or 2 for a folder that
    holds no valid vectors or an address it cannot listen on."""
    try:
        return asyncio.run(serve_conformance(folder, host, port, ready_file, insecure=insecure))
    except ConfigurationError as error:
        print(f"producer: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"producer: cannot listen on {host}:{port}: {error}", file=sys.stderr)
        return 2
