"""What the Redis reply log's scripts do, and what a relayed ``Cancel`` carries.

The Lua scripts (``CREATE``, ``WRITE``, ``REFRESH``, ``CANCEL``, and the reads ``FIND``
and ``FOLLOW``) each touch one reply's keys together, atomically, in one hash slot (a
Redis Cluster runs each on the master of the reply's slot; ``producer.replylog.redis_log``
names the keys and runs them); ``WRITE`` and ``CANCEL`` publish on the reply's channels
(``producer.replylog.notify``). The moves they make are the table of
``producer.replylog.states`` (each script's comment names its inputs;
``tests/integration/test_reply_log_lifecycle.py`` runs each from every state). A relayed
``Cancel`` as the cancel list holds it: ``relay_value`` writes it, ``relayed_cancel``
reads it back (the caller's name, and its ``traceparent`` when the relaying replica
traces, bounded).
"""

from __future__ import annotations

import json
from typing import Any, Final

#: Relayed ``Cancel`` requests a reply's cancel list keeps (the newest) until its generator
#: takes them.
MAX_CANCEL_REQUESTS: Final = 16
#: The longest ``traceparent`` a relayed ``Cancel`` or a reply's ``first_span`` carries (a
#: W3C one of version 00 is 55 characters); a longer one is neither written nor read.
MAX_RELAYED_TRACEPARENT_CHARS: Final = 256

# The table's create. KEYS: lease, log, meta, cancel. ARGV: token, lease ms, expire ms,
# binding, wire, first span ("": none). A reply that is being generated (its lease is held)
# or complete (its end entry is empty) is never claimed: whoever claims the lease first
# generates it.
CREATE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local tail = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if tail and tail[2][1] == 'e' and tail[2][2] == '' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
redis.call('HSET', KEYS[3], 'binding', ARGV[4], 'wire', ARGV[5])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[3], 'first_span', ARGV[6]) end
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 1
"""
# The table's append (field "d"), end (field "e", value ""), end_in_error and
# append_over_bound (field "e", a reason code), and write_finds_log_behind. KEYS: lease,
# log, meta, cancel. ARGV: token, entry id ("0-SEQUENCE"), field, value, maxlen, expire ms,
# the reply's notify channel, the id of the entry before it ("0-0": none), the reason
# a log found behind ends with. Idempotent: a write whose entry is already the last one (a
# retry after its answer was lost) is done (1); any other write needs the lease (else 0).
# In order: an entry is added only right after the one before it; a log whose last entry
# is another (it lost acknowledged writes: a failover promoted a replica that had not
# received them) is ended there, the end entry at this entry's id, past everything
# written, with the reason (2): no reader is handed a gap or a different continuation.
# Each entry written is published (its id) to the reply's followers on every replica.
WRITE: Final = """
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if last and last[1] == ARGV[2] then return 1 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local held = last and last[1] or '0-0'
local answer = 1
if held ~= ARGV[8] then
  redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[5], ARGV[2], 'e', ARGV[9])
  answer = 2
else
  redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[5], ARGV[2], ARGV[3], ARGV[4])
end
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
if ARGV[3] == 'e' or answer == 2 then redis.call('DEL', KEYS[1], KEYS[4]) end
redis.call('PUBLISH', ARGV[7], ARGV[2])
return answer
"""
# The table's refresh_lease. KEYS: lease, log, meta, cancel. ARGV: token, lease ms, expire
# ms, relayed Cancels to take (0: none). {0} when the lease is not this token's, else {1,
# the Cancels taken...}.
REFRESH: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
local taken = {1}
local n = tonumber(ARGV[4])
if n > 0 then
  local popped = redis.call('LPOP', KEYS[4], n)
  if popped then for _, v in ipairs(popped) do taken[#taken + 1] = v end end
end
return taken
"""


# The table's request_cancel. KEYS: lease, cancel. ARGV: caller, expire ms, max requests
# kept, the reply's cancels channel. Queued only while a generator holds the lease; the
# newest requests are kept; the generator is told at once (published), and looks at each
# lease refresh too.
CANCEL: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PUBLISH', ARGV[4], '1')
return 1
"""


# A reply as a lookup finds it, read together (a script: one slot, atomic, on a lone server
# and on a Cluster alike). KEYS: lease, log, meta. {meta's fields and values, 1 when the
# lease is held (else 0), the log's last entry (none: empty)}.
FIND: Final = """
return {redis.call('HGETALL', KEYS[3]), redis.call('EXISTS', KEYS[1]),
        redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)}
"""
# A follower's look: what follows its last entry, and whether the lease is held, read
# together. KEYS: lease, log. ARGV: the last entry id read ("0-0": none), entries at most.
FOLLOW: Final = """
return {redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', ARGV[2]),
        redis.call('EXISTS', KEYS[1])}
"""

Entries = list[tuple[bytes, dict[bytes, bytes]]]


def entries_of(raw: Any) -> Entries:
    """Stream entries as a script returns them (``[[id, [field, value, ...]], ...]``) as
    redis-py's own commands give them: ``(id, {field: value})``."""
    return [(entry_id, _pairs(fields)) for entry_id, fields in raw or ()]


def _pairs(flat: Any) -> dict[bytes, bytes]:
    items = list(flat or ())
    return dict(zip(items[::2], items[1::2], strict=True))


def found_of(raw: Any) -> tuple[dict[bytes, bytes], bool, Entries]:
    """``FIND``'s answer: the meta hash, whether the lease is held, the log's last entry."""
    meta, leased, tail = raw
    return _pairs(meta), bool(leased), entries_of(tail)


#: ``WRITE``'s answer when it found the log behind (and ended the reply there).
BEHIND: Final = 2


def ms(seconds: float) -> int:
    """A time as the scripts take it (``PX``, ``PEXPIRE``): milliseconds, at least one."""
    return max(int(seconds * 1000), 1)


class Scripts:
    """The scripts a log's generations run, registered on their client."""

    def __init__(self, client: Any) -> None:
        self.create = client.register_script(CREATE)
        self.write = client.register_script(WRITE)
        self.refresh = client.register_script(REFRESH)
        self.find = client.register_script(FIND)


def bounded(traceparent: str | None) -> str | None:
    """A trace context the log keeps: None when there is none or it is past the bound."""
    if not traceparent or len(traceparent) > MAX_RELAYED_TRACEPARENT_CHARS:
        return None
    return traceparent


def relay_value(caller: str, traceparent: str | None) -> str:
    """A relayed ``Cancel`` as the cancel list holds it: the caller's name alone (no trace
    context, or one past the bound), else a JSON object with its ``traceparent``."""
    if not traceparent or len(traceparent) > MAX_RELAYED_TRACEPARENT_CHARS:
        return caller
    return json.dumps({"caller": caller, "traceparent": traceparent}, separators=(",", ":"))


def relayed_cancel(value: bytes) -> tuple[str, str | None]:
    """(caller, traceparent) of a cancel list entry; anything but ``relay_value``'s JSON
    object is a caller's name alone (the generator compares it with the reply's own)."""
    text = value.decode(errors="replace")
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except ValueError:
            return text, None
        if isinstance(fields, dict) and isinstance(fields.get("caller"), str):
            traceparent = fields.get("traceparent")
            if isinstance(traceparent, str) and len(traceparent) <= MAX_RELAYED_TRACEPARENT_CHARS:
                return fields["caller"], traceparent
            return fields["caller"], None
    return text, None
