-- Reads of a board (no writes): the top N, the entries around a player, listed players' ranks,
-- the same on a lex board; and lb_rank_rebuild, which rebuilds a board's rank companions.
local reads = {}

function reads.entries_with_profiles(profiles, flat)
  local out, players = {}, {}
  for i = 1, #flat, 2 do
    players[#players + 1] = flat[i]
  end
  local found = #players > 0 and redis.call('HMGET', profiles, unpack(players)) or {}
  for i, player in ipairs(players) do
    out[#out + 1] = player
    out[#out + 1] = flat[i * 2]
    out[#out + 1] = found[i] or false
  end
  return out
end

--[[ lb_top: the first N entries of a board, best first, joined with profiles.
Input:  KEYS[1] board, KEYS[2] profiles; ARGV[1] n
Output: flat {player, packed score, profile JSON or nil, ...}
]]
function reads.lb_top(keys, args)
  local n = valid.parse_uint(args[1], 6)
  if not n or n < 1 or n > 1000 then
    return refuse('bad_request', 'n must be 1..1000')
  end
  local flat = redis.call('ZRANGE', keys[1], 0, n - 1, 'REV', 'WITHSCORES')
  return reads.entries_with_profiles(keys[2], flat)
end

--[[ lb_around: the entries k above and k below a player, clamped at the board's edges.
Input:  KEYS[1] board, KEYS[2] profiles, KEYS[3] the board's points set;
        ARGV[1] player, ARGV[2] k, ARGV[3] rank mode, ARGV[4] shift (k of the score packing)
Output: {first ordinal rank (1-based), first rank in the mode, first percentile position (the
        ordinal rank in ordinal mode, else the competition rank), board size, player, packed score,
        profile JSON or nil, ...}; {} if unranked
]]
function reads.lb_around(keys, args)
  local k = valid.parse_uint(args[2], 3)
  if not k or k > 100 then
    return refuse('bad_request', 'k must be 0..100')
  end
  local shift = valid.parse_uint(args[4], 2)
  if not scoring.RANK_MODES[args[3]] or not shift or shift > 52 then
    return refuse('bad_request', 'rank mode and shift required')
  end
  local rank = redis.call('ZREVRANK', keys[1], args[1])
  if not rank then
    return {}
  end
  local start = math.max(0, rank - k)
  local flat = redis.call('ZRANGE', keys[1], start, rank + k, 'REV', 'WITHSCORES')
  local out = reads.entries_with_profiles(keys[2], flat)
  local scale = 2 ^ shift
  local points = scoring.score_points(tonumber(flat[2]), scale)
  local first = scoring.mode_rank(keys[1], keys[3], scale, args[3], points, start + 1)
  local position = args[3] == 'dense' and scoring.mode_rank(keys[1], keys[3], scale, 'competition', points, nil) or first
  return { start + 1, first, position, redis.call('ZCARD', keys[1]), unpack(out) }
end

--[[ lb_ranks: rank and packed score of each listed player (a friends list, or the players
a gateway pushes own-rank updates to), plus the board size.
A player whose approximate rank (from the histogram) is beyond deep_from gets that approximation
(ordinal and competition modes; dense ranks are always exact): O(1) per player after one read of
the histogram, instead of O(log N). deep_from 0: every rank exact.
Input:  KEYS[1] board, KEYS[2] its points set, KEYS[3] its histogram;
        ARGV[1] rank mode, ARGV[2] shift, ARGV[3] deep_from, ARGV[4..] players
Output: {board size, then per player: rank (1-based) or nil, packed score or nil, position or nil
        (the ordinal rank in ordinal mode, else the competition rank: what a percentile counts),
        1 if approximate else 0} in ARGV order
]]
function reads.lb_ranks(keys, args)
  local mode, shift, deep_from = args[1], valid.parse_uint(args[2], 2), valid.parse_uint(args[3], 12)
  if not scoring.RANK_MODES[mode] or not shift or shift > 52 or not deep_from then
    return refuse('bad_request', 'rank mode, shift and deep_from required')
  end
  local board, scale = keys[1], 2 ^ shift
  local out = { redis.call('ZCARD', board) }
  local hist = deep_from > 0 and mode ~= 'dense' and out[1] > deep_from and scoring.read_histogram(keys[3], board, scale) or nil
  for i = 4, #args do
    local player = args[i]
    local score = redis.call('ZSCORE', board, player)
    local rank, position, approx
    if score then
      local points = scoring.score_points(tonumber(score), scale)
      approx = hist and scoring.approx_rank(hist, points)
      if approx and approx > deep_from then
        rank, position = approx, approx
      else
        approx = nil
        -- one O(log N) read per mode: ZREVRANK only where the ordinal rank is the answer
        local ordinal = mode == 'ordinal' and redis.call('ZREVRANK', board, player) + 1 or nil
        rank = scoring.mode_rank(board, keys[2], scale, mode, points, ordinal)
        position = mode == 'dense' and scoring.mode_rank(board, keys[2], scale, 'competition', points, nil) or rank
      end
    end
    out[#out + 1] = rank or false
    out[#out + 1] = score or false
    out[#out + 1] = position or false
    out[#out + 1] = approx and 1 or 0
  end
  return out
end

-- Defined boards: lex reads ---------------------------------------------------------------
-- (the encoding and its helpers: "Defined boards: lex members" above)

--[[ lb_lex_top: the first N entries of a lex board, best first.
Input:  KEYS[1] board, KEYS[2] profiles, KEYS[3] the board's metadata hash; ARGV[1] n, ARGV[2]
        the definition's key count
Output: flat {member, profile JSON or nil, metadata or nil, ...}
]]
function reads.lb_lex_top(keys, args)
  local n, key_len = valid.parse_uint(args[1], 6), lex.key_len(args[2])
  if not n or n < 1 or n > 1000 or not key_len then
    return refuse('bad_request', 'n must be 1..1000, key count 1..5')
  end
  return lex.entries(keys[2], keys[3], redis.call('ZRANGE', keys[1], 0, n - 1), key_len)
end

--[[ lb_lex_ranks: rank and member of each listed player on a lex board, plus the board size.
Input:  KEYS[1] board, KEYS[2] its members hash (player -> member), KEYS[3] its distinct key
        parts; ARGV[1] rank mode, ARGV[2] key count, ARGV[3..] players
Output: {board size, then per player: member or nil, rank or nil, position or nil (the ordinal
        rank in ordinal mode, else the competition rank)} in ARGV order
]]
function reads.lb_lex_ranks(keys, args)
  local mode, key_len = args[1], lex.key_len(args[2])
  if not scoring.RANK_MODES[mode] or not key_len then
    return refuse('bad_request', 'rank mode and key count required')
  end
  local out = { redis.call('ZCARD', keys[1]) }
  local members = #args > 2 and redis.call('HMGET', keys[2], unpack(args, 3)) or {}
  for i = 3, #args do
    local member = members[i - 2]
    local rank, position
    if member then
      rank = lex.rank(keys[1], keys[3], mode, member, key_len)
      position = mode == 'dense' and lex.rank(keys[1], keys[3], 'competition', member, key_len) or rank
    end
    out[#out + 1] = member or false
    out[#out + 1] = rank or false
    out[#out + 1] = position or false
  end
  return out
end

--[[ lb_lex_around: the entries k above and k below a player on a lex board.
Input:  KEYS[1] board, KEYS[2] members hash, KEYS[3] distinct key parts, KEYS[4] profiles,
        KEYS[5] metadata hash; ARGV[1] player, ARGV[2] k, ARGV[3] rank mode, ARGV[4] key count
Output: {first ordinal rank, first rank in the mode, first position, board size, then flat
        member, profile JSON or nil, metadata or nil, ...}; {} if unranked
]]
function reads.lb_lex_around(keys, args)
  local k, key_len = valid.parse_uint(args[2], 3), lex.key_len(args[4])
  if not k or k > 100 or not scoring.RANK_MODES[args[3]] or not key_len then
    return refuse('bad_request', 'k must be 0..100; rank mode and key count required')
  end
  local member = redis.call('HGET', keys[2], args[1])
  if not member then
    return {}
  end
  local ordinal = redis.call('ZRANK', keys[1], member)
  local start = math.max(0, ordinal - k)
  local members = redis.call('ZRANGE', keys[1], start, ordinal + k)
  local first = members[1]
  local rank = lex.rank(keys[1], keys[3], args[3], first, key_len)
  local position = args[3] == 'dense' and lex.rank(keys[1], keys[3], 'competition', first, key_len) or rank
  if args[3] == 'ordinal' then
    rank, position = start + 1, start + 1
  end
  return { start + 1, rank, position, redis.call('ZCARD', keys[1]), unpack(lex.entries(keys[4], keys[5], members, key_len)) }
end

--[[ lb_rank_rebuild: rebuild a board's histogram, and in dense mode its distinct points, from the
board itself. For boards written before they had companions, and after a window's mode changed to
dense (the points set is kept only in dense mode): O(N), one atomic call, so no write interleaves;
a few seconds per million members, during which Redis serves nothing else. The companions get the
board's expiry; outside dense mode the points set is deleted.
Input:  KEYS[1] board, KEYS[2] its points set, KEYS[3] its histogram; ARGV[1] shift, ARGV[2] mode
Output: {members, distinct points values (0 outside dense mode), histogram buckets}
]]
function reads.lb_rank_rebuild(keys, args)
  local shift = valid.parse_uint(args[1], 2)
  if not shift or shift > 52 or not scoring.RANK_MODES[args[2]] then
    return refuse('bad_request', 'shift (0..52) and rank mode required')
  end
  local dense = args[2] == 'dense'
  local board, scale = keys[1], 2 ^ shift
  redis.call('DEL', keys[2], keys[3])
  local counts, distinct, buckets, values = {}, {}, 0, 0
  local size, step = redis.call('ZCARD', board), 10000
  for start = 0, size - 1, step do
    local flat = redis.call('ZRANGE', board, start, start + step - 1, 'WITHSCORES')
    for i = 2, #flat, 2 do
      local points = scoring.score_points(tonumber(flat[i]), scale)
      local b = scoring.bucket_of(points)
      if not counts[b] then
        counts[b], buckets = 0, buckets + 1
      end
      counts[b] = counts[b] + 1
      if dense and not distinct[points] then
        distinct[points], values = true, values + 1
      end
    end
  end
  local batch = {}
  local function flush(cmd, key)
    if #batch > 0 then
      redis.call(cmd, key, unpack(batch))
      batch = {}
    end
  end
  for b, n in pairs(counts) do
    batch[#batch + 1], batch[#batch + 2] = b, n
    if #batch >= 2000 then flush('HSET', keys[3]) end
  end
  flush('HSET', keys[3])
  for points in pairs(distinct) do
    batch[#batch + 1], batch[#batch + 2] = points, scoring.fmt_points(points)
    if #batch >= 2000 then flush('ZADD', keys[2]) end
  end
  flush('ZADD', keys[2])
  local expire = redis.call('PEXPIRETIME', board)
  if expire > 0 then
    redis.call('PEXPIREAT', keys[2], expire)
    redis.call('PEXPIREAT', keys[3], expire)
  end
  return { size, values, buckets }
end
