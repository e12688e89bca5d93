"""The hashed recording as a source: development cases only, faults when allowed; the
recorded text replies (``shared.text_recording``); the development text source
(``shared.texts``): a text binding's own text, echoed in deltas of six code points; and
the recorded chat turns (``shared.chat_recording``), frame for frame. Every reply is cut
and faulted as a recorded reply is.

A fault-free stream of a case is the same every time: its transmission (frames, their
wire bytes, the chunks) is kept per (binding, wire, chunking), a bounded number of them.
A binding is accepted by comparing its bytes with the recording's canonical bytes of
the case's binding (what every consumer sends); any other bytes are parsed and checked
in full, with the same reason codes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncGenerator
from typing import Any, Final

from replywire.producer.replylog.interface import Entry, log_entries
from replywire.producer.sources import Stall, check_kind
from replywire.shared.chat_recording import ChatRecording
from replywire.shared.digest import canonical_json, within_depth
from replywire.shared.errors import RequestRefused
from replywire.shared.faults import TRANSPORT_FAULTS, Ending, Transmission, transmit
from replywire.shared.frames import Frame
from replywire.shared.kinds import ReplyKind
from replywire.shared.reasons import Reason
from replywire.shared.recording import BoundCase, Recording
from replywire.shared.requests import (
    MAX_BINDING_BYTES,
    MAX_BINDING_DEPTH,
    CheckedRequest,
    parse_binding,
)
from replywire.shared.text_recording import TextRecording
from replywire.shared.texts import check_text_binding, is_text_case, text_case
from replywire.shared.wire import WireFormat
from replywire.shared.wire.chunking import ChunkPlan

#: Fault-free transmissions kept (cases x wires x chunkings; the oldest goes first).
MAX_KEPT_TRANSMISSIONS: Final = 256


#: The kinds of reply this source serves.
SERVED: Final = frozenset({ReplyKind.GROUNDED, ReplyKind.TEXT, ReplyKind.CHAT})


class RecordingPlan:
    needs_close = False  # nothing is held: no upstream, no reservation

    def __init__(
        self,
        transmission: Transmission,
        checked: CheckedRequest,
        entries: tuple[Entry, ...] | None = None,
    ) -> None:
        self.transmission = transmission
        self.abort_details: Reason | None = None
        fault = checked.fault.kind if checked.fault else None
        # Transport faults leave the frames as they are: the log holds the whole reply,
        # and the fault applies to the first delivery only. Frame faults are not logged.
        self.reply_frames: tuple[Frame, ...] | None = (
            transmission.frames if fault is None or fault in TRANSPORT_FAULTS else None
        )
        #: The reply's log entries (the frames' wire bytes), made once per fault-free
        #: transmission: None with a fault (the log then encodes the frames itself).
        self.reply_entries = entries
        self.fixed_chunks: tuple[bytes, ...] | None = (
            transmission.chunks
            if transmission.stall is None and transmission.ending is not Ending.TRANSPORT_ERROR
            else None
        )
        self.description: dict[str, Any] = {
            "wire": checked.wire.value,
            "chunks": checked.plan.describe(),
            "fault": checked.fault.kind.value if checked.fault else None,
            "planned_chunks": len(transmission.chunks),
        }

    async def chunks(self) -> AsyncGenerator[bytes | Stall, None]:
        stall = self.transmission.stall
        for index, data in enumerate(self.transmission.chunks):
            yield data
            if stall is not None and index + 1 == stall.after_chunks:
                yield Stall(stall.milliseconds)
        if self.transmission.ending is Ending.TRANSPORT_ERROR:
            self.abort_details = Reason.CONTROLLED_TRANSPORT_ABORT

    def live_frames(self) -> AsyncGenerator[Frame, None] | None:
        return None  # known in advance: reply_frames

    async def close(self, outcome: str) -> None:
        return None


class RecordingSource:
    name = "recording"
    regenerates = True

    def __init__(
        self,
        recording: Recording,
        texts: TextRecording | None = None,
        chats: ChatRecording | None = None,
    ) -> None:
        self.recording = recording
        #: The recorded text replies (``fixtures/text-recording.json``), if given.
        self.texts = texts
        #: The recorded chat turns (``fixtures/chat-recording.json``), if given.
        self.chats = chats
        #: Each case's binding as a consumer sends it, where parsing it would accept it.
        self._canonical: dict[str, bytes] = {}
        for case_id in recording.case_ids:
            binding = recording.case(case_id).binding
            canonical = canonical_json(binding)
            if len(canonical) <= MAX_BINDING_BYTES and within_depth(binding, MAX_BINDING_DEPTH):
                self._canonical[case_id] = canonical
        self._kept: OrderedDict[
            tuple[str, WireFormat, ChunkPlan], tuple[Transmission, tuple[Entry, ...]]
        ] = OrderedDict()

    def bound_case(self, case_id: str, binding_json: bytes) -> BoundCase:
        """The recorded case this binding names: the recording's own bytes are accepted as
        they are; otherwise the case is checked (``development_case_required``), then the
        bytes are parsed (``binding_not_canonical``) and compared
        (``request_binding_mismatch``)."""
        if binding_json == self._canonical.get(case_id):
            return self.recording.case(case_id)
        self.recording.case(case_id)
        return self.recording.bind_request(case_id, parse_binding(binding_json))

    def _transmission(
        self, case: BoundCase, checked: CheckedRequest
    ) -> tuple[Transmission, tuple[Entry, ...] | None]:
        """The transmission (and, fault-free, its log entries), kept per (binding, wire,
        chunking) when fault-free: by binding, as a text and a grounded case share an id."""
        key = (case.binding_sha256, checked.wire, checked.plan)
        kept = self._kept.get(key) if checked.fault is None else None
        if kept is not None:
            return kept
        transmission = transmit(
            case,
            wire=checked.wire,
            plan=checked.plan,
            fault=checked.fault,
            foreign_binding_sha256=self._foreign(case),
        )
        if checked.fault is not None:
            return transmission, None
        entries = log_entries(transmission.frames, transmission.encoded)
        self._kept[key] = (transmission, entries)
        while len(self._kept) > MAX_KEPT_TRANSMISSIONS:
            self._kept.popitem(last=False)
        return transmission, entries

    def case_of(self, checked: CheckedRequest) -> BoundCase:
        """The case a request asks for: a recorded case, or the development text source's
        (the text binding's own text); refused with the reason of the first check that fails."""
        check_kind(checked, SERVED)
        if checked.kind is ReplyKind.GROUNDED:
            return self.bound_case(checked.case_id, checked.binding_json)
        if checked.kind is ReplyKind.CHAT:  # a recorded turn only: nothing makes one up
            if self.chats is None or checked.case_id not in self.chats:
                raise RequestRefused(Reason.DEVELOPMENT_CASE_REQUIRED, checked.case_id)
            return self.chats.bind_request(checked.case_id, parse_binding(checked.binding_json))
        if self.texts is not None and checked.case_id in self.texts:
            return self.texts.bind_request(checked.case_id, parse_binding(checked.binding_json))
        if not is_text_case(checked.case_id):
            raise RequestRefused(Reason.DEVELOPMENT_CASE_REQUIRED, checked.case_id)
        binding, text = check_text_binding(parse_binding(checked.binding_json), checked.case_id)
        return text_case(binding, text)

    def verify(self, checked: CheckedRequest) -> None:
        self.case_of(checked)

    async def prepare(self, checked: CheckedRequest, *, identity: str) -> RecordingPlan:
        del identity  # a recorded reply costs nothing
        case = self.case_of(checked)
        transmission, entries = self._transmission(case, checked)
        return RecordingPlan(transmission, checked, entries)

    async def aclose(self) -> None:
        return None

    def _foreign(self, case: BoundCase) -> str:
        """Another binding's hash, for the foreign-binding fault: another recorded case's,
        or, for a text or a chat turn, the first recorded case's."""
        if case.chat_items is not None or is_text_case(case.case_id):
            return self.recording.case(self.recording.case_ids[0]).binding_sha256
        return self.recording.foreign_binding_sha256(case.case_id)
