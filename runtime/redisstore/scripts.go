package redisstore

import "github.com/redis/go-redis/v9"

// Every state change is one Lua script, so Redis runs it atomically: no
// get-then-set ever spans two round trips. Times are microseconds since the
// Unix epoch read from Redis's own clock (TIME), never the application's; they
// stay below 2^53, so Lua's doubles hold them exactly, and they are written
// with string.format('%.0f') so that no exponent notation reaches Redis.
//
// A record is one hash; its fields are listed in prelude's F (the order of
// every reply). Two sorted sets per bucket, in the record's hash slot, index
// it: <prefix>{b}:pending holds PROCESSING records with a lease and UNKNOWN
// records, scored by lease expiry (0 for none); <prefix>{b}:expiry holds
// SUCCESS and FAILED records, scored by ExpiresAt. Members are record keys.
// index() is the one place that keeps both in step with a record's state.

// prelude is shared by the scripts that read or write records.
const prelude = `
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt(n) return string.format('%.0f', n) end
local F = {'sc','op','ky','fp','st','ow','v','le','ex','rq','rs','to','at','ca','ua','tn','nt','om'}
-- nextv draws a version from the bucket's counter (a key in the bucket's
-- slot that never expires): versions never repeat for a record, across
-- releases, sweeps, expiry by Redis and replacements. It is above atleast
-- (the record's current version), so records written before the counter
-- existed keep growing too.
local function nextv(ver, atleast)
  local n = redis.call('INCR', ver)
  if atleast and n <= atleast then
    n = atleast + 1
    redis.call('SET', ver, fmt(n))
  end
  return n
end
local function read(key, out)
  local r = redis.call('HMGET', key, unpack(F))
  for i = 1, #F do out[#out + 1] = r[i] end
  return out
end
local function final(st) return st == 'SUCCESS' or st == 'FAILED' end
-- While Cluster migrates a bucket's slot, its keys are split between the
-- source node (MIGRATING) and the target (IMPORTING). Redis checks the
-- declared KEYS before a script runs (TRYAGAIN when they are split, ASK
-- when the source has none of them), so a running script holds all of them;
-- but a key it did not declare (a record named by an index entry), or a
-- declared index it emptied itself, may be missing from this node. On the
-- source, touching such a key raises an error (ASK), which would abort the
-- script after some of its writes; on the target it reads as absent
-- although it still lives on the source. Neither means "gone".
--
-- look reads fields of a record named by an index entry, the state ('st')
-- first. It returns the fields when the record is here, false when it is
-- certainly gone, and nil when this node cannot tell now (the slot is
-- migrating and the record is not here): the caller must then leave the
-- entry alone, never drop it as stale. The second read is a two-key
-- command with anchor, another key of the slot: on a migrating slot Redis
-- refuses a multi-key command unless this node holds every key, so it
-- answers only where the slot is stable.
local function look(k, anchor, ...)
  local r = redis.pcall('HMGET', k, ...)
  if type(r) ~= 'table' or r.err ~= nil then return nil end
  if r[1] then return r end
  local e = redis.pcall('EXISTS', k, anchor)
  if type(e) ~= 'number' then return nil end
  return false
end
-- due returns up to 64 entries of index idx due by now, from offset (a
-- rank: the due entries are the index's first ones); none when the index
-- is gone (a script emptied it, and on a migrating slot reading a missing
-- key raises). ZRANGE by rank costs O(log n) whatever the offset, where
-- ZRANGEBYSCORE's LIMIT walks past offset entries.
local function due(idx, now, offset)
  local r = redis.pcall('ZRANGE', idx, offset, offset + 63, 'WITHSCORES')
  if type(r) ~= 'table' or r.err ~= nil then return {} end
  local out = {}
  for i = 1, #r, 2 do
    if tonumber(r[i + 1]) > now then break end
    out[#out + 1] = r[i]
  end
  return out
end
-- unindex removes key from idx; an index that is gone holds nothing.
local function unindex(idx, key)
  redis.pcall('ZREM', idx, key)
end
local function index(key, pend, exp, st, le, ex)
  if st == 'UNKNOWN' or (st == 'PROCESSING' and le > 0) then
    redis.call('ZADD', pend, fmt(le), key)
  else
    unindex(pend, key)
  end
  if final(st) then
    redis.call('ZADD', exp, fmt(ex), key)
  else
    unindex(exp, key)
  end
end
`

