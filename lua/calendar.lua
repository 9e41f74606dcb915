-- Periods and tournaments: a period's close event and finals (lb_close, lb_close_board), and
-- tournaments (lb_tournament, lb_join).
local calendar = {}

-- Closed periods and tournaments ----------------------------------------------------------

--[[ lb_close: a period's close event with its final top N, added once however often (and by
however many replicas) it is asked for: the marker is set NX in the same atomic call that adds
the event, and from then on lb_submit refuses the period's slips (period_closed), so its boards
keep agreeing with the event and the finals. The versions fields of the period's boards are
removed either way (its boards are no longer published).
Input:  KEYS[1] marker, KEYS[2] closed stream, KEYS[3] finals list, KEYS[4] versions hash,
        KEYS[5] journal stream, KEYS[6..] the period's boards
        ARGV    window, period, start_ms, end_ms, shift, n, marker expire_at_s (0 = never),
                finals kept, stream maxlen, now_ms, rank mode (the ranks the event names), then
                per board: scope
Output: the close event's stream id, or false if the period was closed before
]]
calendar.CLOSE_KEYS, calendar.CLOSE_ARGS = 5, 11

-- The close's common arguments (lb_close, lb_close_board: the same first ones), parsed; nil
-- when malformed. The journal and the event keep the caller's text of the numbers.
function calendar.close_args(args)
  local c = { window = args[1], period = args[2], start_ms = args[3], end_ms = args[4], expire_at = args[7],
    kept = args[8], now_ms = args[10], mode = args[11], board = '' }
  c.top_n, c.expire_s, c.keep = valid.parse_uint(args[6], 4), valid.parse_uint(args[7], 12), valid.parse_uint(args[8], 6)
  c.maxlen, c.now, c.shift = valid.parse_uint(args[9], 9), valid.parse_uint(args[10], 15), valid.parse_uint(args[5], 2)
  if not (c.shift and c.top_n and c.top_n >= 1 and c.expire_s and c.keep and c.maxlen and c.now and scoring.RANK_MODES[c.mode]) then
    return nil
  end
  return c
end

-- Whether this call closes the period: its boards' version fields dropped either way, then the
-- marker set NX (a period closed before keeps its event).
function calendar.take_close(keys, c, fields)
  for _, field in ipairs(fields) do
    redis.call('HDEL', keys[4], field)
  end
  if c.expire_s > 0 then
    return redis.call('SET', keys[1], c.now, 'NX', 'EXAT', c.expire_s)
  end
  return redis.call('SET', keys[1], c.now, 'NX')
end

-- The rank of the i-th entry of a final list (from rank 1) in the mode, given the rank and the
-- tie (what the mode compares) of the entry before it: a tie shares its rank outside ordinal mode.
function calendar.final_rank(prev_rank, prev_tie, tie, i, mode)
  if prev_rank and prev_tie == tie and mode ~= 'ordinal' then
    return prev_rank
  elseif prev_rank and mode == 'dense' then
    return prev_rank + 1
  end
  return i
end

-- The close event, its entry in the finals (the newest `keep`) and the journal entry a rebuild
-- restores the marker and the finals from. A defined board's (c.board its scope) names the
-- board and carries its columns (key names, directions, display hints).
function calendar.add_close(keys, c, top)
  local id = c.window .. ':' .. c.period .. (c.board ~= '' and ':' .. c.board or '')
  -- cjson writes an empty table as {}; a board with no entries is simply left out
  local top_json = next(top) and cjson.encode(top) or '{}'
  local fields = { 'id', id, 'window', c.window, 'period', c.period, 'start_ms', c.start_ms, 'end_ms', c.end_ms,
    'closed_ms', c.now_ms, 'top', top_json }
  if c.board ~= '' then
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'board', c.board, 'columns', c.columns
  end
  local event_id = redis.call('XADD', keys[2], 'MAXLEN', '~', c.maxlen, '*', unpack(fields))
  local final = ''
  if c.keep > 0 then
    local record = {
      id = id, window = c.window, period = c.period, start_ms = tonumber(c.start_ms), end_ms = tonumber(c.end_ms),
      closed_ms = c.now, event = event_id, top = cjson.decode(top_json),
    }
    if c.board ~= '' then
      record.board, record.columns = c.board, cjson.decode(c.columns)
    end
    final = cjson.encode(record)
    redis.call('LPUSH', keys[3], final)
    redis.call('LTRIM', keys[3], 0, c.keep - 1)
  end
  if c.board ~= '' then
    journal(keys[5], 'close', c.window, c.period, c.expire_at, c.kept, c.now_ms, final, c.board)
  else
    journal(keys[5], 'close', c.window, c.period, c.expire_at, c.kept, c.now_ms, final)
  end
  return event_id
