-- Reads of a board (no writes) and lb_rank_rebuild, the path chosen by the call's encoding (packed:
-- highest score first; lex: ascending members); ranks, joins and replies are alike on both.
local reads = {}

-- A read's encoding argument: a packed board's shift (0..52; its scale 2^shift returned) or a
-- lex board's 'lex:<key count>' (1..5; its members' key part length returned); else nil.
function reads.encoding(text)
  local count = type(text) == 'string' and text:match('^lex:([1-5])$')
  if count then
    return 'lex', count * lex.KEY_HEX
  end
  local shift = valid.parse_uint(text, 2)
  if shift and shift <= 52 then
    return 'packed', 2 ^ shift
  end
  return nil
end

-- The players at ordinal places start..stop (0-based), best first, and each one's order: a
-- packed board's score, a lex board's member. Ties read alike on both: by descending player id
-- (ZRANGE REV's order; lex.player_part writes ascending members so).
function reads.slice(board, enc, param, start, stop)
  local players, orders = {}, {}
  if enc == 'lex' then
    local members = redis.call('ZRANGE', board, start, stop)
    for i, member in ipairs(members) do
      players[i], orders[i] = lex.player_of(member, param), member
    end
    return players, orders
  end
  local flat = redis.call('ZRANGE', board, start, stop, 'REV', 'WITHSCORES')
  for i = 1, #flat, 2 do
    players[#players + 1], orders[#orders + 1] = flat[i], flat[i + 1]
  end
  return players, orders
end

-- A player's ordinal rank (1-based), given its order; the player's member on a lex board.
function reads.ordinal(enc, board, player, order)
  if enc == 'lex' then
    return redis.call('ZRANK', board, order) + 1
  end
  return redis.call('ZREVRANK', board, player) + 1
end

-- The rank in `mode` of a member of this order (`ordinal` needed in ordinal mode only): O(log N),
-- a count of the better points (or key parts) on the board, or on its distinct set in dense mode.
function reads.rank(enc, param, board, distinct, mode, order, ordinal)
  if mode == 'ordinal' then
    return ordinal
  end
  if enc == 'lex' then
    return lex.rank(board, distinct, mode, order, param)
  end
  return scoring.mode_rank(board, distinct, param, mode, scoring.score_points(tonumber(order), param), ordinal)
end

-- What a percentile counts: the ordinal rank in ordinal mode, else the competition rank.
function reads.position(enc, param, board, distinct, mode, order, rank)
  if mode == 'dense' then
    return reads.rank(enc, param, board, distinct, 'competition', order, nil)
  end
  return rank
end

-- The entries of a reply, flat: {player, order, profile JSON or false[, metadata or false]} per
-- entry; the metadata column only where the call names the board's metadata hash.
function reads.joined(profiles, meta, players, orders)
  local out = {}
  if #players == 0 then
    return out
  end
  local found = redis.call('HMGET', profiles, unpack(players))
  local extra = meta and redis.call('HMGET', meta, unpack(players))
  for i, player in ipairs(players) do
    out[#out + 1] = player
    out[#out + 1] = orders[i]
    out[#out + 1] = found[i] or false
    if extra then
      out[#out + 1] = extra[i] or false
    end
  end
  return out
end

--[[ lb_top: the first N entries of a board, best first, joined with profiles (and metadata).
Input:  KEYS[1] board, KEYS[2] profiles, KEYS[3] the board's metadata hash (optional);
        ARGV[1] n, ARGV[2] the encoding (reads.encoding; optional: a packed board)
Output: flat {player, packed score or lex member, profile JSON or nil[, metadata or nil], ...}
]]
function reads.lb_top(keys, args)
  local n, enc, param = valid.parse_uint(args[1], 6), reads.encoding(args[2] or '0') -- no encoding: a shift of 0
  if not n or n < 1 or n > 1000 or not enc then
    return refuse('bad_request', 'n must be 1..1000; the encoding a shift or lex:<key count>')
  end
  local players, orders = reads.slice(keys[1], enc, param, 0, n - 1)
  return reads.joined(keys[2], keys[3], players, orders)
end

--[[ lb_around: the entries k above and k below a player, clamped at the board's edges.
Input:  KEYS[1] board, KEYS[2] profiles, KEYS[3] the board's distinct set (points, or a lex
        board's key parts), KEYS[4] its members hash (read on a lex board), KEYS[5] its metadata
        hash (optional); ARGV[1] player, ARGV[2] k, ARGV[3] rank mode, ARGV[4] the encoding
        (reads.encoding: a packed board's shift)
Output: {first ordinal rank (1-based), first rank in the mode, first percentile position
        (reads.position), board size, then the entries as lb_top's}; {} if unranked
]]
function reads.lb_around(keys, args)
  local k, mode = valid.parse_uint(args[2], 3), args[3]
  local enc, param = reads.encoding(args[4])
  if not k or k > 100 or not scoring.RANK_MODES[mode] or not enc or (enc == 'lex' and not keys[4]) then
    return refuse('bad_request', 'k must be 0..100; rank mode, encoding (and a lex board\'s members) required')
  end
  local board, player = keys[1], args[1]
  local ordinal
  if enc == 'lex' then
    local member = redis.call('HGET', keys[4], player)
    ordinal = member and redis.call('ZRANK', board, member)
  else
    ordinal = redis.call('ZREVRANK', board, player)
  end
  if not ordinal then
    return {}
  end
  local start = math.max(0, ordinal - k)
  local players, orders = reads.slice(board, enc, param, start, ordinal + k)
  local first = reads.rank(enc, param, board, keys[3], mode, orders[1], start + 1)
  local position = reads.position(enc, param, board, keys[3], mode, orders[1], first)
  return { start + 1, first, position, redis.call('ZCARD', board), unpack(reads.joined(keys[2], keys[5], players, orders)) }
end

--[[ lb_ranks: rank and order of each listed player (a friends list, or the players a gateway
pushes own-rank updates to), plus the board size.
A player whose approximate rank (the histogram's) is beyond deep_from gets it (dense ranks are
always exact): O(1) per player after one read of the histogram, instead of O(log N). deep_from
0, or a histogram that does not count every member: every rank exact.
Input:  KEYS[1] board, KEYS[2] its distinct set (points, or a lex board's key parts), KEYS[3] its
        histogram, KEYS[4] its members hash (read on a lex board); ARGV[1] rank mode, ARGV[2] the
        encoding (reads.encoding: a packed board's shift), ARGV[3] deep_from, ARGV[4..] players
Output: {board size, then per player: rank (1-based) or nil, packed score or lex member or nil,
        position or nil (reads.position), 1 if approximate else 0} in ARGV order
]]
function reads.lb_ranks(keys, args)
  local mode, deep_from = args[1], valid.parse_uint(args[3], 12)
  local enc, param = reads.encoding(args[2])
  if not scoring.RANK_MODES[mode] or not enc or not deep_from or (enc == 'lex' and not keys[4]) then
    return refuse('bad_request', 'rank mode, encoding, deep_from (and a lex board\'s members) required')
  end
  local board, distinct = keys[1], keys[2]
  local out = { redis.call('ZCARD', board) }
  local hist = deep_from > 0 and mode ~= 'dense' and out[1] > deep_from
    and scoring.read_histogram(keys[3], board, enc, param, out[1]) or nil
  local members = enc == 'lex' and (#args > 3 and redis.call('HMGET', keys[4], unpack(args, 4)) or {})
  for i = 4, #args do
    local player = args[i]
    local order = members and members[i - 3]
    if not members then
      order = redis.call('ZSCORE', board, player)
    end
    local rank, position, approx
    if order then
      approx = hist and scoring.approx_rank(hist, scoring.standing(enc, param, order))
      if approx and approx > deep_from then
        rank, position = approx, approx
      else
        approx = nil
        -- one O(log N) read per mode: the ordinal rank only where it is the answer
        local ordinal = mode == 'ordinal' and reads.ordinal(enc, board, player, order) or nil
        rank = reads.rank(enc, param, board, distinct, mode, order, ordinal)
        position = reads.position(enc, param, board, distinct, mode, order, rank)
      end
    end
    out[#out + 1] = rank or false
    out[#out + 1] = order or false
    out[#out + 1] = position or false
    out[#out + 1] = approx and 1 or 0
  end
  return out
end

--[[ lb_rank_rebuild: rebuild a board's histogram, and in dense mode its distinct points (or key
parts), from the board: for a board written without companions, or a window switched to dense.
O(N) in one atomic call, so no write interleaves: a few seconds per million members, during
which Redis serves nothing else. The companions get the board's expiry; outside dense mode the
points set is deleted.
Input:  KEYS[1] board, KEYS[2] its points set, KEYS[3] its histogram; ARGV[1] the encoding
        (reads.encoding: a packed board's shift, or lex:<key count>), ARGV[2] mode
Output: {members, distinct points values (0 outside dense mode), histogram buckets}
]]
function reads.lb_rank_rebuild(keys, args)
  local enc, param = reads.encoding(args[1])
  if not enc or not scoring.RANK_MODES[args[2]] then
    return refuse('bad_request', 'encoding (a shift 0..52 or lex:<key count>) and rank mode required')
  end
  local dense = args[2] == 'dense'
  local board = keys[1]
  redis.call('DEL', keys[2], keys[3])
  local counts, distinct, buckets, values = {}, {}, 0, 0
  local size, step = redis.call('ZCARD', board), 10000
  for start = 0, size - 1, step do
    local _, orders = reads.slice(board, enc, param, start, start + step - 1)
    for _, order in ipairs(orders) do
      local b = scoring.bucket_of(scoring.standing(enc, param, order))
      if not counts[b] then
        counts[b], buckets = 0, buckets + 1
      end
      counts[b] = counts[b] + 1
      -- what dense ranks count: a packed board's points (member and score), a lex one's key part (score 0)
      local value = enc == 'lex' and order:sub(1, param) or scoring.score_points(tonumber(order), param)
      if dense and not distinct[value] then
        distinct[value], values = true, values + 1
      end
    end
  end
  local flat = {} -- field, value pairs: batch.chunked's calls of 1,000 items never split one
  for b, n in pairs(counts) do
    flat[#flat + 1], flat[#flat + 2] = b, n
  end
  batch.chunked('HSET', keys[3], flat)
  flat = {}
  for value in pairs(distinct) do
    flat[#flat + 1], flat[#flat + 2] = enc == 'lex' and 0 or value, enc == 'lex' and value or string.format('%d', value)
  end
  batch.chunked('ZADD', keys[2], flat)
  local expire = redis.call('PEXPIRETIME', board)
  if expire > 0 then
    redis.call('PEXPIREAT', keys[2], expire)
    redis.call('PEXPIREAT', keys[3], expire)
  end
  return { size, values, buckets }
end