// claimScript: KEYS record, pending, expiry, version counter; ARGV fingerprint, owner,
// lease (us), request, acquire-unknown ("1"), scope, operation, key, nonce,
// expiry grace (us), if-version ("0": any; see ClaimParams.IfVersion). Reply: claimed (0/1), store now, then the record's
// fields.
//
// The nonce makes a client-side retry of the same call (go-redis resends a
// command whose connection broke) recognize its own claim instead of
// reporting the record as someone else's.
//
// Redis deletes finished records grace after ExpiresAt but cannot drop their
// expiry-index entries. So that the index stays bounded when nobody calls
// Sweep, every claim that creates a record also clears up to two entries of
// its bucket that are past ExpiresAt + grace (finished records come only
// from created records, so the index drains at least as fast as it grows).
// A replay, or any claim that finds a record it cannot take, writes
// nothing: Redis then neither replicates nor logs the script.
var claimScript = redis.NewScript(prelude + `
local key = KEYS[1]
local now = now_us()
-- One read of the whole record (F, then the claim nonce): a replay, the
-- common case, answers from it without a second read.
local names = {unpack(F)}
names[#names + 1] = 'cn'
local all = redis.call('HMGET', key, unpack(names))
local cur = {all[5], all[4], all[7], all[8], all[9], all[6], all[#F + 1]} -- st fp v le ex ow cn
local st, fp = cur[1], cur[2]
local le, ex = tonumber(cur[4]) or 0, tonumber(cur[5]) or 0
local lease = now + tonumber(ARGV[3])
local claimed = 1
-- An existing record is taken only at the version the caller read, if it
-- names one (ClaimParams.IfVersion).
local atv = ARGV[11] == '0' or cur[3] == ARGV[11]
if not st or (atv and final(st) and ex > 0 and ex <= now) then
  local cutoff = now - tonumber(ARGV[10])
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', fmt(cutoff), 'LIMIT', 0, 2)) do
    local c = nil
    if k ~= key then c = look(k, KEYS[3], 'st', 'ex') end
    if c == false then
      unindex(KEYS[3], k) -- the record is gone
    elseif c then
      local kex = tonumber(c[2]) or 0
      if final(c[1]) and kex > cutoff then
        redis.call('ZADD', KEYS[3], fmt(kex), k)
      else
        if final(c[1]) then redis.call('DEL', k) end
        unindex(KEYS[3], k)
      end
    end -- nil: not on this node while the slot migrates; not now
  end
  -- A finished record replaced keeps its last transition's token and
  -- version (lt, lv: see transitionScript), so that a resend of that write
  -- still finds it.
  local last = {false, false}
  if st then last = redis.call('HMGET', key, 'lt', 'lv') end
  redis.call('DEL', key)
  redis.call('HSET', key, 'sc', ARGV[6], 'op', ARGV[7], 'ky', ARGV[8], 'fp', ARGV[1],
    'st', 'PROCESSING', 'ow', ARGV[2], 'v', fmt(nextv(KEYS[4], tonumber(cur[3]))), 'le', fmt(lease), 'ex', '0',
    'rq', ARGV[4], 'to', '0', 'at', '0', 'ca', fmt(now), 'ua', fmt(now), 'cn', ARGV[9],
    'tn', '', 'nt', '', 'om', '0')
  if last[1] and last[2] then redis.call('HSET', key, 'lt', last[1], 'lv', last[2]) end
  index(key, KEYS[2], KEYS[3], 'PROCESSING', lease, 0)
elseif atv and st == 'PROCESSING' and le > 0 and le <= now and fp == ARGV[1] then
  redis.call('HINCRBY', key, 'to', 1)
  redis.call('HSET', key, 'v', fmt(nextv(KEYS[4], tonumber(cur[3]))), 'ow', ARGV[2], 'le', fmt(lease), 'ua', fmt(now), 'cn', ARGV[9], 'tn', '')
  index(key, KEYS[2], KEYS[3], st, lease, 0)
elseif atv and ARGV[5] == '1' and st == 'UNKNOWN' and le <= now and fp == ARGV[1] then
  -- Attempts count the reconciler's acquisitions only.
  redis.call('HSET', key, 'v', fmt(nextv(KEYS[4], tonumber(cur[3]))), 'ow', ARGV[2], 'le', fmt(lease), 'ua', fmt(now), 'cn', ARGV[9], 'tn', '')
  index(key, KEYS[2], KEYS[3], st, lease, 0)
elseif not (cur[7] == ARGV[9] and cur[6] == ARGV[2] and (st == 'PROCESSING' or st == 'UNKNOWN')) then
  local out = {0, fmt(now)}
  for i = 1, #F do out[i + 2] = all[i] end
  return out
end
return read(key, {claimed, fmt(now)})
`)

