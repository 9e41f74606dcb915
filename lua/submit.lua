-- lb_submit: a batch of submissions, each planned (no writes) then applied to the game's boards
-- (apply_board) or a defined board's (definitions.lua); the common slip's path (apply_common).
local submit = {}

-- Returns the points, the timestamp and the new scopes (nil: none) with the boards planned in
-- ctx.boards[1 .. #sub.layout.refs], or nil and an error triple. Every check happens here, before
-- any write, so a refused submission can never leave a partial update behind. Each layout board
-- has one record for the batch, reused from one submission to the next: a table per board per
-- slip was a measurable share of the call.
function submit.plan_submission(keys, sub, periods, ctx)
  local refused = batch.check_slip(sub)
  if refused then
    return nil, refused
  end
  local points = valid.parse_uint(sub.points, 16)
  if points == nil then
    return nil, entry_error('invalid_points', 'points must be a non-negative integer, got ' .. string.format('%q', sub.points:sub(1, 40)))
  end
  local ts, late = batch.check_time(sub, ctx)
  if not ts then
    return nil, late
  end

  local boards, new_scopes, new_count = ctx.boards, nil, 0
  ctx.player = sub.player
  for b, ref in ipairs(sub.layout.refs) do
    local period = periods[ref.period]
    if ts < period.start_ms or ts >= period.end_ms then
      return nil, entry_error('timestamp_outside_window', 'timestamp is outside the ' .. period.window .. ' window ' .. period.label)
    end
    if period.entrants and not batch.entered(ctx, period) then
      return nil, entry_error('not_entered', 'player is not entered in tournament ' .. period.label)
    end
    if period.closed or (period.closed == nil and batch.period_closed(period)) then -- read once per batch
      return nil, entry_error('period_closed', 'the ' .. period.window .. ' period ' .. period.label .. ' is closed: its finals are published')
    end
    if ref.scope ~= 'global' and not (new_scopes and new_scopes[ref.scope]) and not batch.known_scope(ctx, ref.scope) then
      if ctx.max_scopes > 0 and batch.scope_count(ctx) + new_count >= ctx.max_scopes then
        return nil, entry_error('too_many_scopes', 'the game has ' .. ctx.max_scopes .. ' region and mode values (LB_MAX_SCOPES): ' .. ref.scope .. ' would be one more')
      end
      new_scopes = new_scopes or {}
      new_scopes[ref.scope], new_count = true, new_count + 1
    end
    local board = ref.board or batch.layout_board(keys, ref, period, sub.layout, ctx)
    local op = sub.op ~= '' and sub.op or ref.op
    local scale = period.scale
    local old = board.held.scores[sub.player] or nil
    local total = points
    if op == 'incr' and old then
      total = scoring.score_points(old, scale) + points
    end
    if total > period.max_points then
      return nil, entry_error('points_out_of_range', 'points must stay below ' .. string.format('%d', period.max_points + 1) .. ' on the ' .. period.window .. ' board')
    end
    boards[b] = board
    board.op, board.old, board.total = op, old, total
    board.score = scoring.pack_score(total, math.floor((ts - period.start_ms) / period.unit_ms), scale)
  end
  return points, ts, new_scopes
end

-- The score of the board's N-th entry, or false while the board has fewer than N entries (then
-- everyone on it is in the top N). Read once per batch and again only after the top N changed,
-- so whether a write touches the top N is a comparison, not a ZREVRANK per board.
function submit.nth_score(ctx, key)
  local nth = ctx.nth[key]
  if nth == nil then
    batch.flush_board(ctx, key)
    local flat = redis.call('ZRANGE', key, ctx.top_n - 1, ctx.top_n - 1, 'REV', 'WITHSCORES')
    nth = flat[2] and tonumber(flat[2]) or false
    ctx.nth[key] = nth
  end
  return nth
end

-- Is a score in the top N, given the N-th score? An exact tie with the N-th entry is decided by
-- member order, which only ZREVRANK knows.
function submit.in_top(ctx, key, player, score, nth)
  if nth == false or score > nth then
    return true
  end
  return score == nth and batch.board_rank(ctx, key, player) < ctx.top_n
end

