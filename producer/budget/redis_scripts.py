"""The Redis ledger's Lua scripts: each reads and changes the ledger in one step, with no
other client's command in between (``register_script``: EVALSHA, EVAL when the server lost
it). The moves of an entry they make are ``entry_states``' table (checked by
``tests/integration/test_ledger_lifecycle.py``); the key layout is ``redis_ledger``'s."""

from __future__ import annotations

from typing import Final

# KEYS: call hash, committed hash, seq, reserved set, owner lease. ARGV: worst, budget,
# per-identity budget, identity, owner, lease ms, lease value, prompt estimate, max output
# tokens, then field/value pairs for the call hash. The same call asked again (same
# identity, owner and worst case) answers its reservation again: never a second one.
RESERVE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  local found = redis.call('HMGET', KEYS[1], 'state', 'identity', 'owner', 'reserved_pusd',
                           'prompt_tokens_estimate', 'max_output_tokens', 'seq', 'settled_by')
  if found[1] == 'reserved' and found[2] == ARGV[4] and found[3] == ARGV[5]
     and found[4] == ARGV[1] and found[5] == ARGV[8] and found[6] == ARGV[9] then
    redis.call('SET', KEYS[5], ARGV[7], 'PX', ARGV[6])
    return {'ok', tonumber(found[7])}
  end
  return {'exists', found[1] or 'unreadable', found[8] or ''}
end
local total = tonumber(redis.call('HGET', KEYS[2], 'total') or '0')
local own = tonumber(redis.call('HGET', KEYS[2], 'identity:' .. ARGV[4]) or '0')
local worst = tonumber(ARGV[1])
if total + worst > tonumber(ARGV[2]) then return {'total', total} end
if own + worst > tonumber(ARGV[3]) then return {'identity', own} end
redis.call('HINCRBY', KEYS[2], 'total', ARGV[1])
redis.call('HINCRBY', KEYS[2], 'identity:' .. ARGV[4], ARGV[1])
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], 'seq', seq, 'state', 'reserved', unpack(ARGV, 10))
redis.call('SADD', KEYS[4], KEYS[1])
redis.call('SET', KEYS[5], ARGV[7], 'PX', ARGV[6])
return {'ok', seq}
"""

# KEYS: call hash, owner lease. ARGV: owner, now, lease ms, lease value.
MARK_SENDING: Final = """
local found = redis.call('HMGET', KEYS[1], 'state', 'owner', 'settled_by')
if not found[1] then return {'missing', '', ''} end
if found[1] ~= 'reserved' then return {'already', found[1], found[3] or ''} end
if found[2] ~= ARGV[1] then return {'already', 'reserved', found[2] or ''} end
redis.call('HSET', KEYS[1], 'sending_at', ARGV[2])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
return {'ok', '', ''}
"""

# The one move out of 'reserved', with the sums' adjustment (a Lua function the scripts
# below share). state: the final state; cost: the settled cost (pico-USD); fields: more
# field/value pairs. Returns the reservation and the charged cost (-1: none).
_MOVE: Final = """
local function move(call, committed, reserved_set, state, cost, ttl, fields)
  local reserved = tonumber(redis.call('HGET', call, 'reserved_pusd'))
  local identity = redis.call('HGET', call, 'identity')
  local delta = 0
  if state == 'settled' then
    if cost < 0 or cost > reserved then cost = reserved end
    delta = cost - reserved
    redis.call('HSET', call, 'cost_pusd', string.format('%d', cost))
  elseif state == 'released' then
    delta = -reserved
  end
  if delta ~= 0 then
    redis.call('HINCRBY', committed, 'total', string.format('%d', delta))
    redis.call('HINCRBY', committed, 'identity:' .. identity, string.format('%d', delta))
  end
  redis.call('HSET', call, 'state', state, unpack(fields))
  redis.call('SREM', reserved_set, call)
  if ttl > 0 and state ~= 'failed' then redis.call('EXPIRE', call, ttl) end
  local charged = tonumber(redis.call('HGET', call, 'cost_pusd') or '-1')
  return {charged, reserved}
end
"""

_ALREADY: Final = """
local function already(call)
  local found = redis.call('HMGET', call, 'state', 'settled_by', 'cost_pusd', 'reserved_pusd',
                           'usage_rejected')
  return {'already', found[1] or 'unreadable', found[2] or '', found[3] or '-1',
          found[4] or '0', found[5] or ''}
end
"""

# KEYS: call hash, committed hash, reserved set. ARGV: the final state, the cost (settled),
# the TTL in seconds (0: none), then field/value pairs for the call hash.
LEAVE_RESERVED: Final = (
    _MOVE
    + _ALREADY
    + """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing'} end
if state ~= 'reserved' then return already(KEYS[1]) end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
local moved = move(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
                   fields)
return {'ok', moved[1], moved[2]}
"""
)

# KEYS: call hash, committed hash, reserved set, the owner's lease. ARGV: the owner, the TTL
# in seconds, now, the reconciler. A reserved call whose owner's lease lapsed: failed (kept)
# if it was marked sending, else released.
RECONCILE: Final = (
    _MOVE
    + """
local found = redis.call('HMGET', KEYS[1], 'state', 'owner', 'sending_at')
if not found[1] or found[1] ~= 'reserved' then
  redis.call('SREM', KEYS[3], KEYS[1])
  return {'gone', 0}
end
if found[2] ~= ARGV[1] then return {'foreign', 0} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {'alive', 0} end
local state = 'released'
local fields = {'released', 'owner_lease_lapsed (never sent)'}
if found[3] then
  state = 'failed'
  fields = {'failure', 'owner_lease_lapsed'}
end
fields[#fields + 1] = 'settled_at'
fields[#fields + 1] = ARGV[3]
fields[#fields + 1] = 'settled_by'
fields[#fields + 1] = ARGV[4]
local moved = move(KEYS[1], KEYS[2], KEYS[3], state, 0, tonumber(ARGV[2]), fields)
return {state, moved[2]}
"""
)

# KEYS: call hash, committed hash, reserved set, seq. ARGV: the owner, the TTL in seconds,
# now, why, then the tombstone's field/value pairs. A reserve the producer gave up on:
# released if it was written, else a released tombstone in its place (a late copy of the
# reserve finds it and reserves nothing).
ABANDON: Final = (
    _MOVE
    + _ALREADY
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then
  local seq = redis.call('GET', KEYS[4]) or '0'
  redis.call('HSET', KEYS[1], 'seq', seq, 'state', 'released', 'released', ARGV[4],
             'settled_at', ARGV[3], 'settled_by', ARGV[1], unpack(ARGV, 5))
  if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
  return {'tombstoned'}
end
local found = redis.call('HMGET', KEYS[1], 'state', 'owner')
if found[1] ~= 'reserved' then return already(KEYS[1]) end
if found[2] ~= ARGV[1] then
  return {'already', 'reserved', found[2] or '', '-1', '0', ''}
end
move(KEYS[1], KEYS[2], KEYS[3], 'released', 0, tonumber(ARGV[2]),
     {'released', ARGV[4], 'settled_at', ARGV[3], 'settled_by', ARGV[1]})
return {'released'}
"""
)
