-- The submissions queue and its acknowledgements: lb_enqueue, lb_ack, lb_status, lb_forget.
local queue = {}

-- XINFO's records (flat field, value lists) as tables; none when the stream or group is missing.
function queue.info_records(reply)
  if type(reply) ~= 'table' or reply.err then
    return {}
  end
  local records = {}
  for i, flat in ipairs(reply) do
    local record = {}
    for f = 1, #flat, 2 do
      record[flat[f]] = flat[f + 1]
    end
    records[i] = record
  end
  return records
end

-- Each consumer group of a stream as a table of its XINFO GROUPS fields; none without the stream.
function queue.stream_groups(stream)
  return queue.info_records(redis.pcall('XINFO', 'GROUPS', stream))
end

-- Entries some group has still to apply: the most any group has not acknowledged (lag: not yet
-- delivered; pending: delivered, not acknowledged). lb_ack trims below the oldest entry still to
-- apply, so the stream may hold acknowledged entries newer than a pending one: its length is an
-- upper bound, answered without a group or when a group's lag is unknown (XDEL'd entries ahead).
function queue.backlog_of(stream, length)
  local groups, most = queue.stream_groups(stream), 0
  for _, g in ipairs(groups) do
    if type(g.lag) ~= 'number' then
      return length
    end
    most = math.max(most, g.lag + g.pending)
  end
  return #groups > 0 and most or length
end

-- Trim a stream below the oldest entry any of its groups has still to apply: a group's oldest
-- pending entry, or (nothing pending) the one after its last delivered. Exact MINID: whole nodes
-- are freed, the first kept node is cut where the bound falls (no per-id search as XDEL makes).
function queue.trim_applied(stream)
  local bound
  for _, g in ipairs(queue.stream_groups(stream)) do
    local first
    if g.pending > 0 then
      first = redis.call('XPENDING', stream, g.name, '-', '+', 1)[1][1]
    else
      local ms, seq = string.match(g['last-delivered-id'], '^(%d+)-(%d+)$')
      -- the next id; a sequence too long to count on in a double keeps its entry (one too many)
      first = #seq <= 14 and ms .. '-' .. string.format('%d', tonumber(seq) + 1) or g['last-delivered-id']
    end
    local ms, seq = string.match(first, '^(%d+)-(%d+)$') -- stream ids in order: ms, then seq, as numbers
    ms, seq = tonumber(ms), tonumber(seq)
    if not bound or ms < bound[1] or (ms == bound[1] and seq < bound[2]) then
      bound = { ms, seq, first }
    end
  end
  if bound then
    redis.call('XTRIM', stream, 'MINID', bound[3])
  end
end

-- An entry's submission id: its slip up to the first tab, or its 'id' field; nil if it has none.
function queue.entry_id(args, at)
  local last = at + 2 * tonumber(args[at])
  for f = at + 1, last - 1, 2 do
    if args[f] == 'slip' then
      return string.match(args[f + 1], '^[^\t]+')
    elseif args[f] == 'id' then
      return args[f + 1]
    end
  end
  return nil
end

-- The request bodies' fingerprints, each against the one its id was first filed with (the HTTP
-- API's Idempotency-Key rule): another refuses the whole call before any append, since the id
-- would be applied with the first body and this one dropped unseen. The same one is a retry, not
-- appended: the API's clock stamps a slip anew each time and lb_submit dedupes an id only within
-- its stamp's hour. A record is "<fingerprint> <first filing's stream id>" (or an older release's
-- fingerprint alone). Returns the first filings (fingerprint by id) and the retries (the stream
-- id, '' if unknown, by entry index), or nil and the refusal.
function queue.claim_bodies(keys, args, starts, count, pos)
  if not valid.parse_uint(args[pos], 12) then
    return nil, nil, refuse('bad_request', 'malformed body fingerprints')
  end
  local first, retries = {}, {}
  for i = 1, count do
    local fp = args[pos + i]
    if fp ~= '' then
      local id = queue.entry_id(args, starts[i])
      if not id then
        return nil, nil, refuse('bad_request', 'entry ' .. i .. ' has a body fingerprint but no submission id')
      end
      local stored
      for k = 3, #keys do -- the newest bucket first: a retry comes soon after
        stored = redis.call('HGET', keys[k], id)
        if stored then
          break
        end
      end
      local known, stream_id = first[id], nil
      if stored then
        known, stream_id = string.match(stored, '^(%S+) ?(%S*)$')
      end
      if known and known ~= fp then
        return nil, nil, refuse('idempotency_conflict', 'submission ' .. id .. ' was filed with another body')
      end
      if stored then
        retries[i] = stream_id
      else
        -- a second copy within this call is appended too: the same slip, deduped by lb_submit
        first[id] = fp
      end
    end
  end
  return first, retries
