-- Periods and tournaments: a period's close event and finals (lb_close, on every board), and
-- tournaments (lb_tournament, lb_join).
local calendar = {}

-- Closed periods and tournaments ----------------------------------------------------------

--[[ lb_close: a period's close event with the final top N of each board given, added once however
often (and by however many replicas) it is asked for: the marker is set NX in the same atomic call
that adds the event, and from then on lb_submit refuses the period's slips (period_closed), so its
boards keep agreeing with the event and the finals. The period's boards leave the versions hash
either way (no longer published). The game's boards close together; a defined board (its home
board:<id> first, then its scopes' boards) alone, under its own marker and finals, and the event
names it. Entries carry points, or with columns given every key value as text (exact over
int64) and metadata.
Input:  KEYS[1] marker, KEYS[2] closed stream, KEYS[3] finals list, KEYS[4] versions hash,
        KEYS[5] journal stream, then per board two keys: the board, its metadata hash
        ARGV    call layout (CLOSE_LAYOUT), window, period, start_ms, end_ms, encoding
                (reads.encoding), n, marker expire_at_s (0 = never), finals kept, stream maxlen,
                now_ms, rank mode (the ranks the event names), columns ('' or a JSON array of
                {name, direction, display}), the key spec (definitions.shape), then per board: scope
Output: the close event's stream id, or false if the period was closed before
]]
calendar.CLOSE_LAYOUT, calendar.CLOSE_KEYS, calendar.CLOSE_ARGS = '3', 5, 14

-- The close's arguments, parsed; nil when malformed. The journal and the event keep the caller's
-- text of the numbers.
function calendar.close_args(keys, args)
  local c = { window = args[2], period = args[3], start_ms = args[4], end_ms = args[5], expire_at = args[8],
    kept = args[9], now_ms = args[11], mode = args[12], columns = args[13], def = { keys = definitions.shape(args[14] or '') } }
  c.enc, c.param = reads.encoding(args[6])
  c.top_n, c.expire_s, c.keep = valid.parse_uint(args[7], 4), valid.parse_uint(args[8], 12), valid.parse_uint(args[9], 6)
  c.maxlen, c.now, c.boards = valid.parse_uint(args[10], 9), valid.parse_uint(args[11], 15), (#keys - calendar.CLOSE_KEYS) / 2
  local first = args[calendar.CLOSE_ARGS + 1] or ''
  c.board = c.columns ~= '' and first:match('^board:') and first or ''
  if not (c.enc and c.top_n and c.top_n >= 1 and c.expire_s and c.keep and c.maxlen and c.now and scoring.RANK_MODES[c.mode])
      or c.boards ~= math.floor(c.boards) or #args ~= calendar.CLOSE_ARGS + c.boards or not c.def.keys
      or (c.enc == 'lex' and c.param ~= #c.def.keys * lex.KEY_HEX) or (c.columns == '' and c.enc ~= 'packed')
      or (c.columns ~= '' and c.enc == 'packed' and (c.def.keys[1].hi + 1) * c.def.keys[1].place * c.param > 2 ^ 53) then
    return nil
  end
  c.def.lex = c.enc == 'lex'
  for b = 1, c.board ~= '' and c.boards or 0 do -- a defined board's home, then its own scopes' boards
    local scope = args[calendar.CLOSE_ARGS + b]
    if b == 1 and scope:find(':', 7, true) or b > 1 and scope:sub(1, #c.board + 1) ~= c.board .. ':' then
      return nil
    end
  end
  return c
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

-- A board's final entries, read by its encoding as lb_top reads it (reads.slice), each with its
-- rank in the mode: with its points (no columns), or with every key value as text and its metadata.
function calendar.final_entries(c, board, meta_key)
  local players, orders = reads.slice(board, c.enc, c.param, 0, c.top_n - 1)
  local meta = c.columns ~= '' and #players > 0 and redis.call('HMGET', meta_key, unpack(players)) or {}
  local entries, rank, last = {}, nil, nil
  for i, order in ipairs(orders) do
    local tie = c.enc == 'lex' and order:sub(1, c.param) or scoring.score_points(tonumber(order), c.param)
    rank, last = calendar.final_rank(rank, last, tie, i, c.mode), tie
    if c.columns == '' then -- the game's points
      entries[i] = { rank = rank, player = players[i], points = tie }
    else
      local values = definitions.values_of(c.def, c.def.lex and order or tonumber(order), c.param)
      entries[i] = { rank = rank, player = players[i], keys = definitions.texts(values), meta = meta[i] or nil }
    end
  end
  return entries
end

-- The close event, its entry in the finals (the newest `keep`) and the journal entry a rebuild
-- restores the marker and the finals from; with columns and the board when they are given.
function calendar.add_close(keys, c, top)
  local id = c.window .. ':' .. c.period .. (c.board ~= '' and ':' .. c.board or '')
  -- cjson writes an empty table as {}; a board with no entries is simply left out
  local top_json = next(top) and cjson.encode(top) or '{}'
  local fields = { 'id', id, 'window', c.window, 'period', c.period, 'start_ms', c.start_ms, 'end_ms', c.end_ms,
    'closed_ms', c.now_ms, 'top', top_json }
  local board, columns = c.board ~= '' and c.board or nil, c.columns ~= '' and c.columns or nil
  for _, field in ipairs({ { 'board', board }, { 'columns', columns } }) do
    if field[2] then
      fields[#fields + 1], fields[#fields + 2] = field[1], field[2]
    end
  end
  local event_id = redis.call('XADD', keys[2], 'MAXLEN', '~', c.maxlen, '*', unpack(fields))
  local final = ''
  if c.keep > 0 then
    final = cjson.encode({
      id = id, window = c.window, period = c.period, start_ms = tonumber(c.start_ms), end_ms = tonumber(c.end_ms),
      closed_ms = c.now, event = event_id, top = cjson.decode(top_json), board = board,
      columns = columns and cjson.decode(columns),
    })
    redis.call('LPUSH', keys[3], final)
    redis.call('LTRIM', keys[3], 0, c.keep - 1)
  end
  -- the game's close journals no board (a trailing nil is no argument)
  journal(keys[5], 'close', c.window, c.period, c.expire_at, c.kept, c.now_ms, final, board)
  return event_id
end

function calendar.lb_close(keys, args)
  local c = calendar.close_args(keys, args)
  if args[1] ~= calendar.CLOSE_LAYOUT or not c then
    return valid.other_layout(args[1], calendar.CLOSE_LAYOUT, 'lb_close') or refuse('bad_request', 'malformed close')
  end
  for b = 1, c.boards do -- the period's boards leave the versions hash whether or not this call closes it
    redis.call('HDEL', keys[4], c.window .. ':' .. c.period .. ':' .. args[calendar.CLOSE_ARGS + b])
  end
  local at = c.expire_s > 0 and { 'EXAT', c.expire_s } or {}
  if not redis.call('SET', keys[1], c.now, 'NX', unpack(at)) then
    return false -- closed before: its event stands
  end
  local top = {}
  for b = 1, c.boards do
    local entries = calendar.final_entries(c, keys[calendar.CLOSE_KEYS + 2 * b - 1], keys[calendar.CLOSE_KEYS + 2 * b])
    if c.board == '' or #entries > 0 then -- a defined board with no entries: its event's top is {}
      top[args[calendar.CLOSE_ARGS + b]] = entries
    end
  end
  return calendar.add_close(keys, c, top)
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
