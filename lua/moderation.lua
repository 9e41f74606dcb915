-- Moderation and profiles, each change journaled. Each function checks all of its input before
-- its first write, so a refused call changes nothing.
local moderation = {}

moderation.MAX_REASON_BYTES = 256
moderation.MAX_AVATAR_BYTES = 256

-- The player, actor and reason of a moderation action; nil when all are acceptable.
function moderation.check_action(player, actor, reason, reason_required)
  if not valid.player(player) then
    return refuse('invalid_player', valid.PLAYER_RULE)
  end
  if type(actor) ~= 'string' or #actor == 0 or #actor > valid.MAX_ID_BYTES or not valid.plain_text(actor) then
    return refuse('invalid_actor', 'actor must be 1-' .. valid.MAX_ID_BYTES .. ' bytes of UTF-8 text')
  end
  if type(reason) ~= 'string' or (reason_required and #reason == 0) or #reason > moderation.MAX_REASON_BYTES
      or not valid.plain_text(reason) then
    return refuse('invalid_reason', 'reason must be 1-' .. moderation.MAX_REASON_BYTES .. ' bytes of UTF-8 text')
  end
  return nil
end

-- Bump a board's top-N version when the player was or is now in its top N: the publisher
-- republishes exactly the boards whose snapshot can differ.
function moderation.bump_if_top(versions, field, before, after, top_n)
  if (before and before < top_n) or (after and after < top_n) then
    redis.call('HINCRBY', versions, field, 1)
    return 1
  end
  return 0
end

-- A board of a call: keys[k + 1..5] its board, histogram, distinct points (or key parts), members
-- and metadata hashes; encoding reads.encoding's text ('' a packed board whose window is no
-- longer known: its companions are left alone). nil when malformed. pts: the distinct set a
-- write keeps (dense mode only).
function moderation.board(keys, k, field, mode, encoding, top_n)
  local enc, param = reads.encoding(encoding)
  if not (scoring.RANK_MODES[mode] and (enc or encoding == '') and top_n) then
    return nil
  end
  return { field = field, mode = mode, lex = enc == 'lex', param = param, key = keys[k + 1], hist = keys[k + 2],
           distinct = keys[k + 3], members = keys[k + 4], meta = keys[k + 5], top_n = top_n,
           pts = mode == 'dense' and keys[k + 3] or nil }
end

-- A call's board records (lb_ban's), all checked before the first write: each BAN_KEYS keys
-- after KEYS[fixed] and BAN_FIELDS fields after ARGV[pos]; nil when one is malformed.
function moderation.boards(keys, args, fixed, pos, count)
  local boards = {}
  for i = 1, count do
    local a = pos + moderation.BAN_FIELDS * (i - 1)
    local field, top_n, mode, encoding = unpack(args, a + 1, a + moderation.BAN_FIELDS)
    boards[i] = moderation.board(keys, fixed + moderation.BAN_KEYS * (i - 1), field, mode, encoding,
      valid.parse_uint(top_n, 6))
    if not boards[i] then
      return nil
    end
  end
  return boards
end

