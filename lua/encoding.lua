-- Score, int64 and lex encodings: a packed score and a board's rank companions (scoring), exact
-- 64-bit integers as two doubles (int64) and a lex board's member text (lex).
local lex = {}
local scoring = {}
local int64 = {}

-- Rank modes, histogram and distinct points ------------------------------------------------
-- A board's companions, kept in the board's atomic write (board_score_changed): a histogram (HASH
-- bucket -> members; ranking.py's buckets) for deep ranks, and in dense mode only its distinct points
-- (ZSET value -> value: two thirds of the board's memory where nearly every member's points differ).

scoring.RANK_MODES = { ordinal = true, dense = true, competition = true }
scoring.SUB_BUCKETS = 16 -- buckets per power of two: each spans at most 1/16 of its lower bound

-- Integer-exact (doubles below 2^53): frexp gives points = m * 2^ex with m in [0.5, 1), so the
-- power of two is ex - 1 and the place inside it (points - 2^(ex-1)) * 16 / 2^(ex-1) is
-- 32m - 16, exact (a scaling by a power of two and a subtraction inside [16, 32)); x - x % 1 is
-- its floor, without a call. A value below 0 (an ascending board's, scoring.standing) takes
-- its magnitude's bucket negated, so a higher bucket is always a better one.
function scoring.bucket_of(points)
  if points <= 0 then
    return points < 0 and -scoring.bucket_of(-points) or 0
  end
  local m, ex = math.frexp(points)
  local place = 2 * scoring.SUB_BUCKETS * m - scoring.SUB_BUCKETS
  return 1 + (ex - 1) * scoring.SUB_BUCKETS + (place - place % 1)
end

-- The points range [lo, hi) of a bucket (a negated bucket's: its magnitude's, mirrored).
function scoring.bucket_bounds(b)
  if b == 0 then
    return 0, 1
  elseif b < 0 then
    local lo, hi = scoring.bucket_bounds(-b)
    return 1 - hi, 1 - lo
  end
  local e, sub = math.floor((b - 1) / scoring.SUB_BUCKETS), (b - 1) % scoring.SUB_BUCKETS
  local base = 2 ^ e
  local hi = sub == scoring.SUB_BUCKETS - 1 and 2 * base or base + math.ceil((sub + 1) * base / scoring.SUB_BUCKETS)
  return base + math.ceil(sub * base / scoring.SUB_BUCKETS), hi
end

-- The score encoding, its one place (the header's "Score packing"), and the points read back:
-- the scores holding exactly `points` are [points * scale, (points + 1) * scale - 1].
function scoring.pack_score(points, t, scale)
  return points * scale + (scale - 1 - t)
end

function scoring.score_points(score, scale)
  return math.floor(score / scale)
end

-- A packed board's points of its key values (numbers, exact below 2^53) and back (mixed radix,
-- docs/data-model.md "Encodings"): the first value signed by its direction times P, plus each
-- later key's gain (v - min desc, max - v asc) times its place; key.place is the product of the
-- ranges of the keys after it (P the first key's; one key packs its value signed).
function scoring.pack(def, values)
  local points = 0
  for i, key in ipairs(def.keys) do
    local v = values[i]
    points = points + (i == 1 and (key.desc and v or -v) or key.desc and v - key.lo or key.hi - v) * key.place
  end
  return points
end

function scoring.unpack(def, points)
  local values = {}
  for i, key in ipairs(def.keys) do
    local g = math.floor(points / key.place)
    points = points - g * key.place
    values[i] = i == 1 and (key.desc and g or -g) or key.desc and key.lo + g or key.hi - g
  end
  return values
end

-- board_score_changed: keep a board's histogram and distinct points right after a member's packed
-- score went from old to new (either nil: added or removed). Call it AFTER the board was written:
-- whether someone still holds the old points is read from the board. points_key: the points set in
-- dense mode, else nil. O(1) for the histogram, O(log N) for the points set, nothing when only the
-- time part moved. Every function that moves scores calls it, so dense ranks and the histogram stay
-- exact. `deltas` (lb_submit): the histogram's changes are summed there and written at the batch's
-- end (flush_histograms) instead of two HINCRBYs per write; nothing in the batch reads the
-- histogram meanwhile. The board's own write may still wait (held_board): only dense mode's count
-- reads the board, and its caller flushes first.
function scoring.board_score_changed(board_key, hist_key, points_key, scale, old, new, deltas)
  local old_points = old and scoring.score_points(old, scale) or nil
  local new_points = new and scoring.score_points(new, scale) or nil
  if old_points == new_points then
    return
  end
  if new_points and points_key then
    redis.call('ZADD', points_key, new_points, string.format('%d', new_points))
  end
  scoring.hist_moved(hist_key, old_points, new_points, deltas)
  if old_points and points_key and redis.call('ZCOUNT', board_key, old_points * scale, (old_points + 1) * scale - 1) == 0 then
    redis.call('ZREM', points_key, string.format('%d', old_points))
  end
end

-- A member of a board's histogram moved from the standing old to new (nil: added or removed;
-- scoring.standing), added to the batch's deltas when given, else written at once.
function scoring.hist_moved(hist_key, old, new, deltas)
  local old_bucket, new_bucket = old and scoring.bucket_of(old), new and scoring.bucket_of(new)
  if new_bucket == old_bucket then
    return
  end
  if deltas then
    local d = deltas[hist_key]
    if not d then
      d = {}
      deltas[hist_key] = d
      deltas[#deltas + 1] = hist_key -- written in first-touched order
    end
    if new_bucket then
      d[new_bucket] = (d[new_bucket] or 0) + 1
    end
    if old_bucket then
      d[old_bucket] = (d[old_bucket] or 0) - 1
    end
    return
  end
  if new_bucket then
    redis.call('HINCRBY', hist_key, new_bucket, 1)
  end
  if old_bucket and redis.call('HINCRBY', hist_key, old_bucket, -1) <= 0 then
    redis.call('HDEL', hist_key, old_bucket)
  end
end

-- What a board's histogram buckets an entry by, higher better on either encoding: a packed
-- score's points (negative on an ascending board), or a lex member's first key: its 16 hex
-- digits read as an unsigned u (ascending best first), 2^63 - u, which is the value + 1 on a
-- desc key and the value negated on an asc one. Worked out from the two halves so it is exact
-- below 2^53 (u itself is not: a double near 2^63 is a multiple of 2,048), rounded beyond.
function scoring.standing(enc, param, order)
  if enc == 'lex' then
    return (int64.TWO31 - tonumber(order:sub(1, 8), 16)) * int64.TWO32 - tonumber(order:sub(9, 16), 16)
  end
  return scoring.score_points(tonumber(order), param)
end

-- The rank of a member holding `points`, in `mode`, given its ordinal rank (1-based).
function scoring.mode_rank(board_key, points_key, scale, mode, points, ordinal)
  if mode == 'competition' then
    return redis.call('ZCOUNT', board_key, (points + 1) * scale, '+inf') + 1
  elseif mode == 'dense' then
    return redis.call('ZCOUNT', points_key, '(' .. string.format('%d', points), '+inf') + 1
  end
  return ordinal
end

-- The histogram read once per call: for each bucket present, how many members sit in buckets
-- above it. O(B log B) for B buckets (at most 16 per power of two), then O(1) per player. The
-- board's best and worst standings bound the top and bottom buckets: those are often filled only
-- in part, and spreading their members over the whole bucket would misplace them. nil when it
-- does not count every member (until lb_rank_rebuild): its estimates would be too high.
function scoring.read_histogram(hist_key, board_key, enc, param, size)
  local best, worst
  if enc == 'lex' then -- ascending members, best first
    best, worst = redis.call('ZRANGE', board_key, 0, 0)[1], redis.call('ZRANGE', board_key, -1, -1)[1]
  else
    best = redis.call('ZRANGE', board_key, -1, -1, 'WITHSCORES')[2]
    worst = redis.call('ZRANGE', board_key, 0, 0, 'WITHSCORES')[2]
  end
  if not best then
    return nil
  end
  local flat = redis.call('HGETALL', hist_key)
  local buckets, counts = {}, {}
  for i = 1, #flat, 2 do
    local b = tonumber(flat[i])
    buckets[#buckets + 1] = b
    counts[b] = tonumber(flat[i + 1])
  end
  table.sort(buckets, function(x, y) return x > y end)
  local above, acc = {}, 0
  for _, b in ipairs(buckets) do
    above[b] = acc
    acc = acc + counts[b]
  end
  if acc ~= size then
    return nil
  end
  return { above = above, counts = counts,
    best = scoring.standing(enc, param, best), worst = scoring.standing(enc, param, worst) }
end

-- Approximate ordinal rank of a member with `points` (its standing): the members of every bucket
-- above, plus its place in its own bucket as if the bucket's members were spread evenly over its
-- points range. nil when the histogram does not know the bucket.
function scoring.approx_rank(hist, points)
  local b = scoring.bucket_of(points)
  local count = hist.counts[b]
  if not count then
    return nil
  end
  local lo, hi = scoring.bucket_bounds(b)
  hi, lo = math.min(hi, hist.best + 1), math.max(lo, hist.worst)
  -- a lex standing beyond 2^53 is a rounded double: its bucket's range may close to nothing
  local inside = hi > lo and math.ceil(count * (hi - points) / (hi - lo)) or 1
  return hist.above[b] + math.max(1, math.min(count, inside))
end

-- Defined boards: lex members ---------------------------------------------------------------
-- A board whose definition does not fit one exact double keeps every member at score 0, so Redis
-- orders it by the member, bytewise: per key 16 hex digits, then 12 of the time, then the player
-- part (docs/data-model.md "Encodings"). Ascending order is best first: rank = HGET
-- (player -> member) + ZRANK, top = ZRANGE 0 N-1, competition rank = ZLEXCOUNT of the members
-- before the key part, dense rank = the same on the distinct key parts.
-- Lua numbers are doubles: a value is carried as two 32-bit halves (hi, lo) of its two's
-- complement, parsed from its decimal text and added without ever being one double.

int64.TWO32, int64.TWO31 = 4294967296, 2147483648
lex.KEY_HEX, lex.TIME_HEX = 16, 12
lex.TIME_SPAN = 2 ^ 48 - 1

-- '-9223372036854775808' .. '9223372036854775807' -> hi, lo; nil for anything else. Every step
-- stays below 2^37, exact in a double.
function int64.parse(s)
  if type(s) ~= 'string' then
    return nil
  end
  local sign, digits = s:match('^(%-?)0*(%d+)$')
  if not digits or #digits > 19 then
    return nil
  end
  local hi, lo = 0, 0
  for i = 1, #digits do
    local t = lo * 10 + digits:byte(i) - 48
    local carry = math.floor(t / int64.TWO32)
    lo, hi = t - carry * int64.TWO32, hi * 10 + carry
    if hi >= int64.TWO32 then
      return nil
    end
  end
  if sign == '' then
    if hi >= int64.TWO31 then
      return nil
    end
    return hi, lo
  end
  if hi > int64.TWO31 or (hi == int64.TWO31 and lo > 0) then
    return nil
  end
  return int64.negate(hi, lo)
end

-- -x, in two's complement (the magnitude of a negative value)
function int64.negate(hi, lo)
  if lo == 0 then
    return (int64.TWO32 - hi) % int64.TWO32, 0
  end
  return int64.TWO32 - 1 - hi, int64.TWO32 - lo
end

function int64.format(hi, lo)
  local sign = ''
  if hi >= int64.TWO31 then -- negative: format the magnitude
    sign = '-'
    hi, lo = int64.negate(hi, lo)
  end
  if hi == 0 then
    return sign .. string.format('%d', lo)
  end
  local digits = {}
  while hi > 0 or lo > 0 do
    local r = hi % 10
    local t = r * int64.TWO32 + lo
    local d = t % 10
    hi, lo = (hi - r) / 10, (t - d) / 10
    digits[#digits + 1] = string.char(48 + d)
  end
  return sign .. string.reverse(table.concat(digits))
end

-- a + b, or nil when the sum leaves int64
function int64.add(ahi, alo, bhi, blo)
  local lo = alo + blo
  local carry = lo >= int64.TWO32 and 1 or 0
  local hi = (ahi + bhi + carry) % int64.TWO32
  local an = ahi >= int64.TWO31
  if an == (bhi >= int64.TWO31) and an ~= (hi >= int64.TWO31) then
    return nil
  end
  return hi, lo - carry * int64.TWO32
end

-- The 16 hex digits of one key: ascending text order is the key's best-first order.
function lex.key_hex(hi, lo, desc)
  hi = (hi + int64.TWO31) % int64.TWO32 -- the sign bit flipped
  if desc then
    hi, lo = int64.TWO32 - 1 - hi, int64.TWO32 - 1 - lo
  end
  return string.format('%08x%08x', hi, lo)
end

function lex.key_of_hex(text, desc)
  local hi, lo = tonumber(text:sub(1, 8), 16), tonumber(text:sub(9, 16), 16)
  if desc then
    hi, lo = int64.TWO32 - 1 - hi, int64.TWO32 - 1 - lo
  end
  return (hi + int64.TWO31) % int64.TWO32, lo
end

function lex.time_hex(ts, last)
  return string.format('%012x', last and lex.TIME_SPAN - ts or ts)
end

-- A member's rank in a mode: ordinal by its place, competition by the members before its key
-- part, dense by the distinct key parts before it. Every count is O(log N).
function lex.rank(board, distinct, mode, member, key_len)
  if mode == 'ordinal' then
    return redis.call('ZRANK', board, member) + 1
  end
  local before = '(' .. member:sub(1, key_len)
  if mode == 'competition' then
    return redis.call('ZLEXCOUNT', board, '-', before) + 1
  end
  return redis.call('ZLEXCOUNT', distinct, '-', before) + 1
end

-- A lex member's player part: the id's bytes complemented, then \255, so equal values and time
-- order by descending id, as a packed board's (read highest first; Redis orders equal scores by
-- member): one tie rule on every encoding. \255 outranks every complemented byte (an id holds no
-- \0): an id sorts after the longer ids it begins. The complement table is made at the first
-- call (a library's load runs without the string library).
function lex.flip()
  local flip = lex.FLIP
  if not flip then
    flip = {}
    for b = 0, 255 do
      flip[string.char(b)] = string.char(255 - b)
    end
    lex.FLIP = flip
  end
  return flip
end

function lex.player_part(player)
  return (player:gsub('.', lex.flip())) .. '\255'
end

-- The player id of a member whose key part is key_len long. A member written before the player
-- part was complemented holds the id as it is: no UTF-8 text holds the byte \255, so the last
-- byte tells the two apart (such an entry keeps its old place among exact ties until rewritten).
function lex.player_of(member, key_len)
  if member:byte(-1) ~= 255 then
    return member:sub(key_len + lex.TIME_HEX + 1)
  end
  return (member:sub(key_len + lex.TIME_HEX + 1, -2):gsub('.', lex.flip()))
end

-- A lex board's companions after a member went from old to new, as board_score_changed keeps a
-- packed board's: its histogram (by the first key: scoring.standing) and in dense mode
-- (parts_key) its distinct key parts (key_len long), one going when nobody holds it any more.
function lex.member_moved(board_key, hist_key, parts_key, key_len, old, new, deltas)
  local from, to = old and old:sub(1, lex.KEY_HEX), new and new:sub(1, lex.KEY_HEX)
  if from ~= to then
    scoring.hist_moved(hist_key, from and scoring.standing('lex', 0, from), to and scoring.standing('lex', 0, to), deltas)
  end
  local was, part = old and old:sub(1, key_len), new and new:sub(1, key_len)
  if parts_key and part then
    redis.call('ZADD', parts_key, 0, part)
  end
  if parts_key and was and was ~= part and redis.call('ZLEXCOUNT', board_key, '[' .. was, '(' .. was .. 'g') == 0 then
    redis.call('ZREM', parts_key, was)
  end
end
