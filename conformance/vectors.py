"""Where the vectors live, and how a vector's expected verdict is obtained: from the Python
core (``shared.consumer_core``), fed exactly as ``shared.replay.consume`` feeds it."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from replywire.shared.consumer_core import ReplyConsumer
from replywire.shared.consumer_limits import Limits
from replywire.shared.digest import canonical_json
from replywire.shared.faults import Ending, Transmission
from replywire.shared.recording import BoundCase
from replywire.shared.replay import consume
from replywire.shared.result import StreamResult
from replywire.shared.vectors import CHAT_EXPECTED_KEYS, End, Mode, Vector, load_vectors
from replywire.shared.wire import WireFormat

ROOT: Final = Path(__file__).resolve().parents[1]
KIT: Final = ROOT / "fixtures" / "conformance"
VECTORS_DIR: Final = KIT / "vectors"
SCHEMA: Final = KIT / "vector.schema.json"
#: What a vector id (and so its stream id) may be made of: a gRPC stream id is visible ASCII.
ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")


def core_result(
    binding: Mapping[str, Any],
    wire: str,
    chunks: tuple[bytes, ...],
    end: End,
    limits: Mapping[str, int] | None = None,
    ignore_duplicates: bool = False,
) -> dict[str, Any]:
    """The Python core's verdict on one transmission, as a vector's ``expected`` (with a
    chat reply's ``turn``, ``call`` and ``notes`` where its result has them)."""
    consumer = ReplyConsumer(
        binding,
        wire=WireFormat(wire),
        limits=Limits(**limits) if limits else None,
        ignore_duplicates=ignore_duplicates,
    )
    ending = Ending.TRANSPORT_ERROR if end is End.TRANSPORT_ERROR else Ending.CLEAN
    result = consume(consumer, Transmission(frames=(), chunks=chunks, ending=ending))
    return {
        "status": result.status.value,
        "reason": result.reason,
        "detail": result.detail,
        "frames": result.stats.application_frames,
        "bytes": result.stats.bytes_received,
        "content_sha256": hashlib.sha256(result.provisional_content.encode("utf-8")).hexdigest(),
        "provisional_content": result.provisional_content,
        "accepted_answer": result.accepted_answer,
        "citations": [dict(citation) for citation in result.citations],
        **chat_keys(result),
    }


def chat_keys(result: StreamResult) -> dict[str, Any]:
    """A chat reply's keys of a result (``turn``, ``call``, ``notes``), as its document
    holds them: those it has, none for a grounded or a text reply
    (docs/protocol.md#result-document)."""
    values = {key: getattr(result, key, None) for key in CHAT_EXPECTED_KEYS}
    return {
        key: json.loads(json.dumps(value)) for key, value in values.items() if value is not None
    }


def wire_modes(
    chunks: tuple[bytes, ...], end: End, limits: Mapping[str, int] | None
) -> tuple[Mode, ...]:
    """Where a vector runs. Over gRPC: every chunk is sent verbatim; but a consumer CLI has
    no flag for the terminal reason limit, and an RPC that fails before its first message
    is, to a consumer, a producer that answered instead of streaming (reported with the
    producer's reason, not as a broken transport). Those run in the core mode only."""
    if limits and "max_reason_chars" in limits:
        return (Mode.CORE,)
    if end is End.TRANSPORT_ERROR and not chunks:
        return (Mode.CORE,)
    return (Mode.CORE, Mode.WIRE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sent:
    """What a vector sends (its verdict is the core's): the request and the transmission."""

    id: str
    description: str
    rule: str
    wire: str
    case_id: str
    binding: Mapping[str, Any]
    chunks: tuple[bytes, ...]
    end: End = End.EOF
    limits: Mapping[str, int] | None = None
    ignore_duplicates: bool = False


def make_vector(sent: Sent) -> Vector:
    """The vector of ``sent``, with the Python core's verdict as its expected one."""
    if not ID_PATTERN.fullmatch(sent.id):
        raise ValueError(f"vector id {sent.id!r}")
    return Vector(
        id=sent.id,
        description=sent.description,
        rule=sent.rule,
        wire=sent.wire,
        stream_id=sent.id,
        case_id=sent.case_id,
        binding=sent.binding,
        binding_bytes=canonical_json(sent.binding),
        chunks=sent.chunks,
        end=sent.end,
        limits=dict(sent.limits) if sent.limits else None,
        ignore_duplicates=sent.ignore_duplicates,
        modes=wire_modes(sent.chunks, sent.end, sent.limits),
        expected=core_result(
            sent.binding, sent.wire, sent.chunks, sent.end, sent.limits, sent.ignore_duplicates
        ),
    )


class Group:
    """The vectors of one file; ``add`` names a vector ``<group>.<name>.<wire>``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.vectors: list[Vector] = []

    def add(  # a vector's own fields, the last ones by keyword
        self,
        name: str,
        description: str,
        rule: str,
        wire: str,
        chunks: Sequence[bytes],
        *,
        case: BoundCase,
        **options: Any,
    ) -> None:
        """Add the vector ``<group>.<name>.<wire>`` for ``case`` (``options``: ``binding``
        when not the case's, ``end``, ``limits``, ``ignore_duplicates``)."""
        binding = options.pop("binding", None)
        sent = Sent(
            id=f"{self.name}.{name}.{wire}",
            description=description,
            rule=rule,
            wire=wire,
            case_id=case.case_id,
            binding=case.binding if binding is None else binding,
            chunks=tuple(chunks),
            **options,
        )
        self.vectors.append(make_vector(sent))


def load_all(directory: Path = VECTORS_DIR) -> list[Vector]:
    """Every vector of every file in ``directory``, in file-name order."""
    vectors: list[Vector] = []
    for path in sorted(directory.glob("*.json")):
        vectors.extend(load_vectors(path.read_bytes()))
    return vectors
