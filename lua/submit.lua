-- lb_submit: a batch of submissions, each planned (no writes) then applied, on every board by one
-- planner (submit.plan) and one apply (submit.apply) that differ only by encoding (packed score or
-- lex member). The common slip's path (common.lua) is the same writes in one pass.
local submit = {}

-- A slip's values, or nil and the entry error: its points on a `points` definition, else its
-- key values (definitions.slip_values); a stored default of one key (points_key) takes a slip's points
-- when it names no values, as the game's slips always could. Then its metadata's size.
function submit.values(def, sub)
  local values, bad
  if def.points then
    values = valid.parse_uint(sub.points, 16)
    bad = not values and entry_error('invalid_points', 'points must be a non-negative integer, got ' .. string.format('%q', sub.points:sub(1, 40)))
  else
    values, bad = definitions.slip_values(def, sub.keys == '' and def.points_key and sub.points ~= '' and sub.points or sub.keys)
  end
  if values and (#sub.meta > def.meta_bytes or not valid.utf8(sub.meta)) then
    return nil, entry_error('metadata_too_large', 'metadata must be UTF-8 of at most ' .. def.meta_bytes .. ' bytes on this board')
  end
  return values, bad
end

-- Returns the activity entry's points ('' for key values), the timestamp and the new scopes (nil:
-- none), the layout's boards planned, or nil and an error triple. Every check happens here,
-- before any write, so a refused submission never leaves a partial update. A layout board's
-- record (batch.read_layouts) is reused slip to slip: a table per board per slip was measurable.
function submit.plan(sub, ctx)
  local refused = batch.check_slip(sub)
  if refused then
    return nil, refused
  end
  local layout = sub.layout
  local def = layout.def
  local values, bad = submit.values(def, sub)
  if not values then
    return nil, bad
  end
  local ts, late = batch.check_time(sub, ctx)
  if not ts then
    return nil, late
  end
  -- what every window shares, made once a slip: a packed board's points, a lex member's parts
  local prefix, stamp, who = def.points and values or not def.lex and scoring.pack(def, values)
  if def.lex then
    prefix, stamp, who = definitions.lex_prefix(def, values), lex.time_hex(ts, def.last), lex.player_part(sub.player)
  end
  local new_scopes, new_count = nil, 0
  ctx.player = sub.player
  for _, board in ipairs(layout.boards) do
    local period, scope = board.period, board.scope
    if ts < period.start_ms or ts >= period.end_ms then
      return nil, entry_error('timestamp_outside_window', 'timestamp is outside the ' .. period.window .. ' window ' .. period.label)
    end
    if period.entrants and not batch.entered(ctx, period) then
      return nil, entry_error('not_entered', 'player is not entered in tournament ' .. period.label)
    end
    if period.closed or (period.closed == nil and batch.period_closed(period)) then -- read once per batch
      return nil, entry_error('period_closed', 'the ' .. period.window .. ' period ' .. period.label .. ' is closed: its finals are published')
    end
    -- a scope's board counts, not a definition's home (global, board:<id>)
    if def.scoped and scope ~= 'global' and not scope:find('^board:[^:]*$')
        and not (new_scopes and new_scopes[scope]) and not batch.known_scope(ctx, scope) then
      if ctx.max_scopes > 0 and batch.scope_count(ctx) + new_count >= ctx.max_scopes then
        return nil, entry_error('too_many_scopes', 'the game has ' .. ctx.max_scopes .. ' region and mode values (LB_MAX_SCOPES): ' .. scope .. ' would be one more')
      end
      new_scopes = new_scopes or {}
      new_scopes[scope], new_count = true, new_count + 1
    end
    board.held = board.held or batch.held_board(ctx, board.key, layout, def.lex and board.members)
    local failure = submit.plan_board(board, sub.op ~= '' and sub.op or board.own_op, values, ts, sub, prefix, stamp, who)
    if failure then
      return nil, failure
    end
  end
  return def.points and values or '', ts, new_scopes
end

