"""A logged reply's lifecycle: its states and the one table of moves both logs obey.

A reply (named by its ``ReplyKey``) is ``absent`` until a ``create`` claims it: it is then
``generating``, its frames appended one by one, until it ends, once: ``complete`` (its
terminal frame was the last entry) or ``ended_in_error`` (a reason code: the generation
stopped without its terminal, or the log ended it past a bound, or found itself behind
what its generator wrote). In the shared log the generator holds a lease; a lease that
lapses with no end entry leaves the reply ``lost``. A reply that ended in error, or was
lost, may be created anew (a source that regenerates, a take-over); a complete one never
is. An ended or lost reply is dropped in time (its TTL); the memory log also drops the
oldest ended reply to make room for a new one. Nothing is final: a dropped reply's key is
``absent`` again, free to be claimed.

What each log records for each state:

================  ==========================================  ===============================
state             memory log (``memory``)                     Redis log (``redis_log``)
================  ==========================================  ===============================
absent            no reply under the key                      no ``meta`` hash
generating        a reply, not ended                          ``meta``, the ``lease`` held,
                                                              no end entry
complete          ended, ``error`` None                       end entry ``e`` = ""
ended_in_error    ended, ``error`` the reason code            end entry ``e`` = the reason
lost              (none: no lease; its generator is this      ``meta``, no ``lease``, no end
                  process, whose generation always ends it)   entry
================  ==========================================  ===============================

The memory log makes each move by this table, and refuses one it lacks as it always has
(``ReplyBusy``, a write to an ended reply, the first ``end`` winning, ``stream_limit``);
the Redis log's Lua scripts (``scripts``) make the same moves.
``tests/integration/test_reply_log_lifecycle.py`` drives every input from every state
through both logs and checks each move they made, or refused, against it, and each script
on a real server.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from replywire.shared.fsm import MachineSpec


class ReplyState(StrEnum):
    ABSENT = "absent"
    GENERATING = "generating"
    COMPLETE = "complete"
    ENDED_IN_ERROR = "ended_in_error"
    LOST = "lost"


class ReplyInput(StrEnum):
    #: The reply claimed by whoever creates it (``create``): new, or anew.
    CREATE = "create"
    #: The next frame, within the bounds (``append``, ``extend``).
    APPEND = "append"
    #: A frame past ``max_frames`` or ``max_bytes``: the log ends the reply
    #: ``reply_log_limit`` (``append`` raises ``ReplyLogFailed``).
    OVERFLOW = "append_over_bound"
    #: A write (a frame or the end) finds the log holding fewer frames than its generator
    #: wrote: a store's failover lost writes it had acknowledged. The shared log ends the
    #: reply ``reply_log_behind`` there, past every frame written (``append`` raises
    #: ``ReplyLogFailed``).
    BEHIND = "write_finds_log_behind"
    #: The terminal frame was the last entry (``end()``).
    END = "end"
    #: Ended without its terminal (``end(reason)``).
    END_IN_ERROR = "end_in_error"
    #: The generator refreshes its lease (the shared log's ``REFRESH``).
    REFRESH = "refresh_lease"
    #: The generator went silent for a lease: its lease lapses.
    LAPSE = "lease_lapses"
    #: Another replica relays a caller's ``Cancel`` to the generator (``request_cancel``).
    REQUEST_CANCEL = "request_cancel"
    #: Its TTL ran out (``ttl_s`` after its end; a lost reply's, after its lease).
    EXPIRE = "expire"
    #: The memory log makes room for a new reply past ``max_replies``: the oldest ended.
    EVICT = "evict"


S, I = ReplyState, ReplyInput  # noqa: E741 - the conventional names, as in producer/states.py
TRANSITIONS: Final = {
    (S.ABSENT, I.CREATE): S.GENERATING,
    (S.GENERATING, I.APPEND): S.GENERATING,
    (S.GENERATING, I.OVERFLOW): S.ENDED_IN_ERROR,
    (S.GENERATING, I.BEHIND): S.ENDED_IN_ERROR,
    (S.GENERATING, I.END): S.COMPLETE,
    (S.GENERATING, I.END_IN_ERROR): S.ENDED_IN_ERROR,
    (S.GENERATING, I.REFRESH): S.GENERATING,
    (S.GENERATING, I.LAPSE): S.LOST,
    (S.GENERATING, I.REQUEST_CANCEL): S.GENERATING,
    (S.COMPLETE, I.EXPIRE): S.ABSENT,
    (S.COMPLETE, I.EVICT): S.ABSENT,
    (S.ENDED_IN_ERROR, I.CREATE): S.GENERATING,
    (S.ENDED_IN_ERROR, I.EXPIRE): S.ABSENT,
    (S.ENDED_IN_ERROR, I.EVICT): S.ABSENT,
    (S.LOST, I.CREATE): S.GENERATING,
    (S.LOST, I.EXPIRE): S.ABSENT,
}
REPLY: Final = MachineSpec(
    name="logged_reply",
    states=ReplyState,
    inputs=ReplyInput,
    initial=S.ABSENT,
    final=frozenset(),
    table=TRANSITIONS,
)
#: The states a reply has ended in: ``end`` again changes nothing (the first call wins).
ENDED: Final = frozenset({S.COMPLETE, S.ENDED_IN_ERROR})
#: The inputs of the shared log alone: the memory log's generator is its own process (no
#: lease to refresh or lose), every ``Cancel`` reaches it there (none is relayed) and it
#: never loses a write it took.
SHARED_LOG_ONLY: Final = frozenset({I.REFRESH, I.LAPSE, I.REQUEST_CANCEL, I.BEHIND})
#: The memory log's alone: it bounds the replies it keeps; the shared log's keys expire.
MEMORY_LOG_ONLY: Final = frozenset({I.EVICT})


def allowed(state: ReplyState, event: ReplyInput) -> ReplyState | None:
    """Where ``event`` takes a reply in ``state``, or None: not a move (refused)."""
    return REPLY.target(state, event)
