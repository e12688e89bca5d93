"""A ledger entry's lifecycle, one table (``producer.budget.entry_states``) obeyed by both
ledgers: every input driven from every state, through the file ledger and through the Redis
ledger's Lua scripts on a real server; a move either ledger makes is the table's, and a move
the table lacks is refused with the entry left as it was. The scripts name no state the
table does not have."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from replywire.producer.budget import redis_scripts
from replywire.producer.budget.entry_states import ENTRY, EntryInput, EntryState
from replywire.producer.budget.ledger import AlreadyLeft, Ledger, Owner
from replywire.producer.budget.options import RedisOptions
from replywire.producer.budget.stores import open_ledger
from tests.budget_values import BODY, GOOD_USAGE
from tests.redis_server import RedisServer, redis_server

CALL = "call"
_prefixes = itertools.count()


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture(params=["file", "redis"])
def two_owners(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Ledger, Ledger]:
    """Two producers (owners A and B) on one fresh store."""
    if request.param == "file":
        spec, options = str(tmp_path / "ledger.json"), RedisOptions()
    else:
        spec = request.getfixturevalue("redis").url
        options = RedisOptions(prefix=f"lifecycle-{next(_prefixes)}:")
    return tuple(  # type: ignore[return-value]
        open_ledger(spec, budget_usd=1.0, options=options, owner=Owner.new(lease_s=30))
        for _ in range(2)
    )


def state_of(ledger: Ledger) -> EntryState:
    found = [entry for entry in ledger.entries() if entry["call_id"] == CALL]
    return EntryState(found[0]["state"]) if found else EntryState.ABSENT


def _reserve(a: Ledger) -> None:
    a.reserve(CALL, body=BODY, max_output_tokens=1000)


def _reconcile(a: Ledger, b: Ledger, *, sent: bool) -> None:
    """A's lease ends (it stopped) and B reconciles; A marked the call sending first, if it
    could."""
    if sent:
        with contextlib.suppress(AlreadyLeft, KeyError):
            a.mark_sending(CALL)
    a.drop_lease()
    b.reconcile()


#: Each input, as a ledger's caller makes it (A the entry's owner, B another producer).
DRIVE: dict[EntryInput, Callable[[Ledger, Ledger], object]] = {
    EntryInput.RESERVE: lambda a, b: _reserve(a),
    EntryInput.MARK_SENDING: lambda a, b: a.mark_sending(CALL),
    EntryInput.SETTLE: lambda a, b: a.settle(CALL, GOOD_USAGE),
    EntryInput.KEEP: lambda a, b: a.keep_reservation(CALL, "no usage"),
    EntryInput.RELEASE: lambda a, b: a.release(CALL, "never sent"),
    EntryInput.ABANDON: lambda a, b: a.abandon(
        CALL, body=BODY, max_output_tokens=1000, why="reserve_unanswered"
    ),
    EntryInput.RECONCILE_UNSENT: lambda a, b: _reconcile(a, b, sent=False),
    EntryInput.RECONCILE_SENT: lambda a, b: _reconcile(a, b, sent=True),
}


#: How owner A puts the call in each state: the table's moves that lead there.
SET_UP: dict[EntryState, tuple[EntryInput, ...]] = {
    EntryState.ABSENT: (),
    EntryState.RESERVED: (EntryInput.RESERVE,),
    EntryState.SETTLED: (EntryInput.RESERVE, EntryInput.SETTLE),
    EntryState.FAILED: (EntryInput.RESERVE, EntryInput.KEEP),
    EntryState.RELEASED: (EntryInput.RESERVE, EntryInput.RELEASE),
}


def test_every_input_has_a_way_to_drive_it() -> None:
    assert set(SET_UP) == set(EntryState)
    assert set(DRIVE) == set(EntryInput)


@pytest.mark.parametrize("state", list(EntryState))
@pytest.mark.parametrize("event", list(EntryInput))
def test_each_ledger_moves_an_entry_as_the_table_says(
    two_owners: tuple[Ledger, Ledger], state: EntryState, event: EntryInput
) -> None:
    a, b = two_owners
    for move in SET_UP[state]:
        DRIVE[move](a, b)
    assert state_of(a) is state
    target = ENTRY.target(state, event)
    if target is None:
        with contextlib.suppress(AlreadyLeft, KeyError):  # refused, as a move not in the table
            DRIVE[event](a, b)
        assert state_of(a) is state, f"{event} moved a {state} entry: not in the table"
    else:
        DRIVE[event](a, b)
        assert state_of(a) is target


def test_the_scripts_name_only_the_table_s_states() -> None:
    """Every state a Lua script compares with or writes is one of the table's (an entry that
    exists is never ``absent``: that is no key at all)."""
    scripts = "\n".join(
        value for name, value in vars(redis_scripts).items() if name.isupper() and "redis" in value
    )
    written = set(re.findall(r"'HSET',[^)]*?'state',\s*'(\w+)'", scripts))
    compared = set(re.findall(r"(?:==|~=)\s*'(\w+)'", scripts))
    assigned = set(re.findall(r"\bstate\s*=\s*'(\w+)'", scripts))
    named = {s.value for s in EntryState} - {EntryState.ABSENT.value}
    assert written | compared | assigned <= named, sorted((written | compared | assigned) - named)
    assert written | assigned == {EntryState.RESERVED.value, EntryState.RELEASED.value,
                                  EntryState.FAILED.value}  # fmt: skip