end

--[[ lb_enqueue: append submissions to the queue, unless that would overfill it.
The backlog check and the appends are one atomic call, so concurrent submitters cannot together
push the backlog past its cap. The stream's length bounds the backlog from above (backlog_of):
only a stream that looks full is counted exactly. Nothing is trimmed here: a waiting entry is
never dropped to make room. A malformed call appends nothing. Each entry's submission id joins
the queued set (lb_status: pending) until the scorer acknowledges it. With body buckets (the
HTTP API), claim_bodies holds each body to the first filed under its id, and a first filing is
kept with its stream id in the current hour's bucket; a retry is neither appended nor queued.
Input:  KEYS[1] submissions stream, KEYS[2] queued set, KEYS[3 ..] (optional) the bodies buckets
        of the idempotency window, the current hour's first
        ARGV    backlog_max, entry_count, then per entry: field_count (pairs), field, value, ...;
                with body buckets: their expire_at (unix s), a fingerprint per entry ('': none)
Output: per entry in order its stream id, or for a retry (body buckets only) a one-element
        array: the stream id its first filing got ('' when that record does not hold one);
        or 'ERR backlog_full ...' or 'ERR idempotency_conflict ...' and nothing is appended
]]
function queue.lb_enqueue(keys, args)
  local backlog_max = valid.parse_uint(args[1], 12)
  local count = valid.parse_uint(args[2], 9)
  if not backlog_max or not count then
    return refuse('bad_request', 'malformed enqueue header')
  end
  local length = redis.call('XLEN', keys[1])
  if length + count > backlog_max then
    length = queue.backlog_of(keys[1], length)
    if length + count > backlog_max then
      return refuse('backlog_full', 'the submissions backlog holds ' .. length .. ' of ' .. backlog_max .. ' entries')
    end
  end
  if not keys[2] then
    return refuse('bad_request', 'the queued set is required')
  end
  -- every entry's shape is checked before the first append: a malformed call appends nothing
  local starts, pos = {}, 3
  for i = 1, count do
    local pairs_count = args[pos] == '1' and 1 or valid.parse_uint(args[pos], 3)
    if not pairs_count or pairs_count < 1 or pos + 2 * pairs_count > #args then
      return refuse('bad_request', 'malformed entry ' .. i)
    end
    starts[i] = pos
    pos = pos + 2 * pairs_count + 1
  end
  local bodies = #keys > 2
  if pos + (bodies and count + 1 or 0) ~= #args + 1 then
    return refuse('bad_request', 'arguments past the last entry')
  end
  local first, retries = nil, {}
  if bodies then
    local err
    first, retries, err = queue.claim_bodies(keys, args, starts, count, pos)
    if err then
      return err
    end
  end
  local ids, queued, n, stream = {}, {}, 0, keys[1]
  local filed = {} -- a first filing's stream id by submission id, kept with its fingerprint
  for i = 1, count do
    local at, id = starts[i], nil
    if retries[i] then
      ids[i] = { retries[i] }
    elseif args[at] == '1' and args[at + 1] == 'slip' then -- nearly every entry: a slip alone
      local slip = args[at + 2]
      ids[i] = redis.call('XADD', stream, '*', 'slip', slip)
      id = string.match(slip, '^[^\t]+')
    else
      ids[i] = redis.call('XADD', stream, '*', unpack(args, at + 1, at + 2 * tonumber(args[at])))
      id = queue.entry_id(args, at)
    end
    if id then -- none for a retry: its id is queued already, or applied
      n = n + 1
      queued[n] = id
      filed[id] = filed[id] or ids[i]
    end
  end
  batch.chunked('SADD', keys[2], queued)
  if first and next(first) then
    for id, fp in pairs(first) do
      redis.call('HSET', keys[3], id, fp .. ' ' .. filed[id])
    end
    redis.call('EXPIREAT', keys[3], args[pos], 'NX')
  end
  return ids