-- Take a player off a board with its companions (a lex board's player -> member field, a dense
-- board's distinct part when nobody else holds it, the histogram); the place before, or nil.
function moderation.take_off(board, player)
  local rank, member = moderation.place(board, player)
  if not rank then
    return nil
  end
  local old = not board.lex and tonumber(redis.call('ZSCORE', board.key, player))
  redis.call('ZREM', board.key, member)
  if board.lex then
    redis.call('HDEL', board.members, player)
    lex.member_moved(board.key, board.hist, board.pts, board.param, member, nil)
  elseif board.param then
    scoring.board_score_changed(board.key, board.hist, board.pts, board.param, old, nil)
  end
  return rank
end

-- A player's place (0-based) on a board of a call (moderation.board) and its member, nil when not
-- on it: a lex board's members are not player ids, its members hash names the player's member.
function moderation.place(board, player)
  if board.lex then
    local member = redis.call('HGET', board.members, player)
    return member and redis.call('ZRANK', board.key, member), member
  end
  return redis.call('ZREVRANK', board.key, player), player
end

-- Put a player who is on no entry of the board at `at` (a packed score, or a lex member), with
-- its companions (a lex board's player -> member field, a dense board's distinct part, the
-- histogram): moderation.take_off's inverse. The player's place after (0-based).
function moderation.put_on(board, player, at)
  if board.lex then
    redis.call('ZADD', board.key, 0, at)
    redis.call('HSET', board.members, player, at)
    lex.member_moved(board.key, board.hist, board.pts, board.param, nil, at)
    return redis.call('ZRANK', board.key, at)
  end
  redis.call('ZADD', board.key, at, player)
  scoring.board_score_changed(board.key, board.hist, board.pts, board.param, nil, at)
  return redis.call('ZREVRANK', board.key, player)
end

--[[ lb_ban: remove a player (and metadata) from the boards given, and leave a tombstone, so no
replayed or later submission can put them back (lb_submit refuses it: 'banned'). Banning again
updates the record and removes whatever is on the boards given.
Input:  KEYS[1] banned hash, KEYS[2] versions hash, KEYS[3] activity stream, KEYS[4] journal
        stream, then per board BAN_KEYS keys (moderation.board)
        ARGV    call layout (BAN_LAYOUT), how ('ban'; 'replay': a rebuild replaying a journaled
                ban's effect on the boards it restores, without tombstone, activity or journal),
                player, actor, reason, now_ms, activity_maxlen, then per board its version field
                "<window>:<period>:<scope>", top N, rank mode and encoding (moderation.board)
Output: {boards the player was removed from, of those the boards whose top N changed}
]]
moderation.BAN_LAYOUT = '2'
moderation.BAN_FIXED, moderation.BAN_KEYS, moderation.BAN_ARGS, moderation.BAN_FIELDS = 4, 5, 7, 4

function moderation.lb_ban(keys, args)
  local layout, how, player, actor, reason, now_ms, activity_maxlen = unpack(args, 1, moderation.BAN_ARGS)
  local err = valid.other_layout(layout, moderation.BAN_LAYOUT, 'lb_ban')
    or moderation.check_action(player, actor, reason, true)
  if err then
    return err
  end
  local now, maxlen = valid.parse_uint(now_ms, 15), valid.parse_uint(activity_maxlen, 12)
  local count = (#keys - moderation.BAN_FIXED) / moderation.BAN_KEYS
  local boards = count >= 0 and count == math.floor(count)
    and #args == moderation.BAN_ARGS + moderation.BAN_FIELDS * count
    and moderation.boards(keys, args, moderation.BAN_FIXED, moderation.BAN_ARGS, count)
  if not (now and maxlen and boards and (how == 'ban' or how == 'replay')) then
    return refuse('bad_request', 'malformed ban')
  end
  if how == 'ban' then
    redis.call('HSET', keys[1], player, cjson.encode({ by = actor, reason = reason, at = now }))
  end
  local removed, touched = 0, 0
  for _, board in ipairs(boards) do
    local rank = moderation.take_off(board, player)
    if rank then
      redis.call('HDEL', board.meta, player)
      removed = removed + 1
      touched = touched + moderation.bump_if_top(keys[2], board.field, rank, nil, board.top_n)
    end
  end
  if how == 'ban' then
    redis.call('XADD', keys[3], 'MAXLEN', '~', maxlen, '*', 'action', 'ban', 'player', player,
      'by', actor, 'reason', reason, 'boards', removed)
    -- the durable log folds a ban as "off every board": the boards given need not be journaled
    journal(keys[4], 'ban', player, actor, reason, now_ms)
  end
  return { removed, touched }
end

--[[ lb_unban: lift a ban. The scores the ban removed stay removed; the player starts again.
Input:  KEYS[1] banned hash, KEYS[2] activity stream, KEYS[3] journal stream
        ARGV    player, actor, reason ('' allowed), activity_maxlen
Output: 1 if the player was banned, 0 if not (then nothing is recorded)
]]
function moderation.lb_unban(keys, args)
  local err = moderation.check_action(args[1], args[2], args[3], false)
  if err then
    return err
  end
  local maxlen = valid.parse_uint(args[4], 12)
  if not maxlen or #args ~= 4 then
    return refuse('bad_request', 'malformed unban')
  end
  if redis.call('HDEL', keys[1], args[1]) == 0 then
    return 0
  end
  redis.call('XADD', keys[2], 'MAXLEN', '~', maxlen, '*', 'action', 'unban', 'player', args[1],
    'by', args[2], 'reason', args[3])
  journal(keys[3], 'unban', args[1], args[2], args[3])
  return 1
end

--[[ lb_correct: set a player's key values on the boards given, or take the player off them (a
correction, with its reason), the game's boards as any (one packed key, the points). A player
on a board keeps the time their entry was reached (ties stay ordered as they were reached); one
not on it is placed as of now (clamped into the period). The entry is taken off and put back,
so its companions follow as a ban's and a submission's do. Metadata is kept, set or cleared.
Input:  KEYS as lb_ban's
        ARGV    call layout (CORRECT_LAYOUT), how ('correct'; '' a rebuild's replay, not
                journaled again), player, values ("v1,v2,..."; '' takes the player off), metadata
                mode ('keep' or 'set'), metadata ('' clears), actor, reason, now_ms,
                activity_maxlen, 1 and one definition record (definitions.read), then per board
                its version field, start_ms, end_ms, shift, unit_ms, expire_at_s (0: never), mode
        The journal's one form (fn correction) is every argument after how: the durable log
        folds it on the boards it folds (the game's) and its rebuild replays it here on the others.
Output: per board {previous values ("v1,v2,...") or '' (not on it), rank after (1-based; 0: off it)}
        ERR banned (lift the ban first), a slip's value codes, points_out_of_range (a packed
        score would not be an exact double), invalid_player, invalid_actor, invalid_reason
]]
moderation.CORRECT_LAYOUT = '3'
moderation.CORRECT_ARGS, moderation.CORRECT_FIELDS = 11, 7

function moderation.lb_correct(keys, args)
  local layout, how, player, corrected, meta_mode, meta_value, actor, reason = unpack(args, 1, 8)
  local err = valid.other_layout(layout, moderation.CORRECT_LAYOUT, 'lb_correct')
    or moderation.check_action(player, actor, reason, true)
  if err then
    return err
  end
  local now, maxlen = valid.parse_uint(args[9], 15), valid.parse_uint(args[10], 12)
  local defs, pos = definitions.read(args, moderation.CORRECT_ARGS)
  local count = (#keys - moderation.BAN_FIXED) / moderation.BAN_KEYS
  if not (now and maxlen and defs and #defs == 1 and (how == 'correct' or how == '') and (meta_mode == 'keep' or meta_mode == 'set'))
      or count < 1 or count ~= math.floor(count) or #args ~= pos - 1 + moderation.CORRECT_FIELDS * count then
    return refuse('bad_request', 'malformed correction')
  end
  local def, values = defs[1], nil
  if corrected ~= '' or meta_mode == 'set' then -- checked as a slip's
    local bad
    values, bad = submit.values(def, { keys = corrected, meta = meta_value })
    if bad then
      return refuse(bad[2], bad[3])
    end
  end
  if redis.call('HEXISTS', keys[1], player) == 1 then
    return refuse('banned', 'player is banned from this game; unban first')
  end
  local plans = {}
  for b = 1, count do -- every board checked before the first write
    local a = pos - 1 + moderation.CORRECT_FIELDS * (b - 1)
    local field, start_ms, end_ms, shift, unit_ms, expire_at, mode = unpack(args, a + 1, a + moderation.CORRECT_FIELDS)
    start_ms, end_ms, shift = tonumber(start_ms), tonumber(end_ms), tonumber(shift)
    unit_ms, expire_at = tonumber(unit_ms), tonumber(expire_at)
    local plan = moderation.board(keys, moderation.BAN_FIXED + moderation.BAN_KEYS * (b - 1), field, mode,
      def.lex and 'lex:' .. #def.keys or (shift and string.format('%d', shift)), def.top_n)
    if not (plan and start_ms and end_ms and unit_ms and unit_ms > 0 and expire_at) or end_ms <= start_ms then
      return refuse('bad_request', 'malformed correction')
    end
    plan.expire_at = expire_at
    local at = math.min(math.max(now, start_ms), end_ms - 1) -- a new entry's reached time
    if def.lex then
      plan.old = redis.call('HGET', plan.members, player)
      if values then -- its place: the values, then the time it was reached
        local reached = plan.old and plan.old:sub(plan.param + 1, plan.param + lex.TIME_HEX) or lex.time_hex(at, def.last)
        plan.at = definitions.lex_prefix(def, values) .. reached .. lex.player_part(player)
      end
    else
      local old = redis.call('ZSCORE', plan.key, player)
      plan.old = old and tonumber(old) or nil
      if values then
        local value = scoring.pack(def, values)
        if math.abs(value) > 2 ^ (53 - shift) - 1 then
          return refuse('points_out_of_range', 'points must stay below ' .. string.format('%d', 2 ^ (53 - shift)) .. ' on board ' .. field)
        end
        -- the entry's tie part kept (floored: a negated value's too), or its time packed as lb_submit packs it
        local t = math.floor((at - start_ms) / unit_ms)
        plan.at = plan.old and value * plan.param + plan.old % plan.param
          or scoring.pack_score(value, def.last and plan.param - 1 - t or t, plan.param)
      end
    end
    plan.previous = plan.old and table.concat(definitions.texts(definitions.values_of(def, plan.old, plan.param)), ',') or ''
    plans[b] = plan
  end
  local rows = {}
  for _, plan in ipairs(plans) do
    local before = moderation.take_off(plan, player)
    local after = plan.at and moderation.put_on(plan, player, plan.at)
    if not values or (meta_mode == 'set' and meta_value == '') then
      redis.call('HDEL', plan.meta, player)
    elseif meta_mode == 'set' then
      redis.call('HSET', plan.meta, player, meta_value)
    end
    if values and plan.expire_at > 0 then
      -- after the writes: EXPIREAT on a key not yet created would do nothing
      for _, key in ipairs({ plan.key, plan.hist, plan.distinct, plan.members, plan.meta }) do
        redis.call('EXPIREAT', key, plan.expire_at, 'NX')
      end
    end
    moderation.bump_if_top(keys[2], plan.field, before, after, plan.top_n)
    rows[#rows + 1] = { plan.previous, after and after + 1 or 0 }
  end
  redis.call('XADD', keys[3], 'MAXLEN', '~', maxlen, '*', 'action', 'correct', 'player', player,
    'by', actor, 'reason', reason, 'value', corrected, 'boards', #rows)
  if how == 'correct' then
    journal(keys[4], 'correction', unpack(args, 3))
  end
  return rows
end

moderation.PROFILE_CHECKS = {
  name = function(v)
    return #v <= valid.MAX_NAME_BYTES and valid.plain_text(v)
  end,
  avatar = function(v)
    return #v <= moderation.MAX_AVATAR_BYTES and v:match('^https://[%w%-%.]+') ~= nil
      and v:match("^[%w%-%._~:/%?#%[%]@!%$&'%(%)%*%+,;=%%]+$") ~= nil
  end,
  country = function(v)
    return v:match('^[A-Z][A-Z]$') ~= nil
  end,
}

moderation.PROFILE_RULES = {
  name = 'name must be 1-' .. valid.MAX_NAME_BYTES .. ' bytes of UTF-8 text without control characters',
  avatar = 'avatar must be an https:// URL of at most ' .. moderation.MAX_AVATAR_BYTES .. ' bytes',
  country = 'country must be an ISO 3166-1 alpha-2 code in capitals',
}

--[[ lb_profile: set (or, with '', clear) fields of a player's profile: name, avatar, country.
Fields not named are kept. A change bumps the version of each board given on whose top N the
player stands (moderation.place, on either encoding), so the next snapshot carries it.
Input:  KEYS[1] profiles hash, KEYS[2] versions hash, KEYS[3] journal stream, then the current
        boards, lb_ban's BAN_KEYS keys each
        ARGV    call layout (PROFILE_LAYOUT), player, board count, change count, then lb_ban's
                record per board, then field, value per change
Output: the profile JSON after the call
]]
moderation.PROFILE_LAYOUT, moderation.PROFILE_FIXED, moderation.PROFILE_ARGS = '2', 3, 4

function moderation.lb_profile(keys, args)
  local player = args[2]
  local err = valid.other_layout(args[1], moderation.PROFILE_LAYOUT, 'lb_profile')
    or not valid.player(player) and refuse('invalid_player', valid.PLAYER_RULE)
  if err then
    return err
  end
  local nboards, nchanges = valid.parse_uint(args[3], 6), valid.parse_uint(args[4], 2)
  local first = moderation.PROFILE_ARGS + moderation.BAN_FIELDS * (nboards or 0) + 1 -- the first change
  local boards = nboards and nchanges and #args == first - 1 + 2 * nchanges
    and #keys == moderation.PROFILE_FIXED + moderation.BAN_KEYS * nboards
    and moderation.boards(keys, args, moderation.PROFILE_FIXED, moderation.PROFILE_ARGS, nboards)
  if not boards then
    return refuse('bad_request', 'malformed profile')
  end
  local changes = {}
  for i = first, #args, 2 do
    local field, value = args[i], args[i + 1]
    local check = moderation.PROFILE_CHECKS[field]
    if not check then
      return refuse('bad_request', 'profile fields are name, avatar and country')
    end
    if value ~= '' and not check(value) then
      return refuse('invalid_' .. field, moderation.PROFILE_RULES[field])
    end
    changes[field] = value
  end
  local raw = redis.call('HGET', keys[1], player)
  local profile = raw and cjson.decode(raw) or {}
  local changed = false
  for field, value in pairs(changes) do
    local new = value ~= '' and value or nil
    if profile[field] ~= new then
      profile[field] = new
      changed = true
    end
  end
  if not changed then
    return raw or '{}'
  end
  local encoded = next(profile) and cjson.encode(profile) or '{}'
  if encoded == '{}' then
    redis.call('HDEL', keys[1], player)
  else
    redis.call('HSET', keys[1], player, encoded)
  end
  for _, board in ipairs(boards) do
    moderation.bump_if_top(keys[2], board.field, moderation.place(board, player), nil, board.top_n)
  end
  journal(keys[3], 'profile', player, unpack(args, first))
  return encoded
end
