"""What a rebuild writes to Redis: the folded state as final values (``write_folded``), the
newest submissions through ``lb_submit`` itself (``replay``), and the defined boards' slips
through it too, each at a moment that gives it the outcome it had (``replay_slips``).

The folded state is written as plain commands, pipelined, one batch in flight while the next is
built: each board's members (one ZADD per thousand members instead of one call per submission,
so a rebuild is not bounded by Redis's speed at running ``lb_submit``), its distinct-player log,
its rank companions, a version the publisher has not published, the profiles, the idempotency
memory, and what the journaled actions left beyond boards and names (``state_commands``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from leaderboard import GameConfig, Leaderboard
from leaderboard.boards import DEFAULT_ID, Definition, period
from leaderboard.errors import Banned, InvalidBoard, InvalidInput
from leaderboard.keys import GLOBAL_SCOPE, HOUR_MS, SCOPE_KINDS, Keys
from leaderboard.moderation import Moderation
from leaderboard.ranking import companions
from leaderboard.transport import Command, execute_packed, now_ms
from leaderboard.windows import tournament_of, tournament_window
from leaderboard.windows import window as window_spec

from ..durable import Action, ActionFolder, Record, Slip
from ..durable.fold import Close, replayed
from .report import Restored

_CHUNK = 1_000  # members per ZADD / SADD / PFADD


async def write_folded(
    lb: Leaderboard,
    folder: ActionFolder,
    seen: Mapping[int, list[str]],
    stored_names: Mapping[str, str],
    restored: Restored,
    now: int,
) -> None:
    """The folded state as final values: members, distinct-player logs, versions, names, ids,
    and each board's rank companions (histogram; distinct points in dense mode), computed here
    from its members as ``lb_rank_rebuild`` would from the board (lb_submit keeps them as it
    writes; members written whole need them once, before the replayed part builds on them)."""
    redis, config = lb.redis, lb.config
    keys, now_s = config.keys, now // 1000
    folder.finish()  # the actions after the last folded submission: all before the first replayed one
    commands: list[Command] = []
    inflight: asyncio.Future[list[Any]] | None = None

    async def flush(force: bool = False) -> None:
        # One batch in flight while the next is built: Redis executes one while this process
        # builds and packs the next (else the write phase is Redis's time plus ours). Each is sent
        # once the one before has been answered, so they apply in order.
        nonlocal inflight
        if commands and (force or len(commands) >= 200):
            if inflight is not None:
                await inflight
            inflight = asyncio.ensure_future(execute_packed(redis, *commands))
            commands.clear()
            await asyncio.sleep(0)  # it packs and sends now
        if force and inflight is not None:
            await inflight
            inflight = None

    try:
        # the region and mode values the folded slips named, expired periods' too: lb_submit's
        # cap on them (LB_MAX_SCOPES) counts every value a slip ever named
        named = sorted({scope for _, _, scope in folder.boards if scope.split(":", 1)[0] in SCOPE_KINDS})
        if named:
            commands.append(("SADD", keys.scopes, *named))
        for (window, period, scope), members in folder.boards.items():
            expire_at = folder.expire_at[(window, period, scope)]
            if (expire_at and expire_at <= now_s) or not members:
                continue
            key = keys.board(window, period, scope)
            items = list(members.items())
            for i in range(0, len(items), _CHUNK):
                commands.append(("ZADD", key, *(x for player, score in items[i : i + _CHUNK] for x in (score, player))))
                await flush()
            if scope == GLOBAL_SCOPE:  # every applied submission lands on its window's global board
                hll = keys.players(window, period)
                for i in range(0, len(items), _CHUNK):
                    commands.append(("PFADD", hll, *(player for player, _ in items[i : i + _CHUNK])))
                if expire_at:
                    commands.append(("EXPIREAT", hll, expire_at, "NX"))
            commands += _companions(config, folder, (window, period, scope), members.values())
            for written_key in (key, keys.histogram(window, period, scope), keys.points(window, period, scope)):
                if expire_at:  # on a key not written (no points set outside dense mode): a no-op
                    commands.append(("EXPIREAT", written_key, expire_at, "NX"))
            # a version the publisher has not published: it publishes the restored board's top N
            commands.append(("HINCRBY", keys.versions, f"{window}:{period}:{scope}", 1))
            restored.boards += 1
            restored.entries += len(items)
            await flush()
        names = {**stored_names, **folder.names}  # '' when a profile call cleared the name
        for player, profile in profiles(names, folder).items():
            commands.append(("HSET", keys.profiles, player, profile))
            await flush()
        restored.names = sum(1 for name in names.values() if name)
        # what the actions left beyond boards and names: tombstones, tournaments and their entrants,
        # closed periods' markers and finals, the distinct-player logs of banned players
        state, restored.journal = state_commands(keys, folder, now_ms=now)
        restored.actions = folder.actions
        for command in state:
            commands.append(command)
            await flush()
        idem_ms = config.idempotency_s * 1000
        for hour, ids in seen.items():
            bucket = keys.seen(hour)
            for i in range(0, len(ids), _CHUNK):
                commands.append(("SADD", bucket, *ids[i : i + _CHUNK]))
            commands.append(("EXPIREAT", bucket, ((hour + 1) * HOUR_MS + idem_ms) // 1000, "NX"))
            restored.seen_ids += len(ids)
            await flush()
        await flush(force=True)
    except BaseException:
        if inflight is not None:  # failed, or cancelled: nothing is left running
            inflight.cancel()
        raise


def _companions(
    config: GameConfig, folder: ActionFolder, board: tuple[str, str, str], scores: Iterable[int]
) -> list[Command]:
    """The commands that write a board's rank companions from its members' packed scores."""
    window_name = board[0]
    tournament = tournament_of(window_name)
    if tournament:
        spec = tournament_window(tournament, *folder.state.tournaments[tournament])
    else:
        spec = window_spec(window_name)
    histogram, distinct = companions(scores, spec.shift)
    hist_key, points_key = config.keys.histogram(*board), config.keys.points(*board)
    out: list[Command] = [("DEL", hist_key, points_key)]
    flat = [x for bucket, members in histogram.items() for x in (bucket, members)]
    out += [("HSET", hist_key, *flat[i : i + 2 * _CHUNK]) for i in range(0, len(flat), 2 * _CHUNK)]
    if config.rank_mode_for(window_name) == "dense":
        values = [x for points in distinct for x in (points, points)]  # score and member: the points
        out += [("ZADD", points_key, *values[i : i + 2 * _CHUNK]) for i in range(0, len(values), 2 * _CHUNK)]
    return out


def tournament_commands(keys: Keys, folder: ActionFolder, now_s: int, out: list[tuple[Any, ...]]) -> int:
    """Append the commands that restore the tournaments and their entrants to ``out``; how many
    entrants."""
    state, entrants = folder.state, 0
    for tournament, (start, end) in state.tournaments.items():
        out.append(("HSET", keys.tournaments, tournament, orjson.dumps({"start_ms": start, "end_ms": end}).decode()))
    for tournament, (players, expire_at) in state.entrants.items():
        if not players or (expire_at and expire_at <= now_s):
            continue
        key, listed = keys.entrants(tournament), sorted(players)
        for i in range(0, len(listed), 1000):
            out.append(("SADD", key, *listed[i : i + 1000]))
        out.append(("EXPIREAT", key, expire_at))
        entrants += len(players)
    return entrants


async def write_tournaments(lb: Leaderboard, folder: ActionFolder, now: int) -> None:
    """The tournaments and their entrants, before the defined boards' slips replay: lb_submit
    checks a slip naming a tournament against both (``state_commands`` writes them again with
    the rest of the state: the same values)."""
    folder.finish()  # every action folded, the tournaments created after the last folded submission too
    commands: list[tuple[Any, ...]] = []
    tournament_commands(lb.config.keys, folder, now // 1000, commands)
    if commands:
        await execute_packed(lb.redis, *commands)


def state_commands(keys: Keys, folder: ActionFolder, *, now_ms: int) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """The Redis commands that restore what the actions left beyond boards and names, and their
    counts by kind (for the rebuild's report)."""
    state, now_s = folder.state, now_ms // 1000
    out: list[tuple[Any, ...]] = []
    for player, record in state.tombstones.items():
        out.append(("HSET", keys.banned, player, orjson.dumps(record).decode()))
    entrants = tournament_commands(keys, folder, now_s, out)
    markers = 0
    finals: dict[str, list[Close]] = {}
    for close in state.closes:
        if close.kept and close.final:  # the finals list has no expiry: it keeps its newest entries
            finals.setdefault(keys.finals(close.window, close.scope), []).append(close)
        if close.expire_at_s and close.expire_at_s <= now_s:
            continue
        marker = keys.closed_marker(close.window, close.period, close.scope)
        out.append(("SET", marker, close.closed_ms, *(("EXAT", close.expire_at_s) if close.expire_at_s else ())))
        markers += 1
    for key, closes in finals.items():
        # LPUSH in the order they were made, trimmed to the newest call's length, as lb_close does
        for close in closes:
            out.append(("LPUSH", key, close.final))
            out.append(("LTRIM", key, 0, close.kept - 1))
    for board, definition in state.boards.items():
        out.append(("HSET", keys.boards, board, definition))
    for board, definition in state.deleted_boards.items():
        out.append(("HSET", keys.deleted_boards, board, definition))
    if state.board_changes:
        out.append(("SET", keys.boards_version, state.board_changes))
        # the change log restarts at the floor, under an epoch of its own: a process holding an
        # older version, or the same one of the log before, reads them all
        out.append(("ZADD", keys.board_changes, state.board_changes, ""))
        out.append(("SET", keys.board_epoch, rebuilt_epoch(now_ms)))
    for player, badges in state.badges.items():
        out.append(("SADD", keys.badges(player), *sorted(badges)))
    # The distinct-player logs were written from the global boards' members: add the players a
    # ban took off, and where a correction put on players who never submitted in the period,
    # write the log again without them.
    for period_id in state.counted.keys() | {p for p, players in state.uncounted.items() if players}:
        name, label = period_id
        expire_at = folder.expire_at.get((name, label, GLOBAL_SCOPE), 0)
        if expire_at and expire_at <= now_s:
            continue
        hll, players = keys.players(name, label), state.counted.get(period_id, set())
        if state.uncounted.get(period_id):
            out.append(("DEL", hll))
            members = folder.boards.get((name, label, GLOBAL_SCOPE), {})
            players = players | (members.keys() - state.uncounted[period_id])
        listed = sorted(players)
        for i in range(0, len(listed), 1000):
            out.append(("PFADD", hll, *listed[i : i + 1000]))
        if expire_at and listed:
            out.append(("EXPIREAT", hll, expire_at, "NX"))
    counts = {
        "tombstones": len(state.tombstones),
        "tournaments": len(state.tournaments),
        "entrants": entrants,
        "closed periods": markers,
        "badges": sum(len(b) for b in state.badges.values()),
        "board definitions": len(state.boards),
        "deleted board definitions": len(state.deleted_boards),
    }
    return out, counts


def rebuilt_epoch(now: int) -> str:
    """The change log's epoch (keys.board_epoch) a rebuild writes: another history than any the
    function library started (those are Redis's clock in microseconds, digits only)."""
    return f"rebuilt:{now}"


def profiles(names: Mapping[str, str], folder: ActionFolder) -> dict[str, str]:
    """Each player's profile JSON from the last display names (``''``: cleared) and the avatars
    and countries the actions set; players with an empty profile have no entry, as lb_profile
    leaves them."""
    out: dict[str, str] = {}
    for player in names.keys() | folder.state.extras.keys():
        profile: dict[str, str] = {}
        if name := names.get(player):
            profile["name"] = name
        profile.update(folder.state.extras.get(player, {}))
        if profile:
            out[player] = orjson.dumps(profile).decode()
    return out


def fields_of(record: Record) -> dict[str, str]:
    """A record as the queue carried it: the fields lb_submit reads."""
    fields = {"id": record.id, "player": record.player, "points": str(record.points), "ts": str(record.ts)}
    for key in ("op", "name", "region", "mode", "tournament"):
        value = getattr(record, key)
        if value:
            fields[key] = value
    return fields


# The journaled actions that change what a defined board's slips do, or do to it: its definition
# (put, delete), a ban (off every defined board), a correction of its entries.
_DEFINED_HISTORY = frozenset({"ban", "board", "board_delete", "correction"})


async def replay_slips(
    lb: Leaderboard, folder: ActionFolder, slips: Sequence[Slip], actions: Sequence[Action], restored: Restored
) -> None:
    """The defined boards' slips, through ``lb_submit``, in the order they were applied, each
    call at a moment that gives each of its slips the outcome it had (``slip_calls``), and
    between them the actions as they came: each definition as it stood when its slips were
    applied (the call takes a board's definition from the caller, who reads it from Redis; an
    update may have changed the operator or the metadata limit since), each ban (it took its
    player off the defined boards; the slips it refused afterwards are not in the log), each
    correction (``lb_correct`` again, not journaled again). A deleted board's keys stay
    in Redis until they expire, and a board created again with the same id goes on from them:
    so do its slips here, under the definition of their time."""
    moderation, on_boards, done = Moderation(lb), set[str](), 0
    # An action stamped the same microsecond as a batch ran before it (durable/records.py).
    history = sorted(
        a for a in actions if a.fn in _DEFINED_HISTORY and a.args and (a.fn != "correction" or replayed(a))
    )
    for action in [*history, None]:
        end = done
        while end < len(slips) and (action is None or slips[end].applied_us < action.at):
            end += 1
        segment = [slip.entry() for slip in slips[done:end]]
        # a slip naming no board is the game's: its stored default's, the one it was filed under
        for now, entries in slip_calls(
            lambda b: lb.boards.get(b or DEFAULT_ID), segment, lb.config.idempotency_s * 1000
        ):
            await replay(lb, entries, now, restored)
            restored.slips += len(entries)
        on_boards.update(fields.get("player", "") for fields in segment)
        done = end
        if action is not None:
            await _replay_defined(lb, moderation, action, on_boards, restored)


async def _replay_defined(
    lb: Leaderboard, moderation: Moderation, action: Action, on_boards: set[str], restored: Restored
) -> None:
    """One action of ``_DEFINED_HISTORY`` at its place among the slips."""
    a = action.args
    if action.fn == "ban":
        if a[0] in on_boards:
            await moderation.replay_ban(a[0], actor=a[1], reason=a[2], at=int(a[3]))
        return
    if action.fn == "correction":
        try:
            await lb.replay_correct(a)
        except (InvalidBoard, InvalidInput, Banned) as exc:  # not as then: said, not hidden
            key = f"{exc.code} (correction)"
            restored.refused[key] = restored.refused.get(key, 0) + 1
        else:
            on_boards.add(a[0])
            restored.defined_corrections += 1
        return
    # as lb_board_put / lb_board_delete change the boards hash and the deleted definitions' hash
    boards, deleted = lb.keys.boards, lb.keys.deleted_boards
    if action.fn == "board":
        change: tuple[tuple[str, ...], ...] = (("HSET", boards, a[0], a[1]), ("HDEL", deleted, a[0]))
    else:  # journaled with the definition it deleted (before that, only its id: the one Redis holds)
        old = a[1] if len(a) > 1 else await lb.boards.stored_json(a[0])
        change = (("HDEL", boards, a[0]), *((("HSET", deleted, a[0], old),) if old else ()))
    *_, version = await execute_packed(lb.redis, *change, ("INCR", lb.keys.boards_version))
    await execute_packed(
        lb.redis,
        ("ZADD", lb.keys.board_changes, version, a[0]),  # as lb_board_put logs it
        ("SET", lb.keys.board_epoch, rebuilt_epoch(now_ms()), "NX"),
    )
    await lb.boards.refresh()


def slip_calls(
    definition_of: Callable[[str], Definition | None], entries: Sequence[dict[str, str]], horizon_ms: int
) -> Iterator[tuple[int, list[dict[str, str]]]]:
    """Consecutive slips grouped into calls, each with its ``now``. lb_submit took a slip when
    its timestamp lay in the current period of each of its board's windows (the periods of the
    call's ``now``) and within the idempotency horizon before ``now``; the same slip replayed with
    ``now`` = its own timestamp meets both again, and its periods, and so its outcome, are the
    same. Slips share a call (``now``: the newest timestamp among them) while that still holds
    for each: their boards' periods at the oldest of their timestamps are those at ``now``
    (periods only move forward) and the oldest is within the horizon."""
    group: list[dict[str, str]] = []
    now, oldest = 0, 0
    first: dict[str, int] = {}  # board -> the oldest timestamp of its slips in the group

    def labels(board: str, ts: int) -> tuple[str, ...]:
        d = definition_of(board)
        return () if d is None else tuple(period(d, w, ts).label for w in d.windows)

    for fields in entries:
        ts = _int_or_none(fields.get("ts", ""))
        board = fields.get("board", "")
        if ts is None or definition_of(board) is None:  # refused, now as then: on its own
            if group:
                yield now, group
            yield (ts or 0), [fields]
            group, first = [], {}
            continue
        if group:
            new_now, new_oldest = max(now, ts), min(oldest, ts)
            held = {**first, board: min(first.get(board, ts), ts)}
            if new_now - new_oldest <= horizon_ms and all(labels(b, t) == labels(b, new_now) for b, t in held.items()):
                group.append(fields)
                now, oldest, first = new_now, new_oldest, held
                continue
            yield now, group
        group, now, oldest, first = [fields], ts, ts, {board: ts}
    if group:
        yield now, group


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


async def replay(lb: Leaderboard, entries: list[dict[str, str]], now: int, restored: Restored) -> None:
    results = await lb.submit_batch(entries, now=now, rows=False, announce=lb.keys.replay_channel, replay=True)
    restored.replayed += len(entries)
    for result in results:
        if result.status == "ok":
            restored.applied += 1
        elif result.status == "duplicate":
            restored.duplicates += 1
        else:
            code = result.code or "error"
            restored.refused[code] = restored.refused.get(code, 0) + 1
