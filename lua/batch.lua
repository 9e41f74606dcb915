-- The batch machinery of lb_submit: its records read, what is read once per batch, the boards'
-- deferred writes, the checks every slip passes and the writes made once at the batch's end.
local batch = {}

-- Argument readers --------------------------------------------------------------------------

-- lb_submit's records, each read into locals named as lb_submit's Input names its fields.
batch.SETTINGS_FIELDS, batch.PERIOD_FIELDS, batch.LAYOUT_FIELDS, batch.BOARD_FIELDS, batch.SUBMISSION_FIELDS, batch.FULL_FIELDS = 8, 11, 4, 9, 2, 9
-- The call layout lb_submit reads (leaderboard/batch.py's SUBMIT_LAYOUT): another is refused whole.
batch.SUBMIT_LAYOUT = '4'
-- A slip's parts (SLIP_PARTS): printable ASCII id and player and digits, as the common path takes
-- them (one scan checks all four), else any text between the tabs (the general path checks it).
batch.COMMON_SLIP, batch.ANY_SLIP = '^([ -~]+)\t([ -~]+)\t(%d+)\t(%d+)\t(.*)$', '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$'

-- The period records: a count at pos, then the records. Both readers return nil for a malformed
-- record, so the call is refused before its first write.
function batch.read_periods(keys, args, pos)
  local periods, count = {}, tonumber(args[pos]) or 0
  pos = pos + 1
  for p = 1, count do
    local window, label, start_ms, end_ms, shift, unit_ms, expire_at, players_key, entrants_key, mode, closed_key =
      unpack(args, pos, pos + batch.PERIOD_FIELDS - 1)
    start_ms, end_ms, shift, unit_ms = tonumber(start_ms), tonumber(end_ms), tonumber(shift), tonumber(unit_ms)
    expire_at, players_key = tonumber(expire_at), tonumber(players_key)
    entrants_key, closed_key = tonumber(entrants_key), tonumber(closed_key)
    if not (window and label and start_ms and end_ms and shift and unit_ms and expire_at and keys[players_key]
        and entrants_key and (entrants_key == 0 or keys[entrants_key]) and scoring.RANK_MODES[mode]
        and closed_key and (closed_key == 0 or keys[closed_key])) then
      return nil
    end
    periods[p] = { window = window, label = label, start_ms = start_ms, end_ms = end_ms, scale = 2 ^ shift,
      max_points = 2 ^ (53 - shift) - 1, unit_ms = unit_ms, expire_at = expire_at, hll = keys[players_key],
      entrants = entrants_key ~= 0 and keys[entrants_key] or nil, mode = mode,
      marker = closed_key ~= 0 and keys[closed_key] or nil,
      players = {}, listed = {}, -- applied in this batch, each once, for the distinct-player log
    }
    pos = pos + batch.PERIOD_FIELDS
  end
  return periods, pos
end

-- The layout records (the boards and seen bucket the batch's slips share): a count at pos, then
-- each layout and its boards, of one definition (the game's own, `default`, of encoding points:
-- no members or metadata). A layout gathers its slips' distinct players (their scores are read
-- on each of its boards) and, per seen bucket (one mark each, listed in marks), their ids. Each
-- board's record for the batch (a record per layout and key) is made here; its held entries
-- (batch.held_board) are read at the first slip that writes it.
function batch.read_layouts(keys, periods, args, pos, defs)
  local layouts, marks, count = {}, {}, tonumber(args[pos]) or 0
  pos = pos + 1
  for l = 1, count do
    local seen_key, outcomes_key, seen_expire_at, board_count = unpack(args, pos, pos + batch.LAYOUT_FIELDS - 1)
    local layout = { seen = keys[tonumber(seen_key)], outcomes = keys[tonumber(outcomes_key)],
      seen_expire_at = seen_expire_at, boards = {} }
    board_count = tonumber(board_count)
    if not (layout.seen and layout.outcomes and valid.parse_uint(seen_expire_at, 12) and board_count and board_count > 0) then
      return nil
    end
    pos = pos + batch.LAYOUT_FIELDS
    for b = 1, board_count do
      local board_key, period, op, scope, hist_key, points_key, definition, members_key, meta_key =
        unpack(args, pos, pos + batch.BOARD_FIELDS - 1)
      local def = defs[tonumber(definition)]
      local board = { key = keys[tonumber(board_key)], period = periods[tonumber(period)], own_op = op, scope = scope,
        hist = keys[tonumber(hist_key)], pts = keys[tonumber(points_key)], def = def, top_n = def and def.top_n,
        members = keys[tonumber(members_key)], meta = keys[tonumber(meta_key)] }
      if not (board.key and board.period and op and scope and board.hist and board.pts and def and (def.points or board.members and board.meta)) then
        return nil
      end
      layout.def, layout.boards[b] = def, board
      pos = pos + batch.BOARD_FIELDS
    end
    layout.mark = marks[layout.seen] or { key = layout.seen, expire_at = seen_expire_at, ids = {}, applied = {} }
    if not marks[layout.seen] then
      marks[layout.seen], marks[#marks + 1] = layout.mark, layout.mark
    end
    layout.players, layout.distinct, layouts[l] = {}, {}, layout
  end
  return layouts, pos, marks
end

-- Closed periods and the scope cap, each read once per batch --------------------------------

-- A period whose close event was added (lb_close sets its marker in the same call): its finals
-- are published, so no later slip may change its boards. Read once per period per batch.
function batch.period_closed(period)
  if period.marker and period.closed == nil then
    period.closed = redis.call('EXISTS', period.marker) == 1
  end
  return period.closed
end

-- The scopes set holds every region and mode value the game's slips named; a new one is added
-- by the slip that names it (record_scopes, after its plan), unless the set holds max_scopes.
function batch.known_scope(ctx, scope)
  if ctx.known[scope] == nil then
    ctx.known[scope] = redis.call('SISMEMBER', ctx.scopes, scope) == 1
  end
  return ctx.known[scope]
end

function batch.scope_count(ctx)
  ctx.scope_count = ctx.scope_count or redis.call('SCARD', ctx.scopes)
  return ctx.scope_count
end

function batch.record_scopes(ctx, scopes)
  for scope in pairs(scopes) do
    ctx.scope_count = batch.scope_count(ctx) + redis.call('SADD', ctx.scopes, scope)
    ctx.known[scope] = true
  end
end

-- Reads made once per batch ----------------------------------------------------------------

-- A command of `key` and many items, in calls of at most 1,000 (unpack() is bounded by Lua's C
-- stack): an item-per-reply command's replies (HMGET) in order, as they come when one call holds
-- them (a copy of each was measurable), or the items a set or hash holds marked in `found`.
function batch.chunked(command, key, items, found)
  if not found and #items <= 1000 then
    return #items > 0 and redis.call(command, key, unpack(items)) or {}
  end
  local out = found or {}
  for i = 1, #items, 1000 do
    local last = math.min(i + 999, #items)
    local replies = redis.call(command, key, unpack(items, i, last))
    for j = 1, type(replies) == 'table' and last - i + 1 or 0 do
      local reply = replies[j]
      if not found then
        out[#out + 1] = reply
      elseif reply and reply ~= 0 then
        found[items[i + j - 1]] = true
      end
    end
  end
  return out
end

function batch.held(command, key, items)
  return batch.chunked(command, key, items, {})
end

-- The batch's banned players (a set, as held's). Most games hold a few tombstones or none: a
-- tombstone hash with fewer fields than the batch has players is read whole (HKEYS) rather than
-- asked about each player (HMGET).
function batch.banned_among(key, players)
  local count = redis.call('HLEN', key)
  if count >= #players then
    return batch.held('HMGET', key, players)
  end
  local found = {}
  if count > 0 then
    for _, player in ipairs(redis.call('HKEYS', key)) do
      found[player] = true
    end
  end
  return found
end

-- A tournament's entrants among the batch's players, read once per batch (the list never
-- shrinks while its tournament runs, and nothing in the batch adds to it).
function batch.entered(ctx, period)
  period.entered = period.entered or batch.held('SMISMEMBER', period.entrants, ctx.players)
  return period.entered[ctx.player] == true
end

-- The batch's boards, by key -----------------------------------------------------------------
-- Each board key the batch writes to has one record (ctx.held): its members' scores, read with
-- one ZMSCORE per layout's players the first time a slip of that layout plans on it (a player
-- already held keeps the batch's view, deferred writes included), and its writes gathered into
-- one multi-member ZADD. A read of the key itself (a rank, the N-th score, a count) flushes them
-- first, so it sees exactly what a ZADD per slip left.
-- A lex board (`members`: player -> member) alike: one HMGET, then one ZREM of the replaced
-- members, one ZADD of the new (score 0), one HSET, where four calls a slip were most of its cost.
function batch.held_board(ctx, key, layout, members)
  local held = ctx.held[key]
  if not held then
    held = { scores = {}, read = {}, pending = { n = 0 }, members = members, gone = members and {} }
    ctx.held[key] = held
    ctx.held[#ctx.held + 1] = key -- flushed in first-touched order
  end
  if not held.read[layout] then
    held.read[layout] = true
    local players, scores = layout.players, held.scores
    for i = 1, #players, 1000 do -- unpack() is bounded by Lua's C stack
      local last = math.min(i + 999, #players)
      local replies = redis.call(members and 'HMGET' or 'ZMSCORE', members or key, unpack(players, i, last))
      for j = 1, last - i + 1 do
        local player = players[i + j - 1]
        if scores[player] == nil then
          local reply = replies[j]
          scores[player] = reply and (members and reply or tonumber(reply)) or false
        end
      end
    end
  end
  return held
end

-- A write deferred until the key is read or the batch ends, listed in pending (length pending.n:
-- an append costs less than a new key in a growing hash). A member written twice is listed twice,
-- with its latest score both times: the board's final order depends only on the final scores.
function batch.defer_write(held, player, score)
  if held.members then -- a lex board: the member it replaces goes
    local old = held.scores[player]
    if old then
      held.gone[#held.gone + 1] = old
    end
  end
  held.scores[player] = score
  local pending = held.pending
  local n = pending.n + 1
  pending.n, pending[n] = n, player
end

-- Before any read of the key: its deferred writes, in ZADDs of at most 500 members (chunked; pairs:
-- 1,000 items never split one). A lex board's replaced members go first (a member may come back:
-- A, B, then A again), its new ones at score 0, then its members hash.
function batch.flush_board(ctx, key)
  local held = ctx.held[key]
  if not (held and held.pending.n > 0) then
    return
  end
  local pending, scores, members, adds, fields = held.pending, held.scores, held.members, {}, held.members and {}
  for i = 1, pending.n do
    local player = pending[i]
    local score = scores[player]
    if members then
      adds[2 * i - 1], adds[2 * i], fields[2 * i - 1], fields[2 * i] = 0, score, player, score
    else
      adds[2 * i - 1], adds[2 * i] = score, player
    end
  end
  if members then
    batch.chunked('ZREM', key, held.gone)
    batch.chunked('HSET', members, fields)
    held.gone = {}
  end
  batch.chunked('ZADD', key, adds)
  -- emptied in place (the next writes list over the old ones): the common pass's board records hold it
  pending.n = 0
end

-- A member's 0-based rank (ZREVRANK) on a board of the batch, its deferred writes flushed first.
-- A rank within the top N is kept until a write may move it (forget_ranks, at every write): the
-- players of the top submit most, and each of their slips reads its rank for the activity entry.
function batch.board_rank(ctx, key, player, top_n)
  local known = ctx.ranks[key]
  local rank = known and known[player]
  if rank then
    return rank
  end
  batch.flush_board(ctx, key)
  rank = redis.call('ZREVRANK', key, player)
  if rank and rank < top_n then
    if not known then
      known = {}
      ctx.ranks[key] = known
    end
    known[player] = rank
  end
  return rank
end

-- A write of a member at `old` (nil: new) to `score`, given the N-th score before it (false:
-- fewer than N members): only one that stays below the N-th score moves no rank of the top N.
function batch.forget_ranks(ctx, key, nth, old, score)
  if nth == false or score >= nth or (old and old >= nth) then
    ctx.ranks[key] = nil
  end
end

-- At the end of the batch: every board's remaining writes, then the expiry of the boards it
-- wrote (EXPIREAT on a key not yet created would do nothing).
function batch.flush_boards(ctx)
  for _, key in ipairs(ctx.held) do
    batch.flush_board(ctx, key)
    local held = ctx.held[key]
    if held.expire_at then
      redis.call('EXPIREAT', key, held.expire_at, 'NX')
      if held.members then
        redis.call('EXPIREAT', held.members, held.expire_at, 'NX')
      end
    end
  end
end

-- Per-submission validation and planning (no writes) ---------------------------------------

-- The checks every slip passes, whatever its board: player and name (check_slip: nil or the
-- error), then, after its values, operator and time (check_time: the timestamp, or nil and error).
function batch.check_slip(sub)
  if not valid.player(sub.player) then
    return entry_error('invalid_player', valid.PLAYER_RULE)
  end
  if sub.name ~= '' and (#sub.name > valid.MAX_NAME_BYTES or not valid.plain_text(sub.name)) then
    return entry_error('invalid_name', 'name must be valid UTF-8 of at most ' .. valid.MAX_NAME_BYTES .. ' bytes, without control characters')
  end
end

function batch.check_time(sub, ctx)
  if sub.op ~= '' and not valid.VALID_OPS[sub.op] then
    return nil, entry_error('invalid_operator', 'operator must be best, incr or set')
  end
  local ts = valid.parse_uint(sub.ts, 15)
  if ts == nil then
    return nil, entry_error('invalid_timestamp', 'timestamp must be integer milliseconds since the epoch')
  end
  if ts > ctx.now + ctx.skew then
    return nil, entry_error('timestamp_in_future', 'timestamp is ahead of the server clock')
  end
  if ts < ctx.now - ctx.max_age then
    return nil, entry_error('timestamp_too_old', 'timestamp is older than the idempotency window')
  end
  return ts
end

-- The batch's histogram changes, three calls per histogram however many buckets moved (HMGET,
-- HSET the new counts, HDEL the emptied): a call per bucket was most of the histograms' cost.
function batch.flush_histograms(ctx)
  local deltas = ctx.hist
  for _, hist_key in ipairs(deltas) do
    local buckets = {}
    for bucket, delta in pairs(deltas[hist_key]) do
      if delta ~= 0 then
        buckets[#buckets + 1] = bucket
      end
    end
    local counts, set, emptied = batch.chunked('HMGET', hist_key, buckets), {}, {}
    for i, bucket in ipairs(buckets) do
      local count = (tonumber(counts[i]) or 0) + deltas[hist_key][bucket]
      if count > 0 then
        set[#set + 1], set[#set + 2] = bucket, count
      else
        emptied[#emptied + 1] = bucket
      end
    end
    batch.chunked('HSET', hist_key, set) -- pairs: 1,000 items never split one
    batch.chunked('HDEL', hist_key, emptied)
    local expire_at = ctx.hist_expire[hist_key]
    if expire_at then
      redis.call('EXPIREAT', hist_key, expire_at, 'NX')
    end
  end
end

-- The profile's name, written only when it changed (then true). Most named slips repeat the
-- stored name: a per-batch cache answers repeats, and the stored JSON is searched for the encoded
-- name before any decode (cjson escapes quotes: '"name":<encoded>' cannot occur in another field).
function batch.update_profile_name(ctx, player, name)
  if ctx.names[player] == name then
    return
  end
  ctx.names[player] = name
  local raw = redis.call('HGET', ctx.profiles, player)
  if raw and raw:find('"name":' .. cjson.encode(name), 1, true) then
    return
  end
  local profile = raw and cjson.decode(raw) or {}
  if profile.name ~= name then
    profile.name = name
    redis.call('HSET', ctx.profiles, player, cjson.encode(profile))
    return true
  end
end

-- Items added to a key in chunks (batch.chunked), then its expiry set once it exists (EXPIREAT on a
-- key not yet created would do nothing; expire_at 0 = never).
function batch.add_all(command, key, items, expire_at)
  batch.chunked(command, key, items)
  if #items > 0 and expire_at ~= 0 then
    redis.call('EXPIREAT', key, expire_at, 'NX')
  end
end

-- One PFADD per distinct-player log per batch (the log's final state does not depend on the
-- adds' order or grouping), each player once: Redis keeps a log of a few thousand players sparse,
-- where an add scans the log (players coming back often: 0.18 us a submission with a member per
-- slip, 0.02 with each player once). The general path's players by period; the common slips'
-- per layout, added to each of its periods.
function batch.count_players(periods, commons)
  for _, period in ipairs(periods) do
    batch.add_all('PFADD', period.hll, period.players, period.expire_at)
  end
  for _, common in ipairs(commons) do
    for _, period in ipairs(common.periods) do
      batch.add_all('PFADD', period.hll, common.players, period.expire_at)
    end
  end
end

-- The ids the batch applied, added to their seen buckets in one SADD per bucket (the duplicate
-- checks were made against the buckets as read before the batch, plus these).
function batch.mark_seen(marks)
  for _, mark in ipairs(marks) do
    batch.add_all('SADD', mark.key, mark.ids, mark.expire_at)
  end
end

-- A slip that asked to keep its outcome: its per-board rows, by its id, in the outcomes bucket of
-- its hour (kept as long as its seen bucket), for lb_status to answer with.
function batch.keep_outcome(ctx, sub, outcome)
  local key = sub.layout.outcomes
  redis.call('HSET', key, sub.id, cjson.encode(outcome))
  if not ctx.expiring[key] then
    redis.call('EXPIREAT', key, sub.layout.seen_expire_at, 'NX')
    ctx.expiring[key] = true
  end
end

-- A number's text as the caller sent it when it is already canonical (no leading zero: a text of
-- n > 1 digits holds at least 10^(n-1), arithmetic rather than a call).
batch.POW10 = {}
for n = 1, 17 do
  batch.POW10[n] = 10 ^ (n - 1)
end

function batch.canonical(text, number)
  local least = batch.POW10[#text]
  return (not least or number >= least) and text or string.format('%d', number)
end

-- The batch's activity (badges and feeds read it), one stream entry per call: n, then a column per
-- field (ACTIVITY_COLUMNS, as leaderboard/activity.py reads them), the applied slips' values joined
-- by newlines (no id, player or operator holds a control character). An XADD per slip was the
-- call's dearest rule (about 2 us a slip in bench.drain). MAXLEN ~ in entries of this call's size
-- keeps about activity_maxlen submissions. The board column is sparse: only a defined board's slip
-- sets it, and a call without one writes none (read as '': the game's boards).
batch.ACTIVITY_COLUMNS = { 'id', 'player', 'points', 'op', 'ts', 'improved', 'rank' }

function batch.log_activity(ctx, sub, points, ts, improved, rank, board)
  local a = ctx.act
  local n = a.n + 1
  a.n = n
  -- a slip of key values has no points ('': whatever points field it carried besides)
  a.id[n], a.player[n], a.points[n], a.op[n] = sub.id, sub.player, points == '' and '' or batch.canonical(sub.points, points), sub.op
  a.ts[n], a.improved[n], a.rank[n] = batch.canonical(sub.ts, ts), improved and '1' or '0', rank == 0 and '0' or rank
  a.board[n] = board ~= '' and board or nil
end

function batch.flush_activity(ctx)
  local a = ctx.act
  if a.n == 0 then
    return
  end
  local fields = { 'XADD', ctx.activity, 'MAXLEN', '~', math.ceil(ctx.maxlen / a.n), '*', 'n', a.n }
  for _, column in ipairs(batch.ACTIVITY_COLUMNS) do
    fields[#fields + 1] = column
    fields[#fields + 1] = table.concat(a[column], '\n')
  end
  if next(a.board) then
    local boards = a.board
    for i = 1, a.n do
      boards[i] = boards[i] or ''
    end
    fields[#fields + 1], fields[#fields + 2] = 'board', table.concat(boards, '\n')
  end
  redis.call(unpack(fields))
end