end

--[[ lb_ack: acknowledge a group's entries, take their ids out of the queued set, and trim the
stream below the oldest entry any group has still to apply (trim_applied): XDEL looks up each id
in its node, the trim frees whole nodes. An entry not acknowledged stays, for a dead replica's
entries to be claimed.
Input:  KEYS[1] stream, KEYS[2] queued set (optional)
        ARGV    group, entry_count, the entries' stream ids, then submission ids to unqueue
Output: the number of entries acknowledged
]]
function queue.lb_ack(keys, args)
  local count = valid.parse_uint(args[2], 9)
  if not count or #args < 2 + count then
    return refuse('bad_request', 'malformed acknowledgement')
  end
  local acked = 0
  for i = 3, 2 + count, 1000 do -- chunked: unpack() is bounded by Lua's C stack
    acked = acked + redis.call('XACK', keys[1], args[1], unpack(args, i, math.min(i + 999, 2 + count)))
  end
  if keys[2] then
    for i = 3 + count, #args, 1000 do
      redis.call('SREM', keys[2], unpack(args, i, math.min(i + 999, #args)))
    end
  end
  queue.trim_applied(keys[1])
  return acked
end

--[[ lb_status: what became of a submission, by its id: applied (its id is in a seen bucket;
with its per-board rows when it asked lb_submit to keep them), pending (in the queue), refused
(the scorer dead-lettered it: code and message), or unknown (never received, or older than the
idempotency window). Applied wins over pending (a copy sent twice), pending over refused (a
refused slip sent again).
Input:  KEYS[1] queued set, KEYS[2 .. seen_count + 1] seen buckets, the outcome buckets of the
        same hours in the same order, then refused buckets
        ARGV    submission id, seen_count
Output: {'applied'} or {'applied', rows JSON: [{board, window, period, improved, rank,
        previous_rank, points}, ...]}, {'pending'}, {'refused', code, message} or {'unknown'}
]]
function queue.lb_status(keys, args)
  local id, seen_count = args[1], valid.parse_uint(args[2], 4)
  if type(id) ~= 'string' or id == '' or not seen_count or 2 * seen_count + 1 > #keys then
    return refuse('bad_request', 'submission id and seen bucket count required')
  end
  for k = 2, seen_count + 1 do
    if redis.call('SISMEMBER', keys[k], id) == 1 then
      local rows = redis.call('HGET', keys[k + seen_count], id)
      return rows and { 'applied', rows } or { 'applied' }
    end
  end
  if redis.call('SISMEMBER', keys[1], id) == 1 then
    return { 'pending' }
  end
  for k = #keys, 2 * seen_count + 2, -1 do -- the newest refusal first
    local raw = redis.call('HGET', keys[k], id)
    if raw then
      local code, message = raw:match('^(%S*) ?(.*)$')
      return { 'refused', code, message }
    end
  end
  return { 'unknown' }
end

--[[ lb_forget: remove the consumer names of replicas that are gone.
A consumer name stays in its group after its replica dies. Names idle (no read attempted) for
idle_ms and holding no pending entry are deleted in one atomic call: never one holding entries.
Input:  KEYS[1] stream;  ARGV group, idle_ms, the caller's own name (never deleted)
Output: the names removed
]]
function queue.lb_forget(keys, args)
  local idle_ms = tonumber(args[2])
  if not idle_ms then
    return refuse('bad_request', 'idle_ms must be a number')
  end
  local removed = {} -- no stream or no group yet: nothing to forget
  for _, c in ipairs(queue.info_records(redis.pcall('XINFO', 'CONSUMERS', keys[1], args[1]))) do
    if c.pending == 0 and c.idle >= idle_ms and c.name ~= args[3] then
      redis.call('XGROUP', 'DELCONSUMER', keys[1], args[1], c.name)
      removed[#removed + 1] = c.name
    end
  end
  return removed
end
