"""A ledger entry's lifecycle: its states and the one table of moves both ledgers obey.

An entry (one provider call, named by its identity and call id) is ``absent`` until a
reserve writes it ``reserved``; it leaves ``reserved`` exactly once, to ``settled`` (the
provider's usage, or the reservation when that usage is implausible), ``failed`` (the
request may have been sent and no usage came back: the worst case stays committed) or
``released`` (never sent: nothing counted). A reserve given up on before it was written
leaves a ``released`` tombstone in its place, which a late copy of the reserve finds.
``mark_sending`` moves nothing (``sending_at``), and only from ``reserved``.

The file ledger checks every move against this table; the Redis ledger's Lua scripts make
the same moves, and ``tests/integration/test_ledger_lifecycle.py`` drives every input from
every state through both ledgers and checks each move they made, or refused, against it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from replywire.shared.fsm import MachineSpec


class EntryState(StrEnum):
    ABSENT = "absent"
    RESERVED = "reserved"
    SETTLED = "settled"
    FAILED = "failed"
    RELEASED = "released"


class EntryInput(StrEnum):
    #: The worst case reserved (``reserve``; asked again, the same reservation answers).
    RESERVE = "reserve"
    #: The request may reach the provider from now on (``mark_sending``).
    MARK_SENDING = "mark_sending"
    #: The provider's usage (or the reservation) charged (``settle``).
    SETTLE = "settle"
    #: Sent, perhaps, and no usage came back (``keep_reservation``).
    KEEP = "keep"
    #: Never sent (``release``).
    RELEASE = "release"
    #: A reserve the producer gave up on (``abandon``): released, or a tombstone.
    ABANDON = "abandon"
    #: A lapsed owner's reservation that was never marked sending (``reconcile``).
    RECONCILE_UNSENT = "reconcile_unsent"
    #: A lapsed owner's reservation that may have been sent (``reconcile``).
    RECONCILE_SENT = "reconcile_sent"


#: The states as the stores write them (the file ledger's JSON, the Redis ledger's hashes).
RESERVED, SETTLED, FAILED, RELEASED = (
    EntryState.RESERVED.value,
    EntryState.SETTLED.value,
    EntryState.FAILED.value,
    EntryState.RELEASED.value,
)

E, I = EntryState, EntryInput  # noqa: E741 - the conventional names, as in producer/states.py
TRANSITIONS: Final = {
    (E.ABSENT, I.RESERVE): E.RESERVED,
    (E.ABSENT, I.ABANDON): E.RELEASED,
    (E.RESERVED, I.RESERVE): E.RESERVED,
    (E.RESERVED, I.MARK_SENDING): E.RESERVED,
    (E.RESERVED, I.SETTLE): E.SETTLED,
    (E.RESERVED, I.KEEP): E.FAILED,
    (E.RESERVED, I.RELEASE): E.RELEASED,
    (E.RESERVED, I.ABANDON): E.RELEASED,
    (E.RESERVED, I.RECONCILE_UNSENT): E.RELEASED,
    (E.RESERVED, I.RECONCILE_SENT): E.FAILED,
}
ENTRY: Final = MachineSpec(
    name="ledger_entry",
    states=EntryState,
    inputs=EntryInput,
    initial=E.ABSENT,
    final=frozenset({E.SETTLED, E.FAILED, E.RELEASED}),
    table=TRANSITIONS,
)
#: The states an entry can leave ``reserved`` for, and what each means for the sums: a
#: settled entry counts its cost, a failed one its reservation, a released one nothing.
LEFT_RESERVED: Final = frozenset(
    target for (state, _), target in TRANSITIONS.items() if state is E.RESERVED
) - {E.RESERVED}


def allowed(state: str, event: EntryInput) -> EntryState | None:
    """Where ``event`` takes an entry in ``state`` (a stored string), or None: not a move."""
    try:
        return ENTRY.target(EntryState(state), event)
    except ValueError:  # a state no ledger writes: nothing leads anywhere from it
        return None