-- A board's planned write: the stored values (combine_values over the old entry's for incr and
-- per-key operators; the game's points added) and the place they make, by encoding.
function submit.plan_board(board, op, values, ts, sub, at, stamp, who)
  local def = board.def
  local old = board.held.scores[sub.player] or nil
  local tuple_op = not def.per_key and op -- the slip's, else its window's (LB_WINDOW_OPERATORS on the game's)
  local stored, moved = values, old and tuple_op ~= 'best' and tuple_op ~= 'set' -- incr, or per-key operators
  if moved and def.points then
    at = scoring.score_points(old, board.period.scale) + at
  elseif moved then
    local failure
    stored, failure = definitions.combine_values(def, tuple_op or sub.op, definitions.values_of(def, old, board.period.scale), values)
    if not stored then
      return failure
    end
    at = def.lex and definitions.lex_prefix(def, stored) or scoring.pack(def, stored)
  end
  board.old, board.stored, board.meta_value = old, stored, sub.meta
  return (def.lex and submit.place_lex or submit.place_packed)(board, tuple_op, at, ts, stamp, who, moved)
end

-- A packed board's score (the points, and the time in the window's tie unit, counted down for tie
-- first), whether it is written (best: a higher score; set: another; incr and per-key operators:
-- other points, the time kept) and improved (a higher score).
function submit.place_packed(board, tuple_op, points, ts, _, _, moved)
  local period, old = board.period, board.old
  -- only the game's points reach a window's bound: a packed definition's bounds lie within it
  if points > period.max_points then
    return entry_error('points_out_of_range', 'points must stay below ' .. string.format('%d', period.max_points + 1) .. ' on the ' .. period.window .. ' board')
  end
  local scale, t = period.scale, math.floor((ts - period.start_ms) / period.unit_ms)
  local score = moved and points == scoring.score_points(old, scale) and old
    or scoring.pack_score(points, board.def.last and scale - 1 - t or t, scale)
  board.points, board.score = points, score
  board.write = old == nil or (tuple_op == 'best' and score > old) or (tuple_op ~= 'best' and score ~= old)
  board.improved = old == nil or score > old
end