-- A write changed the board's top N: bump its version; announce an entry (entered). Returns the
-- member's 0-based rank when it read it (or was given it).
function submit.touch_top(board, player, name, ctx, rank, entered_top)
  redis.call('HINCRBY', ctx.versions, board.period.window .. ':' .. board.period.label .. ':' .. board.scope, 1)
  ctx.nth[board.key] = nil -- the N-th entry may have changed
  if entered_top then
    rank = rank or batch.board_rank(ctx, board.key, player)
    local shown = scoring.mode_rank(board.key, board.pts, board.period.scale, board.period.mode, board.total, rank + 1)
    if board.defined then -- a packed defined board: its one key, in the shape its snapshot entries have
      local total = board.total -- >= 0 and below 2^53: a packed definition's bounds
      definitions.announce(board, player, name, ctx, shown,
        { int64.format(math.floor(total / int64.TWO32), total % int64.TWO32) })
    else
      redis.call('SPUBLISH', ctx.announce, cjson.encode({
        type = 'announce', board = board.scope, window = board.period.window,
        period = board.period.label, player = player, name = name ~= '' and name or nil,
        rank = shown, score = board.total,
      }))
    end
  end
  return rank
end

-- Writes for one planned board; returns improved (boolean), the rank and the previous rank
-- (1-based; 0 = not on the board before, or not read) and the points. Every redis.call costs more
-- than its command, so nothing is read or written that the outcome does not need: `want` says
-- which rank: 'all' (the caller wants rows: the rank, and the previous one of a changed member),
-- 'top' (the activity entry's: read only when the member is in the top N, else 0) or nil (none).
function submit.apply_board(board, player, name, ctx, want)
  local key, old, scale = board.key, board.old, board.period.scale
  local write
  if board.op == 'best' then
    write = old == nil or board.score > old
  elseif board.op == 'incr' and old and board.total == scoring.score_points(old, scale) then
    write = false -- adding zero: keep the time the total was first reached
  else
    write = old == nil or board.score ~= old
  end
  if not write then
    -- Nothing changes (a personal best not beaten: the common case).
    local rank = 0
    if want == 'all' or (want == 'top' and submit.in_top(ctx, key, player, old, submit.nth_score(ctx, key))) then
      rank = batch.board_rank(ctx, key, player) + 1
    end
    return false, rank, rank, scoring.score_points(old, scale)
  end
  local prev = want == 'all' and old and batch.board_rank(ctx, key, player) or nil
  local nth = submit.nth_score(ctx, key)
  local was_top = old ~= nil and (prev and prev < ctx.top_n or (not prev and submit.in_top(ctx, key, player, old, nth)))
  -- the comparison above already decided the write, so a plain ZADD (not GT) is right here
  batch.defer_write(board.held, player, board.score)
  batch.forget_ranks(ctx, key, nth, old, board.score)
  local dense = board.period.mode == 'dense'
  if dense then
    batch.flush_board(ctx, key) -- board_score_changed counts the old points on the board
  end
  scoring.board_score_changed(key, board.hist, dense and board.pts or nil, scale, old, board.score, ctx.hist)
  local rank = want == 'all' and batch.board_rank(ctx, key, player) or nil
  if was_top then
    rank = submit.touch_top(board, player, name, ctx, rank, false)
    if want == 'top' and submit.in_top(ctx, key, player, board.score, submit.nth_score(ctx, key)) then
      rank = batch.board_rank(ctx, key, player) -- still in the top N after the write (a set may drop out)
    end
  elseif rank and rank < ctx.top_n or (not rank and submit.in_top(ctx, key, player, board.score, nth)) then
    rank = submit.touch_top(board, player, name, ctx, rank, true)
  end
  if board.period.expire_at > 0 and not ctx.expiring[key] then
    board.held.expire_at = board.period.expire_at -- set once the board is written (flush_boards)
    if dense then -- written above
      redis.call('EXPIREAT', board.pts, board.period.expire_at, 'NX')
    end
    ctx.expiring[key] = true
    ctx.hist_expire[board.hist] = board.period.expire_at -- set once the histogram is written
  end
  return old == nil or board.score > old, rank and rank + 1 or 0, prev and prev + 1 or 0, board.total
end

-- apply_board for a packed defined board, whose top N is its definition's, and its metadata.
function submit.apply_packed(board, player, name, ctx, want)
  local old, score = board.old, board.score
  local written = old == nil or (board.op == 'best' and score > old) or (board.op ~= 'best' and score ~= old)
  local game_top = ctx.top_n
  ctx.top_n = board.top_n -- nth_score's cache is per board key: one top N per key holds
  local improved, rank, prev, total = submit.apply_board(board, player, name, ctx, want)
  ctx.top_n = game_top
  if written and board.meta_value ~= '' then
    redis.call('HSET', board.meta, player, board.meta_value)
    if board.period.expire_at > 0 then
      redis.call('EXPIREAT', board.meta, board.period.expire_at, 'NX')
    end
  end
  return improved, rank, prev, total
end

-- A status alone is a plain string in the reply: a table per entry was a measurable share of the call.
submit.DUPLICATE, submit.OK = 'duplicate', 'ok'

--[[ The common slip, in one pass: a slip to the game's own boards with their own operators (best
or set), no tournament, no dense rank mode, no rows and no kept outcome (nearly every slip of a
game). common_boards decides once per layout and batch whether its slips may take this path (its
record, or false) and works out what they all share: the boards' records, the window all its
periods share, the smallest points cap. apply_common then checks a slip and writes it board by
board, with no table per slip or board: the same checks, writes, histogram changes, top-N bumps
and announcements as plan_submission + apply_board (tests/test_properties_common.py holds the two
paths equal). A slip it cannot take whole (any refusal, which must write nothing) goes the
general way, which names the exact error.
apply_common runs for nearly every slip, so it takes the slip's parts as its pattern split them
(no record table) and does inline what the general path calls helpers for
(parse_uint, check_time, pack_score, nth_score, in_top's comparison, defer_write,
board_score_changed's histogram deltas, log_activity): entering and leaving Lua functions was
about 200 machine instructions a call, and writing them out took the slip's VM instructions
from 722 to 521 (docs/benchmarks.md, the bench.replay section).
]]
function submit.common_boards(keys, layout, periods, ctx)
  if layout.def or ctx.rows or #layout.refs == 0 then
    return false
  end
  local boards, in_periods, seen_periods = {}, {}, {}
  local lo, hi, max_points = ctx.now - ctx.max_age, ctx.now + ctx.skew, math.huge -- ts in [lo, hi]
  for b, ref in ipairs(layout.refs) do
    local period = periods[ref.period]
    if ref.op == 'incr' or period.mode == 'dense' or period.entrants or batch.period_closed(period)
        or (ref.scope ~= 'global' and not batch.known_scope(ctx, ref.scope)) then
      return false
    end
    local board = ref.board or batch.layout_board(keys, ref, period, layout, ctx)
    boards[b] = board
    if not board.deltas then -- what apply_common's writes need, one table read each
      board.scores, board.pending, board.scale = board.held.scores, board.held.pending, period.scale
      board.start_ms, board.unit_ms = period.start_ms, period.unit_ms
      board.deltas = ctx.hist[board.hist] -- its histogram's changes (flush_histograms), shared with the general path
      if not board.deltas then
        board.deltas = {}
        ctx.hist[board.hist] = board.deltas
        ctx.hist[#ctx.hist + 1] = board.hist
      end
      if period.expire_at > 0 then -- its expiry, set once the board is written (flush_boards)
        board.held.expire_at = period.expire_at
        ctx.expiring[board.key] = true
        ctx.hist_expire[board.hist] = period.expire_at
      end
    end
    if not seen_periods[period] then -- the layout's distinct periods (count_players)
      seen_periods[period] = true
      in_periods[#in_periods + 1] = period
    end
    lo, hi = math.max(lo, period.start_ms), math.min(hi, period.end_ms - 1)
    max_points = math.min(max_points, period.max_points)
  end
  local common = { boards = boards, periods = in_periods, players = {}, listed = {}, lo = lo, hi = hi,
    max_points = max_points }
  ctx.commons[#ctx.commons + 1] = common
  return common
end

-- Returns DUPLICATE or OK, or nil (nothing written) when the slip must take the general path (a
-- refusal of any kind). Its id and player are printable ASCII and its points and ts digits (the
-- one scan of COMMON_SLIP: any other slip takes the general path).
function submit.apply_common(ctx, common, id, player, points_text, ts_text, name, mark)
  local MAX_ID_BYTES = valid.MAX_ID_BYTES -- read twice a slip: one table read
  if #id > MAX_ID_BYTES or ctx.banned_players[player] then
    return nil
  end
  if mark.before[id] or mark.applied[id] then
    return submit.DUPLICATE
  end
  if #player > MAX_ID_BYTES or (name ~= '' and (#name > valid.MAX_NAME_BYTES or not valid.plain_text(name)))
      or #points_text > 16 or #ts_text > 15 then
    return nil
  end
  local points, ts = tonumber(points_text), tonumber(ts_text)
  if points > common.max_points or ts < common.lo or ts > common.hi then
    return nil
  end
  mark.applied[id] = true
  local ids = mark.ids
  ids[#ids + 1] = id
  local improved_any, activity_rank, new_bucket = false, '0', nil -- a rank as text: table.concat formats a number
  local boards, nths, bucket_of = common.boards, ctx.nth, scoring.bucket_of -- bucket_of: per board
  for b = 1, #boards do
    local board = boards[b]
    local key, scores, scale = board.key, board.scores, board.scale
    local old = scores[player] or nil
    local t = (ts - board.start_ms) / board.unit_ms -- pack_score; x - x % 1 is floor(x) for x >= 0
    local score = points * scale + (scale - 1 - (t - t % 1))
    if old == nil or score > old or (score ~= old and board.own_op == 'set') then
      local nth = nths[key]
      if nth == nil then
        nth = submit.nth_score(ctx, key)
      end
      local was_top = old ~= nil and (nth == false or old > nth or (old == nth and submit.in_top(ctx, key, player, old, nth)))
      scores[player] = score -- defer_write
      local pending = board.pending
      local listed = pending.n + 1
      pending.n, pending[listed] = listed, player
      if nth == false or score >= nth or (old and old >= nth) then -- forget_ranks
        ctx.ranks[key] = nil
      end
      local old_points = old and (old - old % scale) / scale -- score_points
      if old_points ~= points then -- board_score_changed's deltas
        new_bucket = new_bucket or bucket_of(points)
        local old_bucket = old_points and bucket_of(old_points)
        if old_bucket ~= new_bucket then
          local d = board.deltas
          d[new_bucket] = (d[new_bucket] or 0) + 1
          if old_bucket then
            d[old_bucket] = (d[old_bucket] or 0) - 1
          end
        end
      end
      local rank
      if was_top then
        board.total = points -- what touch_top announces
        submit.touch_top(board, player, name, ctx, nil, false)
        if b == 1 and submit.in_top(ctx, key, player, score, submit.nth_score(ctx, key)) then
          rank = batch.board_rank(ctx, key, player)
        end
      elseif nth == false or score > nth or (score == nth and submit.in_top(ctx, key, player, score, nth)) then
        board.total = points
        rank = submit.touch_top(board, player, name, ctx, nil, true)
      end
      if b == 1 and rank and rank < ctx.top_n then
        activity_rank = rank + 1
      end
      improved_any = improved_any or old == nil or score > old
    elseif b == 1 and submit.in_top(ctx, key, player, old, submit.nth_score(ctx, key)) then
      activity_rank = batch.board_rank(ctx, key, player) + 1
    end
  end
  if not common.listed[player] then -- listed once, counted in each of the layout's periods: count_players
    common.listed[player] = true
    local players = common.players
    players[#players + 1] = player
  end
  if name ~= '' then
    batch.update_profile_name(ctx, player, name)
  end
  local a, POW10 = ctx.act, batch.POW10 -- log_activity
  local k = a.n + 1
  a.n = k
  a.id[k], a.player[k], a.op[k], a.improved[k], a.rank[k] = id, player, '', improved_any and '1' or '0', activity_rank
  a.points[k] = points >= POW10[#points_text] and points_text or batch.canonical(points_text, points)
  a.ts[k] = ts >= POW10[#ts_text] and ts_text or batch.canonical(ts_text, ts)
  return submit.OK
end

function submit.apply_submission(keys, sub, periods, ctx)
  local err = valid.text_field(sub.id, 'submission id', sub.id == '' and 'missing_id' or 'invalid_id', true)
  if err then
    return err
  end
  -- The tombstone (read for the whole batch), before the dedupe, so a banned player's replayed or
  -- late slip writes nothing at all (not even its id).
  if ctx.banned_players[sub.player] then
    return entry_error('banned', 'player is banned from this game')
  end
  -- The duplicate check: the id was in its seen bucket before the batch, or an earlier slip of
  -- the batch applied it. A refused slip never marks its id.
  local mark = sub.layout.mark
  if mark.before[sub.id] or mark.applied[sub.id] then
    return submit.DUPLICATE
  end
  local layout = sub.layout
  local defined = layout.def -- a defined board's slip: key values, its own planner and writes
  local points, ts, new_scopes = (defined and definitions.plan_defined or submit.plan_submission)(keys, sub, periods, ctx)
  if not points then
    return ts -- the error triple
  end
  mark.applied[sub.id] = true
  mark.ids[#mark.ids + 1] = sub.id

  if new_scopes then
    batch.record_scopes(ctx, new_scopes)
  end
  local boards = defined and ctx.defined or ctx.boards
  -- every rank of the slip when the caller wants rows or the slip asked to keep its outcome
  local all = (ctx.rows or sub.outcome) and 'all' or nil
  -- the rank on the game's first board goes to the activity entry (badges read it); a tournament
  -- slip is not on it, nor a defined board's
  local activity_rank = 0
  local first_want = all or (not boards[1].period.entrants and not defined and 'top' or nil)
  local rows = ctx.rows and {} or nil
  local outcome = sub.outcome and {} or nil
  local improved_any = false
  for b = 1, #sub.layout.refs do
    local board = boards[b]
    local apply = board.lex and definitions.apply_lex or defined and submit.apply_packed or submit.apply_board
    local improved, rank, prev, total = apply(board, sub.player, sub.name, ctx, b == 1 and first_want or all)
    improved_any = improved_any or improved
    if b == 1 and not board.period.entrants and not defined and rank <= ctx.top_n then
      activity_rank = rank
    end
    if rows then -- a lex board's points: its first key value, as text (int64)
      rows[b] = { improved and 1 or 0, rank, prev, board.lex and total or string.format('%d', total) }
    end
    if outcome then
      -- points as text: cjson writes numbers with 14 digits
      outcome[b] = { board = board.scope, window = board.period.window, period = board.period.label,
        improved = improved, rank = rank, previous_rank = prev,
        points = board.lex and total or string.format('%d', total) }
    end
    local period = board.period
    if not period.listed[sub.player] then -- listed once per batch: count_players
      period.listed[sub.player] = true
      period.players[#period.players + 1] = sub.player
    end
  end
  if sub.name ~= '' then
    batch.update_profile_name(ctx, sub.player, sub.name)
  end
  batch.log_activity(ctx, sub, points, ts, improved_any, activity_rank)
  if outcome then
    batch.keep_outcome(ctx, sub, outcome)
  end
  if not rows then
    return submit.OK -- the caller wants the status only: no rows to build and send
  end
  return { 'ok', rows }
end

-- Functions ---------------------------------------------------------------------------------

--[[ lb_submit: apply a batch of submissions atomically, one result per submission.
A slip is refused whole (per entry, nothing written) when a period it would write to is closed
(period_closed: lb_close set the period's marker, its finals are published) or when it names a
region or mode value the game has not seen while the scopes set holds max_scopes values
(too_many_scopes); a new value is added to the set by the first slip applied with it.
What is read for every slip is read once per batch: the ban tombstones of its players (banned_among),
its ids' seen buckets (SMISMEMBER), a tournament's entrants (SMISMEMBER), each board's scores of
the players of each layout writing to it (ZMSCORE: held_board); the boards' writes are gathered
into one ZADD per board (flushed earlier only before a read of that board), and the histograms
and the seen ids are written once per batch at its end.
Input:
  KEYS[1] versions hash, KEYS[2] activity stream, KEYS[3] profiles hash, KEYS[4] banned hash,
          KEYS[5] scopes set, KEYS[6..] the boards, their companions, the closed markers,
          distinct-player logs, seen-id and outcome buckets the batch touches
  ARGV    settings, period_count, periods, definition_count, definitions, layout_count, layouts
          (each followed by its board_count boards), submission_count, submissions: records of
          these fields, in order (leaderboard/batch.py lays them out; tests/test_submit_layout.py
          holds the two equal):
    settings    call_layout now_ms top_n activity_maxlen clock_skew_ms idempotency_ms announce rows max_scopes
    period      window label start_ms end_ms shift unit_ms expire_at players_key entrants_key mode closed_key
    definition  encoding tie metadata_bytes operator key_spec top_n
    layout      seen_key outcomes_key seen_expire_at board_count
    board       board_key period op scope hist_key points_key definition members_key meta_key
    submission  layout slip
    full        id player points op ts name outcome values meta
  a slip is the submission's parts `id player points ts name` (SLIP_PARTS) joined by TAB; slip ''
  is followed by the submission's full record (a slip naming op, outcome, values or meta, or with
  a TAB in a part); call_layout the call's layout (SUBMIT_LAYOUT: a call of another is refused whole
  with library_mismatch, as a scorer of another release lays it out);
  where *_key is a KEYS index (entrants_key 0: not a tournament, anyone may write; closed_key 0:
  not checked, a rebuild replaying history); announce the announcements' channel; rows '1' for
  per-board rows with every board's rank, '0' for the status only (ranks read only where written
  into the top N or for the activity entry of a member in the top N); max_scopes 0 = no cap;
  shift and unit_ms the score packing of the
  period's window; expire_at and seen_expire_at unix seconds (a period's 0 = never); mode the
  rank mode (ordinal, dense or competition: the rank an announcement names); a board's period
  and a submission's layout are 1-based indexes of those records; a board's op is its window's
  default operator, a submission's op '' = each board's own; name '' = none; ts in milliseconds;
  outcome '1': keep the slip's per-board rows in the layout's outcomes bucket (lb_status answers
  with them), '' = not; the bucket expires with the seen bucket.
  Defined boards (leaderboard/boards.py): a definition's encoding is packed or lex, tie first or
  last, operator the board's (or 'keys': each key has its own), key_spec per key
  'd|a,<op>,<min>,<max>' joined by ';' (direction, operator, int64 bounds), top_n the size of
  the top whose changes bump its version and are announced (the game's top_n: other boards); a
  board's definition is a 1-based index of those records (0: not a defined board; members_key and meta_key 0 too),
  its points_key then the set of distinct key parts (lex) and members_key its player -> member
  hash; a submission to a defined board has points '' and values its key values as decimal
  int64 text joined by ',' (values and meta '' otherwise)
Output:
  one entry per submission: {'ok', {{improved, rank, previous_rank, points}, ...}} in board
  order ('ok', a plain string, without rows; a defined board's points: its first key value),
  'duplicate', or
  {'error', code, message} (a defined board's slip also wrong_key_count, invalid_key_value,
  key_out_of_range, metadata_too_large)
  The call's activity entry (flush_activity) holds each applied slip; a slip's rank there is
  the first board's when the member is in its top N, else 0 (and 0 for a defined board's slip,
  whose points there are '').
  Whole-call errors: 'ERR library_mismatch ...' (another layout), 'ERR bad_request ...'.
]]
function submit.lb_submit(keys, args)
  local call_layout, now_ms, top_n, activity_maxlen, clock_skew_ms, idempotency_ms, announce, rows, max_scopes =
    unpack(args, 1, batch.SETTINGS_FIELDS)
  if call_layout ~= batch.SUBMIT_LAYOUT then -- a scorer of another release: nothing read, nothing written
    return refuse('library_mismatch', 'the function library reads layout ' .. batch.SUBMIT_LAYOUT
      .. " of lb_submit's call; this call is another release's")
  end
  -- What the loops below use per slip, bound once per batch: a module's field is a table read at
  -- each use where a local is a register.
  local SUBMISSION_FIELDS, FULL_FIELDS = batch.SUBMISSION_FIELDS, batch.FULL_FIELDS
  local COMMON_SLIP, ANY_SLIP = batch.COMMON_SLIP, batch.ANY_SLIP
  local apply_common, apply_submission = submit.apply_common, submit.apply_submission
  local ctx = {
    versions = keys[1], activity = keys[2], profiles = keys[3], banned = keys[4], scopes = keys[5],
    now = tonumber(now_ms), top_n = tonumber(top_n), maxlen = activity_maxlen,
    skew = tonumber(clock_skew_ms), max_age = tonumber(idempotency_ms), announce = announce,
    rows = rows == '1', max_scopes = valid.parse_uint(max_scopes, 9), expiring = {}, nth = {}, ranks = {}, known = {},
    hist = {}, hist_expire = {}, names = {}, boards = {}, defined = {}, held = {}, commons = {},
    act = { n = 0, id = {}, player = {}, points = {}, op = {}, ts = {}, improved = {}, rank = {} },
  }
  ctx.maxlen = tonumber(ctx.maxlen)
  if not (ctx.now and ctx.top_n and ctx.maxlen and ctx.skew and ctx.max_age and ctx.max_scopes and ctx.scopes) then
    return refuse('bad_request', 'malformed batch header')
  end
  local periods, pos = batch.read_periods(keys, args, batch.SETTINGS_FIELDS + 1)
  local defs, layouts
  if periods then
    defs, pos = definitions.read(args, pos)
  end
  if defs then
    layouts, pos = batch.read_layouts(keys, periods, args, pos, defs)
  end
  local count = layouts and valid.parse_uint(args[pos], 9)
  if not count then
    return refuse('bad_request', 'malformed batch')
  end
  -- Every record read before the first write: its parts and its layout into columns (a full
  -- record's position in `full`; a slip the common path cannot take, 0), each layout's distinct
  -- players (whose scores are read on each of its boards) and its seen bucket's ids. Consecutive
  -- records nearly always share a layout: it is looked up again only when the index changes.
  local ids, players, points_texts, stamps, names, lays, full = {}, {}, {}, {}, {}, {}, {}
  local used, marks, at, last = {}, {}, pos + 1, nil
  local found, seen, distinct, listed
  for i = 1, count do
    local layout, slip = unpack(args, at, at + SUBMISSION_FIELDS - 1)
    local id, player, points, ts, name
    if slip ~= '' then
      if slip then
        id, player, points, ts, name = slip:match(COMMON_SLIP)
        if not id then
          id, player, points, ts, name = slip:match(ANY_SLIP)
          full[i] = 0
        end
      end
      at = at + SUBMISSION_FIELDS
    else -- the full record follows: its first six fields (op read again on the general path)
      full[i] = at + SUBMISSION_FIELDS
      local _
      id, player, points, _, ts, name = unpack(args, full[i], full[i] + 5)
      at = at + SUBMISSION_FIELDS + FULL_FIELDS
    end
    if layout ~= last then
      found = layouts[tonumber(layout)]
      if not (found and name) then
        return refuse('bad_request', 'malformed batch')
      end
      if not found.players then
        found.players, found.distinct = {}, {}
        used[#used + 1] = found
        local mark = marks[found.seen]
        if not mark then
          mark = { key = found.seen, expire_at = found.seen_expire_at, ids = {}, applied = {} }
          marks[found.seen] = mark
          marks[#marks + 1] = mark
        end
        found.mark = mark
      end
      last, seen, distinct, listed = layout, found.mark.ids, found.distinct, found.players
    elseif not name then
      return refuse('bad_request', 'malformed batch')
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
  local batch_players = used[1] and used[1].players or {}
  if #used > 1 then
    batch_players, distinct = {}, {}
    for _, layout in ipairs(used) do
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
  -- one record table, refilled for each slip (nothing keeps it past its slip): a table per slip
  -- was a measurable share of the call
  local results, sub, current, common = {}, {}, nil, nil
  for i = 1, count do
    if lays[i] ~= current then
      current = lays[i]
      common = current.common
      if common == nil then -- decided once per layout and batch
        common = submit.common_boards(keys, current, periods, ctx)
        current.common = common
      end
    end
    local record = full[i]
    local result = common and not record
      and apply_common(ctx, common, ids[i], players[i], points_texts[i], stamps[i], names[i], current.mark)
    if not result then
      sub.n, sub.id, sub.player, sub.points, sub.op, sub.ts, sub.name = i, ids[i], players[i], points_texts[i], '', stamps[i], names[i]
      sub.layout, sub.outcome, sub.keys, sub.meta = current, false, '', ''
      if record and record > 0 then
        local id, player, points, op, ts, name, outcome, values, meta = unpack(args, record, record + FULL_FIELDS - 1)
        sub.op, sub.outcome, sub.keys, sub.meta = op, outcome == '1', values, meta
      end
      result = apply_submission(keys, sub, periods, ctx)
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