// getScript: KEYS record. Reply: found (0/1), store now, the fields.
var getScript = redis.NewScript(prelude + `
local now = now_us()
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, fmt(now)} end
return read(KEYS[1], {1, fmt(now)})
`)

// transitionScript: KEYS record, pending, expiry, version counter; ARGV
// from, owner, version, to, new owner, lease (us), ttl (us), response, has
// response ("1"), expiry grace (ms), token, note, response omitted ("1").
// Reply: {1, new version} or {0} (lease lost). The token is the runtime's
// (the same on every retry of one outcome) or, when it gives none, a
// per-call nonce (the client resending the script): a record that still
// carries it (no version-changing write since) was written by this very
// write, and its version comes back. The last transition's token and
// version are also kept apart ('lt', 'lv'), untouched by claims and
// acquisitions (and carried over when a claim replaces a finished record
// past its TTL): a resend that arrives after a reconciler acquired the
// record, a duplicate took it over or a claim replaced it still finds its
// own write and gets the version it wrote, not "lease lost" (go-redis
// resends after a read timeout, seconds later, while UNKNOWN records are
// due at once). Only the next transition, or the record's deletion (a
// release, a sweep, Redis's own expiry), forgets it.
//
// Finished records get PEXPIRE ttl+grace: Redis deletes them itself, grace
// after ExpiresAt, so a claim or Sweep in between still sees the record (and
// a reused key gets a higher version). Other states are PERSISTed.
var transitionScript = redis.NewScript(prelude + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'st', 'ow', 'v', 'tn', 'lt', 'lv')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or tonumber(cur[3]) ~= tonumber(ARGV[3]) then
  if cur[4] and cur[4] ~= '' and cur[4] == ARGV[11] then
    return {1, tonumber(cur[3])} -- this very write, retried: it was applied
  end
  if cur[5] and cur[5] == ARGV[11] and tonumber(cur[6]) then
    return {1, tonumber(cur[6])} -- applied, and claimed or acquired since
  end
  return {0}
end
local now = now_us()
local v = nextv(KEYS[4], tonumber(cur[3]))
local to = ARGV[4]
local le, ex = 0, 0
if tonumber(ARGV[6]) > 0 then le = now + tonumber(ARGV[6]) end
if final(to) then ex = now + tonumber(ARGV[7]) end
redis.call('HSET', key, 'st', to, 'ow', ARGV[5], 'v', fmt(v), 'le', fmt(le), 'ex', fmt(ex), 'ua', fmt(now),
  'tn', ARGV[11], 'nt', ARGV[12], 'om', ARGV[13], 'lt', ARGV[11], 'lv', fmt(v))
if to == 'PROCESSING' then
  redis.call('HSET', key, 'at', '0') -- a new run of the effect: its outcome gets every attempt
end
if final(to) then
  if ARGV[9] == '1' then
    redis.call('HSET', key, 'rs', ARGV[8])
  else
    redis.call('HDEL', key, 'rs')
  end
  local ms = math.floor(tonumber(ARGV[7]) / 1000) + tonumber(ARGV[10])
  if ms < 1 then ms = 1 end
  redis.call('PEXPIRE', key, fmt(ms))
else
  redis.call('PERSIST', key)
end
index(key, KEYS[2], KEYS[3], to, le, ex)
return {1, v}
`)

// renewScript: KEYS record, pending, expiry; ARGV state, owner, version,
// lease (us). Reply: {1, lease expiry} or {0}.
var renewScript = redis.NewScript(prelude + `
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'st', 'ow', 'v', 'ex')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or tonumber(cur[3]) ~= tonumber(ARGV[3]) then
  return {0}
