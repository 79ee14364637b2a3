"""``RedisStore``: the :class:`~gateway.session.store.SessionStore` on Redis, so gateway replicas can share sessions.

Records cross as the same JSON text as in :class:`~gateway.session.store.InMemoryStore` (``adapters.jsonwire``),
read back with ``ENCODED_DEPTH``. Keys, all under a configurable prefix (``[gateway.store] prefix``, default
``mcpgw:``), for a session ``S`` of principal ``P`` and a bridged round ``B``:

- ``s:S``: a hash, ``r`` = the session record's JSON text, ``p`` = its principal (so a touch or a delete finds
  the principal's set without parsing the record: a record may hold text a Lua JSON parser refuses);
- ``seen``: a sorted set of every session, member ``S``, score = its last-seen time in ms. It is where
  ``last_seen_ms`` is kept beside the record (as ``InMemoryStore`` keeps it beside the text): a touch writes a
  score, never the record, and :meth:`RedisStore.last_seen` is one ``ZMSCORE`` for any number of ids;
- ``p:P``: a sorted set of ``P``'s sessions, scored the same way (for the per-principal bound);
- ``v:P``: present while ``P`` is verified (adapters.admission), with the idle time as TTL, renewed by each put
  and touch of its sessions; ``u``: a sorted set of the sessions of principals not verified when they were put,
  scored as ``seen`` (for ``max_unverified_sessions``); marking ``P`` verified takes its sessions out;
- ``r:B``: a hash, ``r`` = the round's JSON text, ``s`` = its session; ``rs:S``: the set of ``S``'s rounds;
- waiting rounds held (by a round's first waiting save, ``put_round``'s ``hold``, else :meth:`RedisStore.hold_round`;
  the bounds of ``adapters.admission.admit_waiting``):
  ``hw``, a hash ``B`` -> ``"<bytes> <S> <P>"``; ``hs:S``, the set of ``S``'s (expiring with the session);
  ``hb``, a hash ``P`` -> its bytes; ``ht``, the bytes in all; ``hx``, a sorted set ``B`` -> when its session
  would expire (ms), where each hold first gives back up to 16 holds whose session Redis expired by itself.
  These four are emptied as rounds end, so they hold nothing once no round waits;
- ``e:S:N``: the copy of ``S``'s downstream SSE stream ``N`` (docs/design/replicas.md#sse-replay-across-replicas), a
  Redis Stream whose entry
  ids carry the event numbers: ``<seq>-0`` an event (field ``m``, the message's JSON text), ``0-1`` "nothing
  evicted", ``<seq>-2`` "ended after event seq". Trimmed on each append to the last ``replay_buffer_events``
  events (``MINID``, exact). Made with the stream's first event: a Redis Stream costs about 4.8 KB however
  small, so a stream with nothing sent yet (an idle session's GET stream) is only its member in ``es:S``;
- ``es:S``: a sorted set of ``S``'s copied streams, score 0 while open, else the time it ended (ms); only the
  last ``FINISHED_STREAMS_KEPT`` ended ones are kept, as a replica keeps its own;
- ``oa:G`` and ``oq:S:D`` (``adapters.relay``): the replica that owns the exchange which asked the client under
  gateway id ``G``, or which bridges ``S``'s request ``D``, and that exchange's round: ``"<replica> <B>"``, with
  the client answer timeout as TTL (docs/design/replicas.md#replicas-relay-through-the-store). A record counts only
  while its replica holds ``ol:B``
  (§50): one that stalled past its lease owns nothing, so answers are not relayed to it. The relay's channels
  are ``relay:<replica>`` and ``relay-all`` under the same prefix;
- ``ol:B``: the lease on round ``B`` (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): the
  holding replica, with the lease time as TTL,
  renewed while it lives; claimed with ``SET NX`` only while ``r:B`` exists, so one replica takes a round over;
- ``rel``: a sorted set of the relayed 2025 sessions every replica counts (``RelayedLeases``), member the
  gateway's opaque key for one (a digest, never the server's session id), score = when its lease runs out (ms,
  Redis's own clock); ``relp:P``: the same for principal ``P``'s; ``relu``: the same for those held while their
  principal was not verified (counted with ``u`` for ``max_unverified_sessions``; marking ``P`` verified takes
  its keys out). Each hold keeps a set's TTL at least the lease it gives, so a set whose every lease ran out goes
  by itself; counting first removes the lapsed members;
- ``th:K``: the holder record of a task made through the reverse bridge (``TaskHolders``; ``K`` the gateway's
  opaque key for it, a digest): ``"<replica> <principal>"``, with the holder's lease as TTL, renewed while it keeps
  the task (docs/design/eras.md#tasks-in-reverse);
- ``rl``: a sorted set of the leased rounds, member ``B``, score = when its lease runs out (ms, Redis's own clock:
  ``TIME`` in the scripts), moved with every take and renewal: where a replica's sweep finds the rounds of a
  replica that died (:meth:`RedisStore.orphaned_rounds`). A round that ends leaves it; a member whose round expired
  with its session is removed by the next sweep.

Expiry: every one of these keys gets a TTL of ``session_idle_seconds`` with each write, renewed by
:meth:`RedisStore.touch_session` (and for ``keep`` by :meth:`RedisStore.expire_sessions`), so nothing is kept
for ever even when no gateway sweeps: Redis drops an idle session's keys by itself, and a sorted set whose every
session went idle drops with them.

Counting (:meth:`RedisStore.count_sessions`, asked on every initialize): the members of ``seen`` and ``p:P``
whose score is older than the idle limit are removed (``ZREMRANGEBYSCORE``, amortized O(log n) per session),
then both are counted (``ZCARD``, O(1)), in one transaction. A score is the time of the session's last write,
which is also when its keys' TTL was last set, so a member leaves the count when Redis expires its keys (to
the clock skew between the gateway and Redis): the count stays right when Redis expires keys by itself.

Every multi-key change is one Lua script or one ``MULTI`` (atomic, one round trip), so replicas never see half
a session. The scripts compute key names from the prefix, which standalone Redis allows (a cluster would need a
hash tag in the prefix, e.g. ``{mcpgw}:``, to keep one gateway's keys in one slot).

Connections: every command but the blocking reads of ``follow_events`` and the relay's pub/sub goes over one
pipelined connection shared by the whole process (:class:`~gateway.session.redis_wire.RedisWire`,
docs/design/replicas.md#one-pipelined-redis-connection-per-process); those two keep redis-py connections of their own.

Failure: any Redis error (refused, reset, timed out, out of memory, read-only replica) raises
:class:`~gateway.session.store.StoreUnavailable`; connect and command timeouts are ``[gateway.store]
timeout_seconds``. A command is never written twice (Redis may have run it); one whose connection had already
closed before the write goes on a new one.

Memory (Redis 7.0.15, ``MEMORY USAGE``, measured with 200 idle sessions of a 2025-11-25 client declaring
sampling, elicitation and roots, opened on the embedded core): 1,296 bytes for ``s:S`` (a 938-byte record text;
the hash costs about 250 bytes over a plain string, the price of touching without parsing), plus about 140 bytes
in each sorted set: about 1.6 KB per idle session; its open GET stream adds about 150 bytes (its member in
``es:S``; the Redis Stream is made with the stream's first event).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar, Final

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from adapters import relay as R
from adapters.admission import WaitingLoad
from adapters.jsonwire import ENCODED_DEPTH, dumps, loads
from adapters.records import PendingRound, SessionRecord
from adapters.reverse_tasks import Holder
from adapters.sse import FINISHED_STREAMS_KEPT, PRIMING_SEQ, Event, StoredEvents, resumable
from adapters.takeover import Lease
from gateway.session.bus import Bus
from gateway.session.redis_bus import RedisBus, redis_failures
from gateway.session.redis_wire import RedisWire, Script
from gateway.session.store import Hold, Owners, StoreUnavailable, StreamAppend, WaitingFull

# The longest a follow_events call blocks in Redis: its connection's read timeout is this plus the store's.
FOLLOW_WAIT_MAX_SECONDS: Final = 10.0
MAX_CONNECTIONS: Final = 100  # commands in flight at once, per process (more wait for a free connection)
MAX_FOLLOWED: Final = 1000  # streams followed at once from another replica, per process
# A change to a session is written over the text it read, else read and made again; each retry means another change
# was written meanwhile, so this many in a row is a session changed faster than it can be read, not bad luck.
CHANGE_TRIES: Final = 16
OPENED, ENDED = 1, 2  # the sub-id of a stream copy's marker entries (an event's is 0), as _APPEND writes them

# Helpers shared by the scripts (ARGV[1] is always the prefix). Scripts only read and write keys of that prefix.
_LUA_COMMON: Final = """
local P = ARGV[1]
local function renew(sid, ttl)  -- the TTL of a session's record, rounds and stream copies; 0 if gone
  if redis.call('PEXPIRE', P .. 's:' .. sid, ttl) == 0 then return 0 end
  redis.call('PEXPIRE', P .. 'hs:' .. sid, ttl)
  if redis.call('PEXPIRE', P .. 'rs:' .. sid, ttl) == 1 then
    for _, bid in ipairs(redis.call('SMEMBERS', P .. 'rs:' .. sid)) do redis.call('PEXPIRE', P .. 'r:' .. bid, ttl) end
  end
  if redis.call('PEXPIRE', P .. 'es:' .. sid, ttl) == 1 then
    for _, name in ipairs(redis.call('ZRANGE', P .. 'es:' .. sid, 0, -1)) do
      redis.call('PEXPIRE', P .. 'e:' .. sid .. ':' .. name, ttl)
    end
  end
  return 1
