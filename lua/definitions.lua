-- Board definitions (leaderboard/boards.py; the game's own boards are the definition `default`):
-- their records, a slip's key values ('12,-81250'), the announcement, lb_board_put/delete/purge.
local definitions = {}

-- The definition records of a call (lb_submit's Input names their fields): a count at pos, then
-- the records. Only lb_submit's (for_submit) carry the last two fields, scoped and points, and
-- may be of encoding `points` (the game's boards as the environment shapes them); lb_correct's
-- end before them (CORRECT_RECORD_FIELDS).
definitions.DEFINITION_FIELDS = 8
definitions.CORRECT_RECORD_FIELDS = 6

function definitions.read(args, pos, for_submit)
  local defs, count = {}, tonumber(args[pos]) or 0
  local width = for_submit and definitions.DEFINITION_FIELDS or definitions.CORRECT_RECORD_FIELDS
  pos = pos + 1
  for d = 1, count do
    local encoding, tie, metadata_bytes, operator, key_spec, top_n, scoped, points =
      unpack(args, pos, pos + definitions.DEFINITION_FIELDS - 1)
    if not for_submit then -- the next record's fields, if any
      scoped, points = '0', '0'
    end
    local def = { lex = encoding == 'lex', last = tie == 'last', meta_bytes = tonumber(metadata_bytes),
      per_key = operator == 'keys', op = operator, top_n = valid.parse_uint(top_n, 3),
      scoped = scoped == '1', points_key = points == '1', points = encoding == 'points',
      keys = type(key_spec) == 'string' and definitions.shape(key_spec) }
    if not ((encoding == 'lex' or encoding == 'packed' or (for_submit and def.points)) and (tie == 'first' or tie == 'last') and def.meta_bytes
        and def.top_n and (def.per_key or valid.VALID_OPS[operator]) and def.keys and (not def.points_key or #def.keys == 1)
        and (scoped == '1' or scoped == '0') and (points == '1' or points == '0')) then
      return nil
    end
    defs[d] = def
    pos = pos + width
  end
  return defs, pos
end

-- A definition's keys from its key spec ('d,op,min,max;...' a key: direction, operator, int64
-- bounds), each with its place in a packed score (scoring.pack); nil when malformed.
function definitions.shape(key_spec)
  local keys = {}
  for dir, op, lo, hi in key_spec:gmatch('([da]),(%a*),(%-?%d+),(%-?%d+)') do
    local lo_hi, lo_lo = int64.parse(lo)
    local hi_hi, hi_lo = int64.parse(hi)
    if not (lo_hi and hi_hi) or (op ~= '' and not valid.VALID_OPS[op]) then
      return nil
    end
    keys[#keys + 1] = { desc = dir == 'd', op = op ~= '' and op or nil, lo = tonumber(lo), hi = tonumber(hi),
      min = lex.key_hex(lo_hi, lo_lo, false), max = lex.key_hex(hi_hi, hi_lo, false) }
  end
  local place = 1 -- the last key's first
  for i = #keys, 1, -1 do
    keys[i].place, place = place, place * (keys[i].hi - keys[i].lo + 1)
  end
  return #keys >= 1 and #keys <= 5 and keys or nil
end

-- Whether a key value lies within the key's bounds: a lex board's {hi, lo} (hi nil: outside
-- int64), a packed one's number (exact below 2^53, as its bounds are).
function definitions.in_bounds(def, key, v)
  local hex = def.lex and v[1] and lex.key_hex(v[1], v[2], false)
  return hex and hex >= key.min and hex <= key.max or not def.lex and v >= key.lo and v <= key.hi and math.abs(v) < 2 ^ 53
end

-- A slip's key values, or nil and the entry error: {hi, lo} pairs on a lex board, numbers on a
-- packed one (tonumber, where int64.parse costs a loop per digit).
function definitions.slip_values(def, text)
  local values = {}
  for part in (text ~= '' and text .. ',' or ''):gmatch('([^,]*),') do
    values[#values + 1] = part
  end
  if #values ~= #def.keys then
    return nil, entry_error('wrong_key_count', 'the board takes ' .. #def.keys .. ' key value(s), got ' .. #values)
  end
  for i, part in ipairs(values) do
    if not part:match('^%-?%d+$') then
      return nil, entry_error('invalid_key_value', 'key values must be decimal integers, got ' .. string.format('%q', part:sub(1, 40)))
    end
    values[i] = def.lex and { int64.parse(part) } or tonumber(part)
    if not definitions.in_bounds(def, def.keys[i], values[i]) then
      return nil, entry_error('key_out_of_range', 'key value ' .. i .. ' is outside int64 or the key\'s min..max')
    end
  end
  return values
end

-- The stored values after an incr, or a write under per-key operators, of `new` over `old`
-- (leaderboard/boards.py combine), or nil and the entry error when an incr leaves a key's
-- bounds. op: the slip's ('' = the board's).
function definitions.combine_values(def, op, old, new)
  local tuple_op = not def.per_key and (op ~= '' and op or def.op)
  local out = {}
  for i, key in ipairs(def.keys) do
    local kop = tuple_op or (op ~= '' and op) or key.op or 'best'
    if kop == 'set' then
      out[i] = new[i]
    elseif kop == 'incr' then
      out[i] = def.lex and { int64.add(old[i][1], old[i][2], new[i][1], new[i][2]) } or old[i] + new[i]
      if not definitions.in_bounds(def, key, out[i]) then
        return nil, entry_error('key_out_of_range', 'key value ' .. i .. ' would leave int64 or the key\'s min..max')
      end
    else
      local n, o = new[i], old[i]
      local better = def.lex and lex.key_hex(n[1], n[2], key.desc) < lex.key_hex(o[1], o[2], key.desc)
        or not def.lex and (key.desc and n > o or not key.desc and n < o)
      out[i] = better and n or o
    end
  end
  return out
end

-- The key values (slip_values') of an entry's order (a lex member, or a packed score on a
-- window of `scale`), and the key part of values.
function definitions.values_of(def, order, scale)
  if not def.lex then
    return scoring.unpack(def, scoring.score_points(order, scale))
  end
  local out = {}
  for i, k in ipairs(def.keys) do
    out[i] = { lex.key_of_hex(order:sub((i - 1) * lex.KEY_HEX + 1, i * lex.KEY_HEX), k.desc) }
  end
  return out
end

function definitions.lex_prefix(def, values)
  local parts = {}
  for i, k in ipairs(def.keys) do
    parts[i] = lex.key_hex(values[i][1], values[i][2], k.desc)
  end
  return table.concat(parts)
end

-- Key values as text, one each: exact over the whole int64 range, as snapshots carry them.
function definitions.texts(values)
  local parts = {}
  for i, v in ipairs(values) do
    parts[i] = type(v) == 'table' and int64.format(v[1], v[2]) or string.format('%d', v)
  end
  return parts
end

-- A planned write's first key value and all its values, as text (what rows and announcements
-- show), made only where they are shown: formatting int64 costs a loop per digit.
function definitions.key_texts(board)
  local texts = definitions.texts(board.write and board.stored or definitions.values_of(board.def, board.old, board.period.scale))
  return texts[1], texts
end

-- Board definitions --------------------------------------------------------------------------
-- A definition is validated in full by leaderboard/boards.py (one rule set, with its codes); an
-- update is a compare-and-set against the definition the caller read and checked (check_update
-- refuses one that would reorder a live board), so two operators updating at once cannot both
-- win, and neither can skip the check. Here: the shape the library relies on, the cap, the
-- version counter, the change log (the header's boardlog: a member per stored or kept deleted
-- id, so it needs no trimming) and the journal entry.

definitions.MAX_DEFINITION_BYTES = 4096
definitions.FLOOR = ''

function definitions.definition_of(id, json)
  if not id:match('^[%w_-]+$') or #id > 32 then
    return nil, refuse('invalid_board', 'board id must be 1-32 characters of A-Z a-z 0-9 _ -')
  end
  if #json > definitions.MAX_DEFINITION_BYTES then
    return nil, refuse('invalid_board', 'a definition is at most ' .. definitions.MAX_DEFINITION_BYTES .. ' bytes of JSON')
  end
  local ok, def = pcall(cjson.decode, json)
  if not ok or type(def) ~= 'table' or def.id ~= id or type(def.keys) ~= 'table' or #def.keys < 1 or #def.keys > 5
      or type(def.version) ~= 'number' then
    return nil, refuse('invalid_board', 'a definition must be a JSON object with its id, 1-5 keys and a version')
  end
  return def
end

-- A change of the game's default that changes how its boards are written (reshapes '1') would
-- misread the entries they hold: refused (board_reorder) once the game applied any slip, which
-- every applied slip's activity entry tells (the stream is trimmed, never emptied).
function definitions.reshaped(activity, reshapes)
  if reshapes == '1' and redis.call('EXISTS', activity) == 1 then
    return refuse('board_reorder', "the game's boards hold entries written in the default board's current "
      .. 'keys, directions, bounds and tie; they are fixed once the game has entries')
  end
  return nil
end

-- The counter after a change of id, which the change log records. The change starting a log sets
-- its epoch (Redis's clock, us): a Redis flushed, failed over or restored counts again from 1, so
-- a process holding version n may meet another change at n; the epoch it read with n tells it
-- the log is not the one it read.
function definitions.changed(version_key, log_key, id, epoch_key)
  local version = redis.call('INCR', version_key)
  redis.call('ZADD', log_key, version, id)
  local t = redis.call('TIME')
  redis.call('SET', epoch_key, t[1] .. string.format('%06d', tonumber(t[2])), 'NX')
  return version
end

--[[ lb_board_put: create or update a board definition.
Input:  KEYS[1] boards hash, KEYS[2] boards version counter, KEYS[3] journal stream, KEYS[4]
        deleted definitions hash, KEYS[5] change log, KEYS[6] the game's activity stream, KEYS[7]
        the change log's epoch; ARGV id, definition JSON, the JSON an update was checked against
        ('' to create), the deleted definition a create was checked against ('' for none:
        boards.check_recreate; its keys may still hold entries), the cap (0: none), reshapes
        ('1': the default changes how the game's boards are written, boards.written_as)
Output: the boards version counter after the change; 0 when creating a definition that exists
        exactly so (a retry); ERR board_exists, ERR unknown_board (update of none), ERR
        stale_board (it, or the deleted one, changed since the caller read it), ERR
        too_many_boards, ERR board_reorder (reshapes, and the game has entries), ERR invalid_board
]]
function definitions.lb_board_put(keys, args)
  local id, json, expected, deleted, cap, reshapes = args[1], args[2], args[3], args[4], tonumber(args[5]), args[6]
  if not (id and json and expected and deleted and cap and keys[7]) then
    return refuse('bad_request', 'malformed board put')
  end
  local def, err = definitions.definition_of(id, json)
  err = definitions.reshaped(keys[6], reshapes) or err
  if err then
    return err
  end
  local old = redis.call('HGET', keys[1], id)
  if expected == '' then
    if old then
      if old == json then
        return 0
      end
      return refuse('board_exists', 'board ' .. id .. ' exists; update it instead')
    end
    if (redis.call('HGET', keys[4], id) or '') ~= deleted then
      return refuse('stale_board', 'the deleted definition of board ' .. id .. ' changed since it was read; try again')
    end
    -- checked in the call that stores it: creates racing for the last place cannot both take it
    if cap > 0 and redis.call('HLEN', keys[1]) >= cap then
      return refuse('too_many_boards', 'the game stores ' .. cap .. ' board definitions, its most; delete one first')
    end
  elseif not old then
    return refuse('unknown_board', 'no board ' .. id)
  elseif old ~= expected then
    return refuse('stale_board', 'board ' .. id .. ' changed since it was read; read it and try again')
  elseif def.version ~= cjson.decode(old).version + 1 then
    return refuse('invalid_board', 'an update carries the next version of the definition')
  end
  redis.call('HSET', keys[1], id, json)
  redis.call('HDEL', keys[4], id)  -- live again: the definition in the boards hash is the one to check
  journal(keys[3], 'board', id, json)
  return definitions.changed(keys[2], keys[5], id, keys[7])
end

--[[ lb_board_delete: delete a board definition (the board's keys expire as their windows say),
remembered in the deleted definitions hash until its boards' entries are gone (lb_board_purge):
a create of that id is checked against it.
Input:  KEYS as lb_board_put's; ARGV id, reshapes (lb_board_put's: deleting the game's default
        brings the environment's back)
Output: the boards version counter after the change; ERR unknown_board, ERR board_reorder
]]
function definitions.lb_board_delete(keys, args)
  local id = args[1]
  if not (id and keys[7]) then
    return refuse('bad_request', 'malformed board delete')
  end
  local old = redis.call('HGET', keys[1], id)
  local err = definitions.reshaped(keys[6], args[2]) or (not old and refuse('unknown_board', 'no board ' .. id))
  if err then
    return err
  end
  redis.call('HDEL', keys[1], id)
  redis.call('HSET', keys[4], id, old)
  journal(keys[3], 'board_delete', id, old)
  return definitions.changed(keys[2], keys[5], id, keys[7])
end

--[[ lb_board_purge: forget a deleted definition once its boards hold no entries.
Input:  KEYS[1] deleted definitions hash, KEYS[2] change log, KEYS[3] journal stream, KEYS[4..]
        every key of the board's periods that retention may still keep (leaderboard/purge.py);
        ARGV id, the deleted definition JSON they were listed from
Output: 1 when forgotten; 0 when kept (a key still exists, or the record is not that one: created
        again, or deleted again since)
]]
function definitions.lb_board_purge(keys, args)
  local id, json = args[1], args[2]
  if not (id and json) then
    return refuse('bad_request', 'malformed board purge')
  end
  if redis.call('HGET', keys[1], id) ~= json then
    return 0
  end
  for i = 4, #keys do
    if redis.call('EXISTS', keys[i]) == 1 then
      return 0
    end
  end
  redis.call('HDEL', keys[1], id)
  -- a process still holding a version before the delete would never learn of it once its member
  -- is gone: the floor rises past it, and such a process re-reads every definition
  local at = redis.call('ZSCORE', keys[2], id)
  if at then
    redis.call('ZREM', keys[2], id)
    if tonumber(at) > tonumber(redis.call('ZSCORE', keys[2], definitions.FLOOR) or '0') then
      redis.call('ZADD', keys[2], at, definitions.FLOOR)
    end
  end
  journal(keys[3], 'board_purge', id)
  return 1
end