end
local now = now_us()
local le = now + tonumber(ARGV[4])
redis.call('HSET', key, 'le', fmt(le), 'ua', fmt(now))
index(key, KEYS[2], KEYS[3], cur[1], le, tonumber(cur[4]) or 0)
return {1, fmt(le)}
`)

// releaseScript: KEYS record, pending, expiry, receipt; ARGV state, owner,
// version, nonce, receipt lifetime (ms). Reply: 1 (deleted) or 0 (lease lost).
//
// The nonce names the call. A release leaves a receipt (<bucket>rel:<nonce>,
// the record's key, expiring after the receipt lifetime); a resend of the
// same call (go-redis resends a command whose reply it did not get) finds
// the record gone or replaced and the receipt naming it, and answers 1:
// its own first run deleted the record. The receipt is a declared key, so
// that Redis Cluster runs the script only on the node that holds it with
// the record and the indexes: while the bucket's slot migrates and its
// keys are split (the receipt yet to be created, or left on the source
// while the indexes moved) the script does not run (TRYAGAIN; go-redis,
// then the runtime, try again), and a resend finds its receipt wherever
// the script runs. The receipt is written first, and a release that could
// not write it deletes nothing (TRYAGAIN). Undeclared, a receipt was left
// behind on the source: a resend that ran on the slot's new node found
// neither record nor receipt and answered "lease lost" for the record it
// had deleted.
var releaseScript = redis.NewScript(`
local key = KEYS[1]
local rcpt = KEYS[4]
local cur = redis.call('HMGET', key, 'st', 'ow', 'v')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or tonumber(cur[3]) ~= tonumber(ARGV[3]) then
  if redis.pcall('GET', rcpt) == key then
    return 1 -- this very release, resent: it was applied
  end
  return 0
end
local w = redis.pcall('SET', rcpt, key, 'PX', ARGV[5])
if type(w) == 'table' and w.err then
  return redis.error_reply('TRYAGAIN release receipt not writable (slot migrating): ' .. w.err)
end
redis.call('DEL', key)
redis.call('ZREM', KEYS[2], key)
redis.call('ZREM', KEYS[3], key)
return 1
`)

// acquireScript: KEYS pending index, version counter and receipt of one bucket; ARGV owner, lease (us),
// limit, max attempts, inspection budget, nonce, start, then the operations
// to keep to (none: all). It walks the index from the oldest lease, from the
// start'th due entry, acquires due records (PROCESSING with an expired
// lease, UNKNOWN with a free lease below max attempts) as UNKNOWN for the
// owner, drops stale entries, and skips records over max attempts or of
// other operations, which stay where they are. Reply: store now, where a
// next run should start (the skipped entries' count from start on, when the
// budget ran out first; else -1), then the fields of each acquired record.
// The caller runs the script again from there until it has its limit or
// the due entries end, so that skipped entries, however many, never hide
// the due records behind them.
//
// The nonce names the call. A run that acquires records leaves a receipt
// (<bucket>acq:<nonce>, a hash of record key to version, expiring with the
// lease); a resend of the same call (go-redis resends a command whose reply
// it did not get, e.g. after a read timeout) finds it and answers with the
// records the first run acquired that are still as it left them, instead of
// acquiring others and leaving those held, unconverged, until their lease
// ends. The receipt is a declared key (see releaseScript): while the
// bucket's slot migrates and its keys are split, the script does not run
// (TRYAGAIN: the bucket waits for a later call), and a resend finds its
// receipt wherever it runs. (Undeclared, a receipt could not be created
// on the source of a migrating slot, which the script did not notice, and
// one was left on the source while the indexes moved: a resend on the
// slot's new node acquired other records, left held, and its own receipt
// there made the reshard's MIGRATE of the first one fail, BUSYKEY.)
var acquireScript = redis.NewScript(prelude + `
local pend = KEYS[1]
local now = now_us()
local out = {fmt(now), '-1'}
local rcpt = KEYS[3]
local prev = redis.pcall('HGETALL', rcpt)
if type(prev) == 'table' and prev.err == nil and #prev > 0 then
  for i = 1, #prev, 2 do
    local cur = look(prev[i], pend, 'st', 'ow', 'v')
    if cur and cur[1] == 'UNKNOWN' and cur[2] == ARGV[1] and cur[3] == prev[i + 1] then
      read(prev[i], out)
    end
  end
  return out