end
local function score(key, sid, seen, ttl)  -- a newer last-seen time only (time never goes back)
  redis.call('ZADD', key, 'GT', seen, sid)
  redis.call('PEXPIRE', key, ttl)
end
local function unverified(principal, sid, seen, ttl)  -- renews the principal's mark, else its session's score
  if redis.call('PEXPIRE', P .. 'v:' .. principal, ttl) == 0 then
    redis.call('ZADD', P .. 'u', 'XX', 'GT', seen, sid)  -- only a session put as unverified is in it
    redis.call('PEXPIRE', P .. 'u', ttl)
  end
end
local function now_ms()  -- Redis's own clock: every replica's leases are timed by one clock
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function unverified_count(principal, cutoff)  -- count_unverified's count; -1: the principal is verified
  if redis.call('EXISTS', P .. 'v:' .. principal) == 1 then return -1 end
  redis.call('ZREMRANGEBYSCORE', P .. 'u', '-inf', cutoff)
  redis.call('ZREMRANGEBYSCORE', P .. 'relu', '-inf', now_ms())
  return redis.call('ZCARD', P .. 'u') + redis.call('ZCARD', P .. 'relu')
end
local function leased(bid, ms, ttl)  -- the round's lease runs out in ms: where the sweep looks for it
  redis.call('ZADD', P .. 'rl', now_ms() + tonumber(ms), bid)
  redis.call('PEXPIRE', P .. 'rl', ttl)
end
local function unhold(bid)  -- a waiting round's bytes and count given back (hold_round)
  local entry = redis.call('HGET', P .. 'hw', bid)
  if not entry then return end
  local size, sid, principal = string.match(entry, '^(%d+) (%S+) (.*)$')
  redis.call('HDEL', P .. 'hw', bid)
  redis.call('ZREM', P .. 'hx', bid)
  redis.call('SREM', P .. 'hs:' .. sid, bid)
  if redis.call('HINCRBY', P .. 'hb', principal, -tonumber(size)) <= 0 then redis.call('HDEL', P .. 'hb', principal) end
  if redis.call('DECRBY', P .. 'ht', size) <= 0 then redis.call('DEL', P .. 'ht') end