end

function calendar.lb_close(keys, args)
  local c = calendar.close_args(args)
  local boards = #keys - calendar.CLOSE_KEYS -- board b: KEYS[CLOSE_KEYS + b], its scope ARGV[CLOSE_ARGS + b]
  if not c or #args ~= calendar.CLOSE_ARGS + boards then
    return refuse('bad_request', 'malformed close')
  end
  local fields = {}
  for b = 1, boards do
    fields[b] = c.window .. ':' .. c.period .. ':' .. args[calendar.CLOSE_ARGS + b]
  end
  if not calendar.take_close(keys, c, fields) then
    return false
  end
  local scale = 2 ^ c.shift
  local top = {}
  for b = 1, boards do
    local flat = redis.call('ZRANGE', keys[calendar.CLOSE_KEYS + b], 0, c.top_n - 1, 'REV', 'WITHSCORES')
    local entries, rank, last = {}, nil, nil
    for i = 1, #flat, 2 do
      local points = scoring.score_points(tonumber(flat[i + 1]), scale)
      rank, last = calendar.final_rank(rank, last, points, (i + 1) / 2, c.mode), points
      entries[#entries + 1] = { rank = rank, player = flat[i], points = points }
    end
    top[args[calendar.CLOSE_ARGS + b]] = entries
  end
  return calendar.add_close(keys, c, top)
end

--[[ lb_close_board: lb_close for one defined board (scope board:<id>), whose periods are its
own (its time zone's days, its season's length): its own marker (lb_submit refuses the board's
later slips of the period), its own finals list, and entries with every key value as text (exact
over the whole int64 range), the rank in the board's mode and the entry's metadata. A lex board's
top is its first members (ZRANGE, as lb_top reads a lex board), a packed one's its highest scores.
Input:  KEYS[1] marker, KEYS[2] closed stream, KEYS[3] finals list, KEYS[4] versions hash,
        KEYS[5] journal stream, KEYS[6] the board, KEYS[7] its metadata hash
        ARGV    window, period, start_ms, end_ms, shift (0: a lex board), n, marker expire_at_s
                (0 = never), finals kept, stream maxlen, now_ms, rank mode, scope, columns (JSON
                array of {name, direction, display}), directions ('d' or 'a' per key, e.g. 'da')
Output: the close event's stream id, or false if the period was closed before
]]
function calendar.lb_close_board(keys, args)
  local c = calendar.close_args(args)
  local scope, columns, directions = args[12], args[13], args[14]
  if not c or #args ~= 14 or #keys ~= 7 or not (directions or ''):match('^[ad]+$') or #directions > 5
      or (c.shift > 0 and #directions ~= 1) or not (scope or ''):match('^board:') then
    return refuse('bad_request', 'malformed close')
  end
  c.board, c.columns = scope, columns
  if not calendar.take_close(keys, c, { c.window .. ':' .. c.period .. ':' .. scope }) then
    return false
  end
  local rows, key_len = {}, #directions * lex.KEY_HEX
  if c.shift == 0 then
    for _, member in ipairs(redis.call('ZRANGE', keys[6], 0, c.top_n - 1)) do
      local values = {}
      for i = 1, #directions do
        local hi, lo = lex.key_of_hex(member:sub((i - 1) * lex.KEY_HEX + 1, i * lex.KEY_HEX), directions:sub(i, i) == 'd')
        values[i] = int64.format(hi, lo)
      end
      rows[#rows + 1] = { player = lex.player_of(member, key_len), keys = values, tie = member:sub(1, key_len) }
    end
  else
    local flat, scale = redis.call('ZRANGE', keys[6], 0, c.top_n - 1, 'REV', 'WITHSCORES'), 2 ^ c.shift
    for i = 1, #flat, 2 do
      local signed = scoring.score_points(tonumber(flat[i + 1]), scale)
      local value = directions == 'd' and signed or -signed
      rows[#rows + 1] = { player = flat[i], keys = { scoring.fmt_points(value) }, tie = signed }
    end
  end
  local entries = {}
  if #rows > 0 then
    local players = {}
    for i, row in ipairs(rows) do
      players[i] = row.player
    end
    local meta, rank, last = redis.call('HMGET', keys[7], unpack(players)), nil, nil
    for i, row in ipairs(rows) do
      rank, last = calendar.final_rank(rank, last, row.tie, i, c.mode), row.tie
      entries[i] = { rank = rank, player = row.player, keys = row.keys, meta = meta[i] or nil }
    end
  end
  return calendar.add_close(keys, c, next(entries) and { [scope] = entries } or {})
end

--[[ lb_tournament: create a tournament; its definition never changes afterwards.
Input:  KEYS[1] tournaments hash, KEYS[2] journal stream; ARGV id, start_ms, end_ms, now_ms
Output: 1 created; 0 it exists with the same bounds (a retried create); ERR tournament_exists
        when it exists with other bounds, ERR tournament_ended when end_ms is not after now
]]
function calendar.lb_tournament(keys, args)
  local start_ms, end_ms, now = valid.parse_uint(args[2], 15), valid.parse_uint(args[3], 15), valid.parse_uint(args[4], 15)
  if not (start_ms and end_ms and now) or start_ms >= end_ms or not args[1]:match('^[%w_-]+$') or #args[1] > 32 then
    return refuse('bad_request', 'malformed tournament')
  end
  local def = cjson.encode({ start_ms = start_ms, end_ms = end_ms })
  local old = redis.call('HGET', keys[1], args[1])
  if old then
    local was = cjson.decode(old)
    if was.start_ms == start_ms and was.end_ms == end_ms then
      return 0
    end
    return refuse('tournament_exists', 'tournament ' .. args[1] .. ' exists with other start and end')
  end
  if end_ms <= now then
    return refuse('tournament_ended', 'tournament ' .. args[1] .. ' would end in the past')
  end
  redis.call('HSET', keys[1], args[1], def)
  journal(keys[2], 'tournament', args[1], args[2], args[3])
  return 1
end

--[[ lb_join: enter players in a tournament, before it starts or while it runs.
Input:  KEYS[1] tournaments hash, KEYS[2] the tournament's entrants, KEYS[3] journal stream;
        ARGV    id, now_ms, entrants expire_at_s, players...
Output: how many players were newly entered; ERR unknown_tournament, ERR tournament_ended,
        ERR invalid_player (valid.player; nobody is entered)
]]
function calendar.lb_join(keys, args)
  local now, expire_at = valid.parse_uint(args[2], 15), valid.parse_uint(args[3], 12)
  if not (now and expire_at) or #args < 4 then
    return refuse('bad_request', 'malformed join')
  end
  local raw = redis.call('HGET', keys[1], args[1])
  if not raw then
    return refuse('unknown_tournament', 'no tournament ' .. args[1])
  end
  if now >= cjson.decode(raw).end_ms then
    return refuse('tournament_ended', 'tournament ' .. args[1] .. ' has ended')
  end
  for i = 4, #args do
    if not valid.player(args[i]) then
      return refuse('invalid_player', valid.PLAYER_RULE)
    end
  end
  local added = redis.call('SADD', keys[2], unpack(args, 4))
  redis.call('EXPIREAT', keys[2], expire_at)
  if added > 0 then
    journal(keys[3], 'join', args[1], args[3], unpack(args, 4))
  end
  return added
end