-- A lex board's member, or none: best and set weigh the time with the values, as the board orders
-- them (a packed score holds both); incr and per-key operators move it when values change.
function submit.place_lex(board, tuple_op, prefix, _, stamp, who)
  local old, head, write = board.old, prefix .. stamp, true
  local old_prefix = old and old:sub(1, #prefix)
  if old then
    local old_head = old:sub(1, #head)
    if tuple_op == 'best' then
      write = head < old_head
    elseif tuple_op == 'set' then
      write = head ~= old_head
    else
      write = prefix ~= old_prefix
    end
  end
  board.prefix, board.member = prefix, write and head .. who or nil
  board.write, board.improved = write, not old or prefix < old_prefix
end

-- The N-th entry's score (lex: its member), or false while the board has fewer than N entries.
-- Read once per batch and again only after the top N changed, so whether a write touches the
-- top N is a comparison, not a ZREVRANK per board.
function submit.nth(ctx, board)
  local key, top_n = board.key, board.top_n
  local nth = ctx.nth[key]
  if nth == nil then
    batch.flush_board(ctx, key)
    if board.def.lex then
      nth = redis.call('ZRANGE', key, top_n - 1, top_n - 1)[1] or false
    else
      local flat = redis.call('ZRANGE', key, top_n - 1, top_n - 1, 'REV', 'WITHSCORES')
      nth = flat[2] and tonumber(flat[2]) or false
    end
    ctx.nth[key] = nth
  end
  return nth
end

-- Is a score in the top N, given the N-th score? An exact tie with the N-th entry is decided by
-- member order, which only ZREVRANK knows.
function submit.in_top(ctx, key, player, score, nth, top_n)
  if nth == false or score > nth then
    return true
  end
  return score == nth and batch.board_rank(ctx, key, player, top_n) < top_n
end

-- The same on either encoding: whether a place (`at`: a packed score, or a lex member) is in the
-- top N given the N-th entry's (submit.nth), and the 0-based rank of the player's entry there.
function submit.placed(ctx, board, player, at, nth)
  if board.def.lex then
    return nth == false or at <= nth
  end
  return submit.in_top(ctx, board.key, player, at, nth, board.top_n)
end

function submit.rank(ctx, board, player, at)
  if board.def.lex then
    batch.flush_board(ctx, board.key)
    return redis.call('ZRANK', board.key, at)
  end
  return batch.board_rank(ctx, board.key, player, board.top_n)
end

-- A write changed the board's top N: bump its version; announce an entry (entered_top) at `rank`
-- (0-based, read here unless given; returned), in the board's mode and shaped as its snapshot
-- entries (leaderboard/wire.py), so a page reads every board alike: `score` the first key as a
-- number; a board of key values adds `keys` as text and `meta` when it has some.
function submit.touch_top(board, player, name, ctx, rank, entered_top)
  local period = board.period
  redis.call('HINCRBY', ctx.versions, period.window .. ':' .. period.label .. ':' .. board.scope, 1)
  ctx.bumped[board.key] = true
  ctx.nth[board.key] = nil -- the N-th entry may have changed
  if not entered_top then
    return rank
  end
  local mode, def = period.mode, board.def
  rank = rank or submit.rank(ctx, board, player, board.member) -- a packed board's: by player
  local shown = def.lex and (mode == 'ordinal' and rank + 1 or lex.rank(board.key, board.pts, mode, board.member, #board.prefix))
    or scoring.mode_rank(board.key, board.pts, period.scale, mode, board.points, rank + 1)
  local keys = not def.points and select(2, definitions.key_texts(board)) or nil
  local meta = keys and (board.meta_value ~= '' and board.meta_value or redis.call('HGET', board.meta, player))
  -- cjson writes numbers with 14 significant digits: a key (any int64: 19) or points from 10^14 (any
  -- below 2^53: 16) go in as their digits, spliced; the game's points (nearly always) as a number
  local exact = not keys and board.points < 1e14 and board.points or nil
  local json = cjson.encode({
    type = 'announce', board = board.scope, window = period.window, period = period.label, score = exact,
    player = player, name = name ~= '' and name or nil, rank = shown, keys = keys, meta = meta or nil,
  })
  redis.call('SPUBLISH', ctx.announce, exact and json or '{"score":' .. (keys and keys[1] or string.format('%d', board.points)) .. ',' .. json:sub(2))
  return rank
end

-- A slip's new name (batch.update_profile_name) bumps each of its boards whose top N holds the
-- player, as lb_profile does: the next snapshot shows it though no write changed that top N. A
-- board bumped already in the batch is not: its snapshot, read after the batch, has the name, and
-- a delta goes out only for the version after the last one sent (leaderboard/delta.py).
function submit.renamed(ctx, boards, count, player, name)
  for b = 1, count do
    local board = boards[b]
    local at = board.held.scores[player]
    if at and not ctx.bumped[board.key] and submit.placed(ctx, board, player, at, submit.nth(ctx, board)) then
      submit.touch_top(board, player, name, ctx, nil, false)
    end
  end
end

-- The planned write of one board; returns improved, the rank and previous rank (1-based; 0: not
-- on the board before, or not read) and the points (lex: its first key value as text, '' unless
-- rows are wanted). Every redis.call costs more than its command, so only what the outcome needs
-- is read: `want` 'all' (rows: the rank, and a changed member's previous one), 'top' (the
-- activity entry's: read only when the member is in the top N, else 0) or nil (none).
function submit.apply(board, player, name, ctx, want)
  local key, old, top_n, period, lexical = board.key, board.old, board.top_n, board.period, board.def.lex
  if not board.write then -- nothing changes (a personal best not beaten: the common case)
    local rank = 0
    if want == 'all' or (want == 'top' and submit.placed(ctx, board, player, old, submit.nth(ctx, board))) then
      rank = submit.rank(ctx, board, player, old) + 1
    end
    return false, rank, rank, board.def.points and scoring.score_points(old, period.scale)
      or want == 'all' and (definitions.key_texts(board)) or ''
  end
  local at = lexical and board.member or board.score -- the entry's place after the write
  local prev = want == 'all' and old and submit.rank(ctx, board, player, old) or nil
  local nth = submit.nth(ctx, board)
  local was_top = old ~= nil and (prev and prev < top_n or (not prev and submit.placed(ctx, board, player, old, nth)))
  local dense = period.mode == 'dense' -- the distinct points (key parts) serve dense ranks only
  -- the plan already decided the write, so a plain ZADD (not GT) is right here
  batch.defer_write(board.held, player, at)
  if dense then
    batch.flush_board(ctx, key) -- the distinct points count the old ones on the board
  end
  if lexical then
    lex.member_moved(key, board.hist, dense and board.pts or nil, #board.prefix, old, board.member, ctx.hist)
  else
    batch.forget_ranks(ctx, key, nth, old, at)
    scoring.board_score_changed(key, board.hist, dense and board.pts or nil, period.scale, old, at, ctx.hist)
  end
  if board.meta_value ~= '' then
    redis.call('HSET', board.meta, player, board.meta_value)
    if period.expire_at > 0 then
      redis.call('EXPIREAT', board.meta, period.expire_at, 'NX')
    end
  end
  local rank = want == 'all' and submit.rank(ctx, board, player, at) or nil
  if was_top then
    rank = submit.touch_top(board, player, name, ctx, rank, false)
    if want == 'top' and submit.placed(ctx, board, player, at, submit.nth(ctx, board)) then
      rank = submit.rank(ctx, board, player, at) -- still in the top N after the write (a set may drop out)
    end
  elseif rank and rank < top_n or (not rank and submit.placed(ctx, board, player, at, nth)) then
    rank = submit.touch_top(board, player, name, ctx, rank, true)
  end
  if period.expire_at > 0 and not ctx.expiring[key] then
    ctx.expiring[key] = true
    if dense then -- written above
      redis.call('EXPIREAT', board.pts, period.expire_at, 'NX')
    end
    board.held.expire_at = period.expire_at -- set once the board is written (flush_boards)
    ctx.hist_expire[board.hist] = period.expire_at -- set once the histogram is written
  end
  return board.improved, rank and rank + 1 or 0, prev and prev + 1 or 0,
    board.def.points and board.points or want == 'all' and (definitions.key_texts(board)) or ''
end

-- A status alone is a plain string in the reply: a table per entry was a measurable share of the call.
submit.DUPLICATE, submit.OK = 'duplicate', 'ok'

function submit.apply_submission(sub, ctx)
  local err = valid.submission_id(sub.id)
  if err then
    return err
  end
  -- The tombstone (read for the whole batch), before the dedupe, so a banned player's replayed or
  -- late slip writes nothing at all (not even its id).
  if ctx.banned_players[sub.player] then
    return entry_error('banned', 'player is banned from this game')
  end
  -- a duplicate: in its seen bucket before the batch, or applied in it (a refused slip is not)
  local mark = sub.layout.mark
  if mark.before[sub.id] or mark.applied[sub.id] then
    return submit.DUPLICATE
  end
  local points, ts, new_scopes = submit.plan(sub, ctx)
  if not points then
    return ts -- the error triple
  end
  mark.applied[sub.id] = true
  mark.ids[#mark.ids + 1] = sub.id

  if new_scopes then
    batch.record_scopes(ctx, new_scopes)
  end
  local boards = sub.layout.boards
  local all = (ctx.rows or sub.outcome) and 'all' or nil
  -- the rank on the slip's first board (the game's, or its definition's first window) goes to
  -- the activity entry, which names that board (badges read both); a tournament slip is not on it
  local activity_rank = 0
  local first_want = all or (not boards[1].period.entrants and 'top' or nil)
  local rows = ctx.rows and {} or nil
  local outcome = sub.outcome and {} or nil
  local improved_any = false
  for b = 1, #sub.layout.boards do
    local board = boards[b]
    local improved, rank, prev, total = submit.apply(board, sub.player, sub.name, ctx, b == 1 and first_want or all)
    improved_any = improved_any or improved
    if b == 1 and not board.period.entrants and rank <= board.top_n then
      activity_rank = rank
    end
    -- points as text (cjson writes numbers with 14 digits); a lex board's: its first key value
    local shown = board.def.points and (rows or outcome) and string.format('%d', total) or total
    if rows then
      rows[b] = { improved and 1 or 0, rank, prev, shown }
    end
    if outcome then
      outcome[b] = { board = board.scope, window = board.period.window, period = board.period.label,
        improved = improved, rank = rank, previous_rank = prev, points = shown }
    end
    local period = board.period
    if not period.listed[sub.player] then -- listed once per batch: count_players
      period.listed[sub.player] = true
      period.players[#period.players + 1] = sub.player
    end
  end
  if sub.name ~= '' and batch.update_profile_name(ctx, sub.player, sub.name) then
    submit.renamed(ctx, boards, #sub.layout.boards, sub.player, sub.name)
  end
  batch.log_activity(ctx, sub, points, ts, improved_any, activity_rank, boards[1].scope == 'global' and '' or boards[1].scope)
  if outcome then
    batch.keep_outcome(ctx, sub, outcome)
  end
  return rows and { 'ok', rows } or submit.OK -- OK: the caller wants the status only, no rows to build and send
end

-- Functions ---------------------------------------------------------------------------------

--[[ lb_submit: apply a batch of submissions atomically, one result per submission.
A slip is refused whole (per entry, nothing written) when a period it writes is closed
(period_closed) or it names a new region or mode value while the scopes set holds max_scopes
(too_many_scopes). What every slip needs is read once per batch (ban tombstones, seen ids,
entrants, each board's scores of each layout's players: batch.lua) and written once: one ZADD
per board (lex: ZREM, ZADD, HSET), flushed earlier only before a read of that board; the
histograms and seen ids at the batch's end.
Input:
  KEYS[1] versions hash, KEYS[2] activity stream, KEYS[3] profiles hash, KEYS[4] banned hash,
          KEYS[5] scopes set, KEYS[6..] the boards, their companions, the closed markers,
          distinct-player logs, seen-id and outcome buckets the batch touches
  ARGV    settings, period_count, periods, definition_count, definitions, layout_count, layouts
          (each followed by its board_count boards), submission_count, submissions: records of
          these fields, in order (leaderboard/batch.py lays them out; tests/test_submit_layout.py
          holds the two equal):
    settings    call_layout now_ms activity_maxlen clock_skew_ms idempotency_ms announce rows max_scopes
    period      window label start_ms end_ms shift unit_ms expire_at players_key entrants_key mode closed_key
    definition  encoding tie metadata_bytes operator key_spec top_n scoped points
    layout      seen_key outcomes_key seen_expire_at board_count
    board       board_key period op scope hist_key points_key definition members_key meta_key
    submission  layout slip
    full        id player points op ts name outcome values meta
  a slip is the parts `id player points ts name` (SLIP_PARTS) joined by TAB; slip '' is followed by
  the full record (a slip naming op, outcome, values or meta, or with a TAB in a part); call_layout
  SUBMIT_LAYOUT (a scorer of another release is refused whole: library_mismatch); *_key a KEYS index
  (entrants_key 0: not a tournament; closed_key 0: not checked, a rebuild replaying history);
  announce the announcements' channel; rows '1' for per-board rows with every rank, '0' for the
  status only; max_scopes 0 = no cap; shift and unit_ms the window's score packing; expire_at and
  seen_expire_at unix seconds (a period's 0 = never); mode the rank mode an announcement names; a
  board's period and definition and a submission's layout are 1-based record indexes; a board's op
  its window's default operator, a submission's op '' = each board's own; name '' = none; ts in ms;
  outcome '1': keep the slip's rows for lb_status (as long as its seen bucket).
  A definition (leaderboard/boards.py): encoding packed, lex or points (the game's boards as the
  environment shapes them: packed, a slip's points its one value below 2^(53 - shift),
  members_key and meta_key 0); tie first or last; operator the board's, or 'keys' (each key its
  own); key_spec per key 'd|a,<op>,<min>,<max>' (direction, operator, int64 bounds) joined by
  ';'; top_n the top whose changes bump its version and are announced; scoped '1' when its new
  scopes count against max_scopes (the game's default: region:, mode:; a defined board's
  board:<id>:region:<r>, not its home board:<id>); points '1' when a slip naming no values
  carries its one key in points. points_key the distinct points (lex: key parts), members_key a
  lex board's player -> member hash. A slip of key values has points '' and values its decimal
  int64 text joined by ',' (values and meta '' otherwise).
Output:
  one entry per submission: {'ok', {{improved, rank, previous_rank, points}, ...}} in board
  order (a board of key values' points: its first key value), 'ok' alone without rows,
  'duplicate', or {'error', code, message}. The call's activity entry holds each applied slip:
  its rank the first board's when in its top N, else 0; its board as reads name it (a defined
  board's board:<id>; '' for the game's own); its points '' for a slip of key values.
  Whole-call errors: 'ERR library_mismatch ...' (another layout), 'ERR bad_request ...'.
]]
function submit.lb_submit(keys, args)
  local call_layout, now_ms, activity_maxlen, clock_skew_ms, idempotency_ms, announce, rows, max_scopes =
    unpack(args, 1, batch.SETTINGS_FIELDS)
  if call_layout ~= batch.SUBMIT_LAYOUT then -- a scorer of another release: nothing read, nothing written
    return refuse('library_mismatch', 'the function library reads layout ' .. batch.SUBMIT_LAYOUT
      .. " of lb_submit's call; this call is another release's")
  end
  -- bound once per batch: a module's field is a table read at each use, a local a register
  local SUBMISSION_FIELDS, FULL_FIELDS = batch.SUBMISSION_FIELDS, batch.FULL_FIELDS
  local COMMON_SLIP, ANY_SLIP, apply_submission = batch.COMMON_SLIP, batch.ANY_SLIP, submit.apply_submission
  local ctx = {
    versions = keys[1], activity = keys[2], profiles = keys[3], banned = keys[4], scopes = keys[5],
    now = tonumber(now_ms), maxlen = tonumber(activity_maxlen),
    skew = tonumber(clock_skew_ms), max_age = tonumber(idempotency_ms), announce = announce,
    rows = rows == '1', max_scopes = valid.parse_uint(max_scopes, 9), expiring = {}, nth = {}, ranks = {}, known = {},
    hist = {}, hist_expire = {}, names = {}, bumped = {}, held = {}, commons = {},
    act = { n = 0, id = {}, player = {}, points = {}, op = {}, ts = {}, improved = {}, rank = {}, board = {} },
  }
  if not (ctx.now and ctx.maxlen and ctx.skew and ctx.max_age and ctx.max_scopes and ctx.scopes) then
    return refuse('bad_request', 'malformed batch header')
  end
  local periods, pos = batch.read_periods(keys, args, batch.SETTINGS_FIELDS + 1)
  local defs, layouts, marks
  if periods then
    defs, pos = definitions.read(args, pos, true)
  end
  if defs then
    layouts, pos, marks = batch.read_layouts(keys, periods, args, pos, defs)
  end
  local count = layouts and valid.parse_uint(args[pos], 9)
  if not count then
    return refuse('bad_request', 'malformed batch')
  end
  -- Every record read before the first write into columns (`full`: a full record's position; 0 a
  -- slip the common path cannot take), with each layout's distinct players and seen ids.
  -- Consecutive records nearly always share a layout: it is looked up only when the index changes.
  local ids, players, points_texts, stamps, names, lays, full, keys_texts = {}, {}, {}, {}, {}, {}, {}, {}
  local at, last = pos + 1, nil
  local found, seen, distinct, listed
  for i = 1, count do
    local layout, slip = unpack(args, at, at + SUBMISSION_FIELDS - 1)
    local id, player, points, ts, name, op, outcome, values, meta
    if slip ~= '' then
      if slip then
        id, player, points, ts, name = slip:match(COMMON_SLIP)
        if not id then
          id, player, points, ts, name = slip:match(ANY_SLIP)
          full[i] = 0
        end
      end
      at = at + SUBMISSION_FIELDS
    else -- the full record follows (read again on the general path)
      full[i] = at + SUBMISSION_FIELDS
      id, player, points, op, ts, name, outcome, values, meta = unpack(args, full[i], full[i] + FULL_FIELDS - 1)
      at = at + SUBMISSION_FIELDS + FULL_FIELDS
    end
    if layout ~= last then
      found = layouts[tonumber(layout)]
      if not (found and name) then
        return refuse('bad_request', 'malformed batch')
      end
      last, seen, distinct, listed = layout, found.mark.ids, found.distinct, found.players
    elseif not name then
      return refuse('bad_request', 'malformed batch')
    end
    if meta == '' and op == '' and outcome ~= '1' and not found.def.points and (id .. '\t' .. player .. '\t0\t' .. ts .. '\t'):find(COMMON_SLIP) then
      full[i], keys_texts[i] = nil, values -- key values the one pass may take: id, player and ts as COMMON_SLIP's
    end
    ids[i], players[i], points_texts[i], stamps[i], names[i], lays[i] = id, player, points, ts, name, found
    if not distinct[player] then
      distinct[player] = true
      listed[#listed + 1] = player
    end
    seen[#seen + 1] = id
  end
  if at ~= #args + 1 then
    return refuse('bad_request', 'malformed batch')
  end
  -- the batch's distinct players (ban tombstones, tournament entrants): one layout's are its own
  local batch_players = layouts[1] and layouts[1].players or {}
  if #layouts > 1 then
    batch_players, distinct = {}, {}
    for _, layout in ipairs(layouts) do
      for _, player in ipairs(layout.players) do
        if not distinct[player] then
          distinct[player] = true
          batch_players[#batch_players + 1] = player
        end
      end
    end
  end
  ctx.players = batch_players
  ctx.banned_players = batch.banned_among(ctx.banned, batch_players)
  for _, mark in ipairs(marks) do
    mark.before, mark.ids = batch.held('SMISMEMBER', mark.key, mark.ids), {}
  end
  -- one record table refilled for each slip: a table per slip was a measurable share of the call
  local results, sub, current, pass = {}, {}, nil, nil
  for i = 1, count do
    if lays[i] ~= current then
      current = lays[i]
      pass = current.pass
      if pass == nil then -- decided once per layout and batch
        pass = submit.common_boards(current, ctx)
        current.pass = pass
      end
    end
    local record = full[i]
    local result = pass and not record and pass(ids[i], players[i], points_texts[i], keys_texts[i], stamps[i], names[i])
    if not result then
      sub.n, sub.id, sub.player, sub.points, sub.op, sub.ts, sub.name = i, ids[i], players[i], points_texts[i], '', stamps[i], names[i]
      sub.layout, sub.outcome, sub.keys, sub.meta = current, false, keys_texts[i] or '', ''
      if record and record > 0 then
        local id, player, points, op, ts, name, outcome, values, meta = unpack(args, record, record + FULL_FIELDS - 1)
        sub.op, sub.outcome, sub.keys, sub.meta = op, outcome == '1', values, meta
      end
      result = apply_submission(sub, ctx)
    end
    results[i] = result
  end
  batch.flush_boards(ctx)
  batch.flush_histograms(ctx)
  batch.flush_activity(ctx)
  batch.mark_seen(marks)
  batch.count_players(periods, ctx.commons)
  return results
end
