-- lb_submit's common slip in one pass: to a packed board (the game's points, or 1-5 bounded keys),
-- its own best or set, no tournament, dense mode, rows, outcome or metadata (nearly every slip).
-- common_boards decides per layout and batch whether its slips may; its pass checks and writes a
-- slip as submit.plan + submit.apply would (held equal by tests/test_properties_common.py), their
-- helpers inlined (a Lua call costs ~200 machine instructions); a refusal goes the general way.
function submit.common_boards(layout, ctx)
  local def = layout.def
  if def.lex or def.per_key or ctx.rows then
    return false
  end
  local boards, in_periods, seen_periods = layout.boards, {}, {}
  local lo, hi, max_points = ctx.now - ctx.max_age, ctx.now + ctx.skew, math.huge -- ts in [lo, hi]
  for _, board in ipairs(boards) do
    local period, scope = board.period, board.scope
    if board.own_op == 'incr' or period.mode == 'dense' or period.entrants or batch.period_closed(period)
        or (def.scoped and scope ~= 'global' and not scope:find('^board:[^:]*$') and not batch.known_scope(ctx, scope)) then
      return false
    end
    if not board.deltas then -- its held entries, and what the pass's writes need, one table read each
      board.held = board.held or batch.held_board(ctx, board.key, layout, false)
      board.scores, board.pending, board.scale = board.held.scores, board.held.pending, period.scale
      board.start_ms, board.unit_ms = period.start_ms, period.unit_ms
      if not ctx.hist[board.hist] then -- its histogram's changes (flush_histograms), shared with the general path
        ctx.hist[board.hist], ctx.hist[#ctx.hist + 1] = {}, board.hist
      end
      board.deltas = ctx.hist[board.hist]
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
  local players = {} -- the layout's, each once: count_players adds them to each of its periods
  ctx.commons[#ctx.commons + 1] = { periods = in_periods, players = players }
  return submit.common_pass(ctx, layout, boards, players, lo, hi, max_points)
end

-- The pass over a layout's slips in a batch, a closure whose upvalues are what each slip reads (as
-- fields of records and module tables, ~12 table reads a slip: 2 % of lb_submit's instructions by
-- callgrind): the module tables' bound once, the layout's and batch's per pass (with many small
-- boards a pass serves a few slips). DUPLICATE or OK, or nil (the general path). id and player:
-- printable ASCII, ts and points: digits (COMMON_SLIP's scan); values: a full record's key values.
do
  local MAX_ID_BYTES, MAX_NAME_BYTES, plain_text = valid.MAX_ID_BYTES, valid.MAX_NAME_BYTES, valid.plain_text
  local pack, bucket_of, nth_of, in_top, touch_top = scoring.pack, scoring.bucket_of, submit.nth, submit.in_top, submit.touch_top
  local board_rank, update_profile_name, renamed = batch.board_rank, batch.update_profile_name, submit.renamed
  local canonical, POW10, DUPLICATE, OK = batch.canonical, batch.POW10, submit.DUPLICATE, submit.OK
  function submit.common_pass(ctx, layout, boards, players, lo, hi, max_points)
    local def, mark, listed, values_of = layout.def, layout.mark, {}, {}
    local top_n, tie_last, keys, points_key = def.top_n, def.last, not def.points and def.keys, def.points_key
    local scope = boards[1].scope ~= 'global' and boards[1].scope or nil -- a defined board's activity column
    local banned, nths, ranks, act, before, applied, ids = ctx.banned_players, ctx.nth, ctx.ranks, ctx.act, mark.before, mark.applied, mark.ids
    return function(id, player, points_text, values, ts_text, name)
      if #id > MAX_ID_BYTES or banned[player] then
        return nil
      end
      if before[id] or applied[id] then
        return DUPLICATE
      end
      if #player > MAX_ID_BYTES or (name ~= '' and (#name > MAX_NAME_BYTES or not plain_text(name)))
          or #points_text > 16 or #ts_text > 15 then
        return nil
      end
      local points, ts = tonumber(points_text), tonumber(ts_text)
      if keys then -- key values as definitions.slip_values takes them (its text, its checks), then packed
        local text, pos, last = values ~= '' and values or points_key and points_text or '', 1, #keys
        for i = 1, last do
          local part, after = text:match('^(%-?%d+)()', pos)
          local key, n = keys[i], tonumber(part)
          if not (n and n >= key.lo and n <= key.hi and math.abs(n) < 2 ^ 53) or (i < last and text:byte(after) ~= 44) or (i == last and after <= #text) then
            return nil
          end
          values_of[i], pos = n, after + 1
        end
        points = pack(def, values_of)
      end
      if points > max_points or ts < lo or ts > hi then
        return nil
      end
      applied[id] = true
      ids[#ids + 1] = id
      local improved_any, activity_rank, new_bucket = false, '0', nil -- a rank as text: table.concat formats a number
      for b = 1, #boards do
        local board = boards[b]
        local key, scores, scale = board.key, board.scores, board.scale
        local old, nth = scores[player] or nil, nths[key] -- nth: the N-th score, where the batch read it (submit.nth)
        local t = (ts - board.start_ms) / board.unit_ms -- pack_score; x - x % 1 is floor(x) for x >= 0
        t = t - t % 1
        local score = points * scale + (tie_last and t or scale - 1 - t)
        if old == nil or score > old or (score ~= old and board.own_op == 'set') then
          if nth == nil then
            nth = nth_of(ctx, board)
          end
          local was_top = old ~= nil and (nth == false or old > nth or (old == nth and in_top(ctx, key, player, old, nth, top_n)))
          scores[player] = score -- defer_write
          local pending = board.pending
          local n = pending.n + 1
          pending.n, pending[n] = n, player
          if nth == false or score >= nth or (old and old >= nth) then -- forget_ranks
            ranks[key] = nil
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
            touch_top(board, player, name, ctx, nil, false)
            if b == 1 and in_top(ctx, key, player, score, nth_of(ctx, board), top_n) then
              rank = board_rank(ctx, key, player, top_n)
            end
          elseif nth == false or score > nth or (score == nth and in_top(ctx, key, player, score, nth, top_n)) then
            board.points, board.old, board.write, board.meta_value = points, score, false, '' -- what announce reads
            rank = touch_top(board, player, name, ctx, board_rank(ctx, key, player, top_n), true)
          end
          if b == 1 and rank and rank < top_n then
            activity_rank = rank + 1
          end
          improved_any = improved_any or old == nil or score > old
        elseif b == 1 then -- the activity entry's rank in the top N (in_top inlined: a slip not beating its best)
          if nth == nil then
            nth = nth_of(ctx, board)
          end
          if nth == false or old > nth or (old == nth and in_top(ctx, key, player, old, nth, top_n)) then
            activity_rank = board_rank(ctx, key, player, top_n) + 1
          end
        end
      end
      if not listed[player] then -- listed once, counted in each of the layout's periods: count_players
        listed[player] = true
        players[#players + 1] = player
      end
      if name ~= '' and update_profile_name(ctx, player, name) then
        renamed(ctx, boards, #boards, player, name)
      end
      local a, k = act, act.n + 1 -- log_activity (a local: a read of an upvalue is one more step)
      a.n = k
      a.id[k], a.player[k], a.op[k], a.improved[k], a.rank[k] = id, player, '', improved_any and '1' or '0', activity_rank
      a.points[k] = keys and '' or points >= POW10[#points_text] and points_text or canonical(points_text, points)
      if scope then -- a defined board's (log_activity)
        a.board[k] = scope
      end
      a.ts[k] = ts >= POW10[#ts_text] and ts_text or canonical(ts_text, ts)
      return OK
    end
  end
end