end
-- A round waiting for its client counted (once; not while its session is gone) -> whether it fits, and what waiting
-- rounds hold with it: {rounds held of the session, bytes of the principal, bytes in all}. With ``most`` (those
-- three ceilings), one count past its ceiling (adapters.admission.past_ceilings) holds nothing: refused. Holds
-- whose session Redis expired by itself are given back first, a few per call, so the sums never keep a dead
-- session's rounds for long.
local function hold(bid, sid, principal, size, ttl, most)
  local now = now_ms()
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', P .. 'hx', '-inf', now, 'LIMIT', 0, 16)) do
    local entry = redis.call('HGET', P .. 'hw', old)
    local left = entry and redis.call('PTTL', P .. 's:' .. string.match(entry, '^%d+ (%S+) ')) or -2
    if left > 0 then redis.call('ZADD', P .. 'hx', now + left, old) else unhold(old) end
  end
  local new = redis.call('HEXISTS', P .. 'hw', bid) == 0 and redis.call('EXISTS', P .. 's:' .. sid) == 1
  local added = new and tonumber(size) or 0
  local load = {redis.call('SCARD', P .. 'hs:' .. sid) + (new and 1 or 0),
                tonumber(redis.call('HGET', P .. 'hb', principal) or 0) + added,
                tonumber(redis.call('GET', P .. 'ht') or 0) + added}
  if most then
    for i = 1, 3 do
      if load[i] > tonumber(most[i]) then return false, load end
    end
  end
  if new then
    redis.call('HSET', P .. 'hw', bid, size .. ' ' .. sid .. ' ' .. principal)
    redis.call('SADD', P .. 'hs:' .. sid, bid)
    redis.call('PEXPIRE', P .. 'hs:' .. sid, ttl)
    redis.call('HINCRBY', P .. 'hb', principal, size)
    redis.call('INCRBY', P .. 'ht', size)
    redis.call('ZADD', P .. 'hx', now + tonumber(ttl), bid)
  end
  return true, load
end
local function drop(sid)
  for _, bid in ipairs(redis.call('SMEMBERS', P .. 'hs:' .. sid)) do unhold(bid) end
  local principal = redis.call('HGET', P .. 's:' .. sid, 'p')
  if principal then redis.call('ZREM', P .. 'p:' .. principal, sid) end
  redis.call('ZREM', P .. 'seen', sid)
  redis.call('ZREM', P .. 'u', sid)
  for _, bid in ipairs(redis.call('SMEMBERS', P .. 'rs:' .. sid)) do
    redis.call('DEL', P .. 'r:' .. bid)
    redis.call('ZREM', P .. 'rl', bid)
  end
  for _, name in ipairs(redis.call('ZRANGE', P .. 'es:' .. sid, 0, -1)) do
    redis.call('DEL', P .. 'e:' .. sid .. ':' .. name)
  end
  redis.call('DEL', P .. 's:' .. sid, P .. 'rs:' .. sid, P .. 'es:' .. sid)
end
-- A stream copy's append, from ARGV[at] on (StreamAppend, as _copy_args lays it out): stream ('' for none),
-- session id, capacity, opening ('1' makes the copy), ended after (a seq; '-1': not ended), now ms, ttl ms, finished
-- copies kept, then (seq, text) pairs to the end. 0 when nothing was written (none, no such copy, or no session).
local function append(at)
  local name = ARGV[at]
  if name == '' then return 0 end
  local sid, capacity = ARGV[at + 1], tonumber(ARGV[at + 2])
  local opening, ended, now, ttl, kept = ARGV[at + 3], ARGV[at + 4], ARGV[at + 5], ARGV[at + 6], ARGV[at + 7]
  local key, names = P .. 'e:' .. sid .. ':' .. name, P .. 'es:' .. sid
  if opening == '1' then
    if redis.call('EXISTS', P .. 's:' .. sid) == 0 then return 0 end
    redis.call('ZADD', names, 'NX', 0, name)
  elseif not redis.call('ZSCORE', names, name) then
    return 0
  end
  local first = at + 8
  if #ARGV > first and ARGV[first] == '1' and redis.call('EXISTS', key) == 0 then
    redis.call('XADD', key, '0-1', 'o', '')  -- made with event 1: nothing was evicted
  end
  for i = first, #ARGV, 2 do
    local oldest = tonumber(ARGV[i]) - capacity + 1  -- exact: the last capacity events, as ReplayBuffer keeps
    if oldest > 1 then
      redis.call('XADD', key, 'MINID', '=', oldest .. '-0', ARGV[i] .. '-0', 'm', ARGV[i + 1])
    else
      redis.call('XADD', key, ARGV[i] .. '-0', 'm', ARGV[i + 1])
    end
  end
  if ended ~= '-1' then
    if redis.call('EXISTS', key) == 1 then redis.call('XADD', key, ended .. '-2', 'e', '') end
    redis.call('ZADD', names, 'XX', now, name)
    local finished = redis.call('ZRANGEBYSCORE', names, '(0', '+inf')
    for i = 1, #finished - tonumber(kept) do
      redis.call('DEL', P .. 'e:' .. sid .. ':' .. finished[i])
      redis.call('ZREM', names, finished[i])
    end
  end
  redis.call('PEXPIRE', key, ttl)
  redis.call('PEXPIRE', names, ttl)
  return 1
end
"""

# ARGV: prefix, session id, principal, record text, last seen ms, ttl ms, idle cutoff ('(' ms) -> the session's
# last-seen score, then the live sessions right after this write: in all, of the principal.
_PUT_SESSION: Final = _LUA_COMMON + """
local sid, ttl, every, mine = ARGV[2], ARGV[6], P .. 'seen', P .. 'p:' .. ARGV[3]
redis.call('ZREMRANGEBYSCORE', every, '-inf', ARGV[7])  -- counted as count_sessions counts (this one included,
redis.call('ZREMRANGEBYSCORE', mine, '-inf', ARGV[7])   -- whatever its last-seen time: it was just written)
redis.call('HSET', P .. 's:' .. sid, 'r', ARGV[4], 'p', ARGV[3])
renew(sid, ttl)
score(every, sid, ARGV[5], ttl)
score(mine, sid, ARGV[5], ttl)
if redis.call('PEXPIRE', P .. 'v:' .. ARGV[3], ttl) == 0 then  -- not verified: one of the shared allowance's
  redis.call('ZREMRANGEBYSCORE', P .. 'u', '-inf', ARGV[7])
  score(P .. 'u', sid, ARGV[5], ttl)