end
local lease = now + tonumber(ARGV[2])
local limit, maxa, budget = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ops = nil -- ARGV[8..]: only records of these operations, when given
if #ARGV > 7 then
  ops = {}
  for i = 8, #ARGV do ops[ARGV[i]] = true end
end
local receipt = {}
local n, offset, seen = 0, tonumber(ARGV[7]), {}
local ended = false -- the due entries ended before the budget
while n < limit and budget > 0 do
  local batch = due(pend, now, offset)
  if #batch == 0 then ended = true break end
  for _, key in ipairs(batch) do
    if n >= limit or budget <= 0 then break end
    budget = budget - 1
    local cur = look(key, pend, 'st', 'le', 'at', 'op', 'v')
    local st, le, at = nil, 0, 0
    if cur then st, le, at = cur[1], tonumber(cur[2]) or 0, tonumber(cur[3]) or 0 end
    if seen[key] or cur == nil then
      offset = offset + 1 -- nil: on the other node of a migrating slot, not now
    elseif cur == false then
      unindex(pend, key) -- stale entry: the record is gone
    elseif ops and not ops[cur[4]] then
      offset = offset + 1 -- another operation: not this caller's
    elseif not (st == 'UNKNOWN' or (st == 'PROCESSING' and le > 0)) then
      unindex(pend, key) -- stale entry: the record is not pending
    elseif le > now then
      redis.call('ZADD', pend, fmt(le), key) -- stale score: move it to its lease
    elseif st == 'PROCESSING' or maxa <= 0 or at < maxa then
      local v = fmt(nextv(KEYS[2], tonumber(cur[5])))
      redis.call('HINCRBY', key, 'at', 1)
      redis.call('HSET', key, 'st', 'UNKNOWN', 'ow', ARGV[1], 'v', v, 'le', fmt(lease), 'ua', fmt(now), 'tn', '')
      redis.call('ZADD', pend, fmt(lease), key)
      read(key, out)
      receipt[#receipt + 1] = key
      receipt[#receipt + 1] = v
      seen[key] = true
      n = n + 1
      if lease <= now then offset = offset + 1 end
    else
      offset = offset + 1 -- over max attempts for this caller
    end
  end
end
if n < limit and not ended then out[2] = fmt(offset) end
if #receipt > 0 then
  redis.call('HSET', rcpt, unpack(receipt))
  redis.call('PEXPIRE', rcpt, fmt(math.max(1, math.floor(tonumber(ARGV[2]) / 1000))))
end
return out
`)

// sweepScript: KEYS expiry index of one bucket; ARGV limit, inspection
// budget. Deletes finished records whose ExpiresAt passed, oldest first,
// and drops stale entries (records Redis already expired, or replaced).
// Reply: how many records it deleted.
var sweepScript = redis.NewScript(prelude + `
local now = now_us()
local exp = KEYS[1]
local limit, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
local n, offset = 0, 0
while n < limit and budget > 0 do
  local batch = due(exp, now, offset)
  if #batch == 0 then break end
  for _, key in ipairs(batch) do
    if n >= limit or budget <= 0 then break end
    budget = budget - 1
    local cur = look(key, exp, 'st', 'ex')
    if cur == nil then
      offset = offset + 1 -- on the other node of a migrating slot: not now
    elseif cur == false then
      unindex(exp, key) -- Redis expired it
    else
      local ex = tonumber(cur[2]) or 0
      if final(cur[1]) and ex > 0 and ex <= now then
        redis.call('DEL', key)
        unindex(exp, key)
        n = n + 1
      elseif final(cur[1]) and ex > now then
        redis.call('ZADD', exp, fmt(ex), key)
      else
        unindex(exp, key) -- replaced by a claim
      end
    end
  end
end
return n
`)

// dueScript: KEYS one index; counts its entries due by the store's clock.
// AcquirePending and Sweep pipeline it over every bucket to find the ones
// worth running their script on.
var dueScript = redis.NewScript(`
local t = redis.call('TIME')
return redis.call('ZCOUNT', KEYS[1], '-inf', string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2])))
`)

var allScripts = []*redis.Script{claimScript, getScript, transitionScript, renewScript, releaseScript, acquireScript, sweepScript, dueScript}