end
return {redis.call('ZSCORE', every, sid), redis.call('ZCARD', every), redis.call('ZCARD', mine)}
"""

# ARGV: prefix, session id, the record text read, the changed text, last seen ms, ttl ms -> the session's last-seen
# score when written; 0 when the stored text is no longer the one read (another change came first: read it again);
# -1 when the session is gone (a DELETE came first: it stays gone).
_CHANGE_SESSION: Final = _LUA_COMMON + """
local sid, ttl, key = ARGV[2], ARGV[6], P .. 's:' .. ARGV[2]
local stored = redis.call('HGET', key, 'r')
if not stored then return -1 end
if stored ~= ARGV[3] then return 0 end
redis.call('HSET', key, 'r', ARGV[4])
renew(sid, ttl)
score(P .. 'seen', sid, ARGV[5], ttl)
local principal = redis.call('HGET', key, 'p')
score(P .. 'p:' .. principal, sid, ARGV[5], ttl)
unverified(principal, sid, ARGV[5], ttl)
return redis.call('ZSCORE', P .. 'seen', sid)
"""

# ARGV: prefix, session id, last seen ms, ttl ms. A session without a record stays gone.
_TOUCH: Final = _LUA_COMMON + """
local sid, ttl = ARGV[2], ARGV[4]
if renew(sid, ttl) == 0 then return 0 end
score(P .. 'seen', sid, ARGV[3], ttl)
local principal = redis.call('HGET', P .. 's:' .. sid, 'p')
score(P .. 'p:' .. principal, sid, ARGV[3], ttl)
unverified(principal, sid, ARGV[3], ttl)
return 1
"""

# ARGV: prefix, bridge id, session id, principal, bytes, ttl ms -> hold (see hold in _LUA_COMMON), unbounded.
_HOLD_ROUND: Final = _LUA_COMMON + """
local _, load = hold(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], nil)
return load
"""

# ARGV: prefix, principal, ttl ms: the principal is verified from now on, and its live sessions leave ``u``.
_MARK_VERIFIED: Final = _LUA_COMMON + """
redis.call('SET', P .. 'v:' .. ARGV[2], '1', 'PX', ARGV[3])
local mine = redis.call('ZRANGE', P .. 'p:' .. ARGV[2], 0, -1)
for i = 1, #mine, 1000 do redis.call('ZREM', P .. 'u', unpack(mine, i, math.min(i + 999, #mine))) end
local relayed = redis.call('ZRANGE', P .. 'relp:' .. ARGV[2], 0, -1)
for i = 1, #relayed, 1000 do
  redis.call('ZREM', P .. 'relu', unpack(relayed, i, math.min(i + 999, #relayed)))
end
return 1
"""

# ARGV: prefix, session id.
_DELETE: Final = _LUA_COMMON + "drop(ARGV[2])\nreturn 1\n"

# ARGV: prefix, seen-before ms, ttl ms, kept ids... -> the ids deleted.
_EXPIRE: Final = _LUA_COMMON + """
local keep = {}
for i = 4, #ARGV do keep[ARGV[i]] = true; renew(ARGV[i], ARGV[3]) end
local gone = {}
for _, sid in ipairs(redis.call('ZRANGEBYSCORE', P .. 'seen', '-inf', '(' .. ARGV[2])) do
  if not keep[sid] then drop(sid); gone[#gone + 1] = sid end
end
return gone
"""

# ARGV: prefix, bridge id, session id, record text, ttl ms, lease mode ('take': the first save takes the lease; 'check':
# saved only while the replica holds it; 'none'), replica, lease ms, claim count, claim ttl ms, release count, hold
# ('1': the round starts waiting, store.Hold; else '0'), its principal, bytes and three ceilings, the channel and
# text of a relayed answer's acknowledgement to publish once saved ('' for none), claimed keys..., released keys...,
# then the step's stream append (see append) -> 1 when saved; 0 when not (the lease is another's or lapsed:
# docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write); the load (see hold) when the hold did not fit,
# and nothing was written (nor published). The events are written only with the record.
_SAVE_ROUND: Final = _LUA_COMMON + """
local bid, sid, ttl, mode, replica = ARGV[2], ARGV[3], ARGV[5], ARGV[6], ARGV[7]
local lease = P .. 'ol:' .. bid
if mode == 'check' and redis.call('GET', lease) ~= replica then return 0 end
if ARGV[12] == '1' then
  local fits, load = hold(bid, sid, ARGV[13], ARGV[14], ttl, {ARGV[15], ARGV[16], ARGV[17]})
  if not fits then return load end
end
local key, owned = P .. 'r:' .. bid, P .. 'rs:' .. sid
redis.call('HSET', key, 'r', ARGV[4], 's', sid)
redis.call('PEXPIRE', key, ttl)
redis.call('SADD', owned, bid)
redis.call('PEXPIRE', owned, ttl)
if mode == 'take' then
  redis.call('SET', lease, replica, 'PX', ARGV[8])
  leased(bid, ARGV[8], ttl)
end
local claims, releases = tonumber(ARGV[9]), tonumber(ARGV[11])
for i = 20, 19 + claims do redis.call('SET', P .. ARGV[i], replica .. ' ' .. bid, 'PX', ARGV[10]) end
for i = 20 + claims, 19 + claims + releases do redis.call('DEL', P .. ARGV[i]) end
append(20 + claims + releases)
if ARGV[18] ~= '' then redis.call('PUBLISH', ARGV[18], ARGV[19]) end
return 1
"""

# ARGV: prefix, ownership key -> its replica while that replica holds the lease of the record's round, else nil
# (docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write: a replica that stalled past its lease owns
# nothing).
_OWNER: Final = _LUA_COMMON + """
local value = redis.call('GET', P .. ARGV[2])
if not value then return false end
local replica, bid = string.match(value, '^(%S+) (%S+)$')
if not bid or redis.call('GET', P .. 'ol:' .. bid) ~= replica then return false end
return replica
"""

# ARGV: prefix, ownership key, this replica, the owners' channel prefix, message text -> {owner, receivers}: the
# owner as _OWNER finds it ('' for none), and the message published on its channel when it is another replica (0
# receivers otherwise): a relayed message's lookup and send in one round trip
# (docs/design/replicas.md#replicas-relay-through-the-store).
_RELAY_TO_OWNER: Final = _LUA_COMMON + """
local value = redis.call('GET', P .. ARGV[2])
if not value then return {'', 0} end
local replica, bid = string.match(value, '^(%S+) (%S+)$')
if not bid or redis.call('GET', P .. 'ol:' .. bid) ~= replica then return {'', 0} end
if replica == ARGV[3] then return {replica, 0} end
return {replica, redis.call('PUBLISH', ARGV[4] .. replica, ARGV[5])}
"""

# ARGV: prefix, bridge id, replica, delete (0/1), release count, an acknowledgement's channel and text (as
# _SAVE_ROUND's), ownership keys..., then the stream append of its last events (see append): a round's end in one step
# (docs/design/takeover.md#a-bridged-step-is-one-fenced-store-write): its record (when deleted), the lease the replica
# holds (never another's), its ownership records, its result.
_END_ROUND: Final = _LUA_COMMON + """
local bid, releases = ARGV[2], tonumber(ARGV[5])
append(8 + releases)
if ARGV[4] == '1' then
  local sid = redis.call('HGET', P .. 'r:' .. bid, 's')
  if sid then redis.call('SREM', P .. 'rs:' .. sid, bid) end
  redis.call('DEL', P .. 'r:' .. bid)
  redis.call('ZREM', P .. 'rl', bid)
  unhold(bid)
end
if redis.call('GET', P .. 'ol:' .. bid) == ARGV[3] then
  redis.call('DEL', P .. 'ol:' .. bid)
  if ARGV[4] ~= '1' and redis.call('ZSCORE', P .. 'rl', bid) then
    redis.call('ZADD', P .. 'rl', now_ms(), bid)  -- handed over: another replica's sweep may take it now
  end
end
for i = 8, 7 + releases do redis.call('DEL', P .. ARGV[i]) end
if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
return 1
"""

# ARGV: prefix, session id -> the texts of its rounds (a round Redis expired by itself leaves the set here).
_ROUNDS_OF: Final = _LUA_COMMON + """
local out = {}
for _, bid in ipairs(redis.call('SMEMBERS', P .. 'rs:' .. ARGV[2])) do
  local text = redis.call('HGET', P .. 'r:' .. bid, 'r')
  if text then
    out[#out + 1] = text
  else
    redis.call('SREM', P .. 'rs:' .. ARGV[2], bid)
    redis.call('ZREM', P .. 'rl', bid)
  end
end
return out
"""

# ARGV: prefix, most -> the texts of up to ``most`` rounds whose lease ran out and nobody took
# (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds, the sweep); the index's members whose
# round is gone (ended, or expired with its session) leave it here, and one whose lease was taken again without
# its deadline (none should be) gets the lease's.
_ORPHANED: Final = _LUA_COMMON + """
local now, out, index = now_ms(), {}, P .. 'rl'
for _, bid in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))) do
  local text = redis.call('HGET', P .. 'r:' .. bid, 'r')
  local left = redis.call('PTTL', P .. 'ol:' .. bid)
  if not text then
    redis.call('ZREM', index, bid)
  elseif left > 0 then
    redis.call('ZADD', index, now + left, bid)
  else
    out[#out + 1] = text
  end
end
return out
"""

# ARGV: prefix, bridge id, replica, ttl ms, idle ttl ms -> 1 when this replica now holds the lease (the round
# exists, and nobody held it).
_TAKE_LEASE: Final = _LUA_COMMON + """
if redis.call('EXISTS', P .. 'r:' .. ARGV[2]) == 0 then return 0 end
if redis.call('SET', P .. 'ol:' .. ARGV[2], ARGV[3], 'NX', 'PX', ARGV[4]) then
  leased(ARGV[2], ARGV[4], ARGV[5])
  return 1
end
return 0
"""

# ARGV: prefix, replica, ttl ms, idle ttl ms, bridge ids... -> the ids whose lease the replica no longer holds.
_RENEW_LEASES: Final = _LUA_COMMON + """
local lost = {}
for i = 5, #ARGV do
  local key = P .. 'ol:' .. ARGV[i]
  if redis.call('GET', key) == ARGV[2] then
    redis.call('PEXPIRE', key, ARGV[3])
    leased(ARGV[i], ARGV[3], ARGV[4])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"""

# ARGV: prefix, key, principal, ttl ms, mode (1: hold, 0: renew only while held, -1: release, 2: count), idle ttl
# ms, idle cutoff ms -> {in total, of the principal} after the step (relayed 2025 sessions, RelayedLeases), and for a
# hold the unverified sessions as count_unverified counts them (-1: the principal is verified).
_RELAYED: Final = _LUA_COMMON + """
local t, ttl = now_ms(), tonumber(ARGV[4])
local all, mine, loose, mode = P .. 'rel', P .. 'relp:' .. ARGV[3], P .. 'relu', tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', all, '-inf', t)
redis.call('ZREMRANGEBYSCORE', mine, '-inf', t)
if mode == -1 then
  for _, k in ipairs({all, mine, loose}) do redis.call('ZREM', k, ARGV[2]) end
elseif mode == 1 or (mode == 0 and redis.call('ZSCORE', all, ARGV[2])) then
  local sets = {all, mine}
  -- as a session's put and touch: a verified principal's mark is renewed by its use; else a hold joins the
  -- unverified ones, and a renewal moves only a lease that is one of them
  if redis.call('PEXPIRE', P .. 'v:' .. ARGV[3], ARGV[6]) == 0 then
    if mode == 1 or redis.call('ZSCORE', loose, ARGV[2]) then sets[3] = loose end
  elseif mode == 1 then
    redis.call('ZREM', loose, ARGV[2])
  end
  for _, k in ipairs(sets) do
    redis.call('ZADD', k, t + ttl, ARGV[2])
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end  -- never shorter than a lease in it
  end
end
local unverified = -1
if mode == 1 then unverified = unverified_count(ARGV[3], ARGV[7]) end
return {redis.call('ZCARD', all), redis.call('ZCARD', mine), unverified}
"""

# ARGV: prefix, principal, idle cutoff ms -> count_unverified's count, -1 when the principal is verified.
_COUNT_UNVERIFIED: Final = _LUA_COMMON + """
return unverified_count(ARGV[2], ARGV[3])
"""

# ARGV: prefix, task holder key, replica -> 1 when the record was that replica's and is deleted (TaskHolders).
_RELEASE_TASK: Final = """
local key, mine = ARGV[1] .. 'th:' .. ARGV[2], ARGV[3] .. ' '
local value = redis.call('GET', key)
if value and string.sub(value, 1, #mine) == mine then return redis.call('DEL', key) end
return 0
"""

# ARGV: prefix, then a stream append (see append) -> 0 when nothing was written (no such copy, or no session).
_APPEND: Final = _LUA_COMMON + """
return append(2)
"""


def wall_ms() -> int:
    return int(time.time() * 1000)


class RedisStore:
    """The session store on Redis (see the module docstring for the keys, expiry and counting)."""

    shares_rounds: ClassVar[bool] = True  # every replica on this Redis may continue a round
    shares_streams: ClassVar[bool] = True  # and resume a stream another one wrote

    def __init__(self, url: str, *, idle_seconds: float, prefix: str = "mcpgw:", timeout_seconds: float = 2.0,
                 clock: Callable[[], int] = wall_ms) -> None:
        self.prefix = prefix
        self._ttl_ms = max(1, int(idle_seconds * 1000))
        self._clock = clock  # the gateway's clock: scores are its last_seen_ms values
        # A burst of requests waits (up to the timeout) for one of MAX_CONNECTIONS instead of failing at once
        # ("Too many connections": 100 concurrent initializes were 503s).
        self.redis = Redis.from_pool(BlockingConnectionPool.from_url(
            url, max_connections=MAX_CONNECTIONS, timeout=timeout_seconds, socket_connect_timeout=timeout_seconds,
            socket_timeout=timeout_seconds, retry=Retry(NoBackoff(), 1)))
        # Every command but the blocking reads and pub/sub: one pipelined connection
        # (docs/design/replicas.md#one-pipelined-redis-connection-per-process).
        self.wire = RedisWire(url, timeout_seconds=timeout_seconds)
        self._put, self._touch, self._delete = Script(_PUT_SESSION), Script(_TOUCH), Script(_DELETE)
        self._mark_verified, self._hold = Script(_MARK_VERIFIED), Script(_HOLD_ROUND)
        self._change, self._relay_to_owner = Script(_CHANGE_SESSION), Script(_RELAY_TO_OWNER)
        self._expire, self._rounds_of = Script(_EXPIRE), Script(_ROUNDS_OF)
        self._take, self._renew = Script(_TAKE_LEASE), Script(_RENEW_LEASES)
        self._append, self._save_round, self._end_round = Script(_APPEND), Script(_SAVE_ROUND), Script(_END_ROUND)
        self._owner, self._orphaned = Script(_OWNER), Script(_ORPHANED)
        self._relayed, self._release_task = Script(_RELAYED), Script(_RELEASE_TASK)
        self._count_unverified = Script(_COUNT_UNVERIFIED)
        # Blocking reads (follow_events) on their own connections, whose read timeout allows for the block.
        # Each stream followed here holds one of these while it blocks.
        self._follower = Redis.from_url(url, socket_connect_timeout=timeout_seconds, max_connections=MAX_FOLLOWED,
                                        socket_timeout=FOLLOW_WAIT_MAX_SECONDS + timeout_seconds,
                                        retry=Retry(NoBackoff(), 1))
        self._bus = RedisBus(self.wire, prefix)

    def key(self, kind: str, name: str = "") -> str:
        return f"{self.prefix}{kind}{name}"

    @property
    def bus(self) -> Bus:
        """The relay's pub/sub on this Redis (:class:`~gateway.session.redis_bus.RedisBus`)."""
        return self._bus


    async def ping(self) -> None:
        await self.wire.call("PING")

    async def close(self) -> None:
        await self.wire.close()
        await self.redis.aclose()
        await self._follower.aclose()

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return (await self._read_session(session_id))[1]

    async def _read_session(self, session_id: str) -> tuple[bytes | None, SessionRecord | None]:
        text, seen = await self.wire.pipeline([("HGET", self.key("s:", session_id), "r"),
                                               ("ZSCORE", self.key("seen"), session_id)])
        if text is None:
            return None, None
        record = SessionRecord.from_dict(loads(text, ENCODED_DEPTH))
        if seen is not None:
            record.last_seen_ms = max(record.last_seen_ms, int(seen))
        return text, record

    async def put_session(self, record: SessionRecord) -> tuple[int, int]:
        args: list[str | bytes | int] = [self.prefix, record.session_id, record.principal, _dump(record),
                                         record.last_seen_ms, self._ttl_ms, self._idle_cutoff()]
        seen, total, own = await self.wire.script(self._put, args)
        # A record read before a touch carries an older time: the caller sees the newer one, as with InMemoryStore.
        record.last_seen_ms = max(record.last_seen_ms, int(float(seen)))
        return int(total), int(own)

    async def change_session(self, session_id: str, change: Callable[[SessionRecord], None]) -> SessionRecord | None:
        for _ in range(CHANGE_TRIES):
            text, record = await self._read_session(session_id)
            if text is None or record is None:
                return None
            change(record)
            args: list[str | bytes | int] = [self.prefix, session_id, text, _dump(record), record.last_seen_ms,
                                             self._ttl_ms]
            seen = await self.wire.script(self._change, args)
            if seen == -1:
                return None
            if seen != 0:
                record.last_seen_ms = max(record.last_seen_ms, int(float(seen)))
                return record
        raise StoreUnavailable(f"the session store (Redis) failed: session {session_id} changed by others "
                               f"{CHANGE_TRIES} times while one change was being written")

    async def touch_session(self, session_id: str, last_seen_ms: int) -> None:
        await self.wire.script(self._touch, [self.prefix, session_id, last_seen_ms, self._ttl_ms])

    async def delete_session(self, session_id: str) -> None:
        await self.wire.script(self._delete, [self.prefix, session_id])

    async def count_sessions(self, principal: str) -> tuple[int, int]:
        cutoff = self._idle_cutoff()
        every, mine = self.key("seen"), self.key("p:", principal)
        *_, total, own = await self.wire.transaction([
            ("ZREMRANGEBYSCORE", every, "-inf", cutoff), ("ZREMRANGEBYSCORE", mine, "-inf", cutoff),
            ("ZCARD", every), ("ZCARD", mine)])
        return int(total), int(own)

    async def count_unverified(self, principal: str) -> int | None:
        count = int(await self.wire.script(self._count_unverified, [self.prefix, principal, self._idle_cutoff()]))
        return None if count < 0 else count

    async def mark_verified(self, principal: str, now_ms: int) -> None:
        await self.wire.script(self._mark_verified, [self.prefix, principal, self._ttl_ms])

    async def last_seen(self, session_ids: Collection[str]) -> dict[str, int]:
        ids = list(session_ids)
        if not ids:
            return {}
        every = self.key("seen")
        _, scores = await self.wire.transaction([
            ("ZREMRANGEBYSCORE", every, "-inf", self._idle_cutoff()), ("ZMSCORE", every, *ids)])
        return {s: int(seen) for s, seen in zip(ids, scores, strict=True) if seen is not None}

    def _idle_cutoff(self) -> str:
        """The score below which a session is idle past the limit (exclusive, as ``ZREMRANGEBYSCORE`` reads it):
        the members the counts and ``last_seen`` drop first."""
        return f"({self._clock() - self._ttl_ms}"

    async def expire_sessions(self, seen_before_ms: float, keep: Collection[str] = ()) -> list[str]:
        gone = await self.wire.script(self._expire, [self.prefix, seen_before_ms, self._ttl_ms, *keep])
        return [sid.decode() for sid in gone]

    async def put_round(self, record: PendingRound, lease: tuple[str, float] | None = None,
                        owners: Owners | None = None, *, holder: str | None = None,
                        copy: StreamAppend | None = None, hold: Hold | None = None, tell: R.Ack | None = None) -> bool:
        mode = "take" if lease else "check" if holder else "none"
        replica = lease[0] if lease else holder or (owners.replica if owners else "")
        lease_ms = _ms(lease[1]) if lease else 0
        claims, releases = (list(owners.claim), list(owners.release)) if owners else ([], [])
        ttl = _ms(owners.ttl_seconds) if owners else 0
        args: list[str | bytes | int] = [
            self.prefix, record.bridge_id, record.session_id, _dump(record), self._ttl_ms, mode, replica, lease_ms,
            len(claims), ttl, len(releases), *_hold_args(hold), *self._tell_args(tell), *claims, *releases]
        saved = await self.wire.script(self._save_round, [*args, *self._copy_args(copy)])
        if isinstance(saved, list):
            raise WaitingFull(WaitingLoad(*(int(count) for count in saved)))
        return bool(saved)

    async def end_round(self, bridge_id: str, replica: str, *, release: Collection[str] = (),
                        delete: bool = True, copy: StreamAppend | None = None, tell: R.Ack | None = None) -> None:
        keys = list(release)
        await self.wire.script(self._end_round, [self.prefix, bridge_id, replica, int(delete), len(keys),
                                                 *self._tell_args(tell), *keys, *self._copy_args(copy)])

    def _tell_args(self, tell: R.Ack | None) -> tuple[str | bytes, str | bytes]:
        """An acknowledgement as the round scripts publish it: its channel and text ('' for none)."""
        return ("", "") if tell is None else (R.relay_channel(self.prefix, tell.to.replica), R.encode(tell))

    async def hold_round(self, bridge_id: str, session_id: str, principal: str, size: int) -> tuple[int, int, int]:
        rounds, mine, total = await self.wire.script(self._hold, [self.prefix, bridge_id, session_id, principal,
                                                                  size, self._ttl_ms])
        return int(rounds), int(mine), int(total)

    async def get_round(self, bridge_id: str) -> PendingRound | None:
        text = await self.wire.call("HGET", self.key("r:", bridge_id), "r")
        return PendingRound.from_dict(loads(text, ENCODED_DEPTH)) if text is not None else None

    async def rounds_of(self, session_id: str) -> list[PendingRound]:
        texts = await self.wire.script(self._rounds_of, [self.prefix, session_id])
        return [PendingRound.from_dict(loads(text, ENCODED_DEPTH)) for text in texts]

    async def claim_owner(self, keys: Collection[str], replica: str, ttl_seconds: float, bridge_id: str) -> None:
        ttl, value = _ms(ttl_seconds), f"{replica} {bridge_id}"
        await self.wire.pipeline([("SET", self.key(key), value, "PX", ttl) for key in keys])

    async def owner_of(self, key: str) -> str | None:
        owner = await self.wire.script(self._owner, [self.prefix, key])
        return owner.decode() if isinstance(owner, bytes) else owner

    async def relay_to_owner(self, key: str, replica: str, message: R.Relayed) -> tuple[str | None, bool]:
        owner, received = await self.wire.script(self._relay_to_owner, [
            self.prefix, key, replica, R.relay_channel(self.prefix, ""), R.encode(message)])
        owner = owner.decode() if isinstance(owner, bytes) else owner
        return owner or None, int(received) > 0

    async def take_lease(self, bridge_id: str, replica: str, ttl_seconds: float) -> bool:
        return bool(await self.wire.script(self._take, [self.prefix, bridge_id, replica, _ms(ttl_seconds),
                                                        self._ttl_ms]))

    async def lease_of(self, bridge_id: str) -> Lease:
        key = self.key("ol:", bridge_id)
        holder, left = await self.wire.transaction([("GET", key), ("PTTL", key)])
        if holder is None:
            return Lease(None)
        return Lease(holder.decode() if isinstance(holder, bytes) else holder, max(0, int(left)))

    async def renew_leases(self, bridge_ids: Collection[str], replica: str, ttl_seconds: float) -> list[str]:
        if not bridge_ids:
            return []
        lost = await self.wire.script(self._renew, [self.prefix, replica, _ms(ttl_seconds), self._ttl_ms,
                                                    *bridge_ids])
        return [b.decode() if isinstance(b, bytes) else b for b in lost]

    async def orphaned_rounds(self, most: int) -> list[PendingRound]:
        texts = await self.wire.script(self._orphaned, [self.prefix, most])
        return [PendingRound.from_dict(loads(text, ENCODED_DEPTH)) for text in texts]

    async def _relayed_step(self, key: str, principal: str, ttl_seconds: float,
                            mode: int) -> tuple[int, int, int | None]:
        args: list[str | bytes | int] = [self.prefix, key, principal, _ms(ttl_seconds), mode, self._ttl_ms,
                                         self._idle_cutoff()]
        total, mine, unverified = await self.wire.script(self._relayed, args)
        return int(total), int(mine), None if int(unverified) < 0 else int(unverified)

    async def hold_relayed(self, key: str, principal: str, ttl_seconds: float) -> tuple[int, int, int | None]:
        return await self._relayed_step(key, principal, ttl_seconds, 1)

    async def renew_relayed(self, key: str, principal: str, ttl_seconds: float) -> None:
        await self._relayed_step(key, principal, ttl_seconds, 0)

    async def release_relayed(self, key: str, principal: str) -> None:
        await self._relayed_step(key, principal, 0, -1)

    async def count_relayed(self, principal: str) -> tuple[int, int]:
        return (await self._relayed_step("", principal, 0, 2))[:2]

    async def hold_tasks(self, tasks: Mapping[str, str], replica: str, ttl_seconds: float) -> None:
        ttl = _ms(ttl_seconds)
        if tasks:  # replica ids have no space: the principal is the rest
            await self.wire.pipeline([("SET", self.key("th:", key), f"{replica} {principal}", "PX", ttl)
                                      for key, principal in tasks.items()])

    async def task_holder(self, key: str) -> Holder | None:
        value = await self.wire.call("GET", self.key("th:", key))
        if value is None:
            return None
        replica, _, principal = (value.decode() if isinstance(value, bytes) else str(value)).partition(" ")
        return Holder(principal, replica)

    async def release_task(self, key: str, replica: str) -> None:
        await self.wire.script(self._release_task, [self.prefix, key, replica])

    def stream_key(self, session_id: str, stream: str) -> str:
        return self.key("e:", f"{session_id}:{stream}")

    async def append_events(self, session_id: str, stream: str, events: Sequence[Event], *, capacity: int,
                            opening: bool = False, ended_after: int | None = None) -> None:
        copy = StreamAppend(session_id, stream, tuple(events), capacity, opening, ended_after)
        await self.wire.script(self._append, [self.prefix, *self._copy_args(copy)])

    def _copy_args(self, copy: StreamAppend | None) -> list[str | bytes | int]:
        """A stream append as the scripts' ``append`` reads it (one empty argument for none)."""
        if copy is None:
            return [""]
        ended = -1 if copy.ended_after is None else copy.ended_after
        return [copy.stream, copy.session_id, copy.capacity, int(copy.opening), ended, self._clock(), self._ttl_ms,
                FINISHED_STREAMS_KEPT, *(part for event in copy.events for part in (event.seq, dumps(event.message)))]

    async def read_events(self, session_id: str, stream: str, after: int) -> StoredEvents | None:
        key = self.stream_key(session_id, stream)
        state, first, last, entries = await self.wire.transaction([
            ("ZSCORE", self.key("es:", session_id), stream), ("XRANGE", key, "-", "+", "COUNT", 1),
            ("XREVRANGE", key, "+", "-", "COUNT", 1), ("XRANGE", key, f"({after}-0", "+")])
        if state is None:
            return None
        if not first:  # nothing sent yet: only the priming position exists
            return StoredEvents((), bool(float(state))) if after == PRIMING_SEQ else None
        seq, sub = _entry_id(first[0][0])
        oldest = PRIMING_SEQ + 1 if sub == OPENED else seq
        if not resumable(after, oldest, _entry_id(last[0][0])[0] + 1):
            return None
        return _stored(entries)

    async def follow_events(self, session_id: str, stream: str, after: int, wait_seconds: float) -> StoredEvents | None:
        key = self.stream_key(session_id, stream)
        block = max(1, int(min(wait_seconds, FOLLOW_WAIT_MAX_SECONDS) * 1000))
        async with redis_failures():
            reply: Any = await self._follower.xread({key: f"{after}-0"}, block=block)  # RESP2: [[key, entries]]
            if not reply:
                state = await self.wire.call("ZSCORE", self.key("es:", session_id), stream)
                return None if state is None else StoredEvents((), bool(float(state)) and after == PRIMING_SEQ
                                                               and not await self.wire.call("EXISTS", key))
        entries = reply[0][1]
        seq, sub = _entry_id(entries[0][0])
        if sub == 0 and seq > after + 1:  # evicted past the follower's position before it read them
            return None
        return _stored(entries)

    async def drop_stream(self, session_id: str, stream: str) -> None:
        await self.wire.transaction([("DEL", self.stream_key(session_id, stream)),
                                     ("ZREM", self.key("es:", session_id), stream)])


def _hold_args(hold: Hold | None) -> list[str | bytes | int]:
    """A save's hold as _SAVE_ROUND reads it: flag, principal, bytes, then the three ceilings."""
    if hold is None:
        return ["0", "", 0, 0, 0, 0]
    most = hold.ceilings
    return ["1", hold.principal, hold.size, most.of_session, most.principal_bytes, most.total_bytes]


def _dump(record: Any) -> bytes:
    return dumps(record.to_dict())


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _entry_id(raw: bytes | str) -> tuple[int, int]:
    """(seq, sub-id) of a stream copy's entry id, minted by :meth:`RedisStore.append_events`."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    seq, _, sub = text.partition("-")
    return int(seq), int(sub)


def _stored(entries: list[Any]) -> StoredEvents:
    events, ended = [], False
    for raw, fields in entries:
        seq, sub = _entry_id(raw)
        if sub == 0:
            events.append(Event(seq, loads(_field(fields, b"m"), ENCODED_DEPTH)))
        ended = ended or sub == ENDED
    return StoredEvents(tuple(events), ended)


def _field(fields: Any, name: bytes) -> Any:
    """A stream entry's field: redis-py (``XREAD``) gives a dict, the wire (``XRANGE``) the flat RESP list."""
    if isinstance(fields, dict):
        return fields[name]
    return fields[fields.index(name) + 1]
