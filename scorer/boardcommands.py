"""The board commands of ``python -m scorer``: ``tournament create|join|list``, ``board
create|list|show|update|delete|apply|schema`` (definitions, and boards as code: boardfiles.py)
and ``top`` (a board's top N, read as the socket and the HTTP API read it)."""

from __future__ import annotations

import argparse

import orjson

from leaderboard import Leaderboard, boards, connect, replies
from leaderboard import protocol as p
from leaderboard.auth import Identity
from leaderboard.boardschema import file_schema
from leaderboard.definitions import default_window
from leaderboard.errors import InvalidBoard

from .boardfiles import apply_files
from .cli import Answer, Subparsers, UsageError, iso, parse_time, redis_option
from .cli import parser as _parser
from .settings import ScorerSettings

# ---------------------------------------------------------------- tournaments


def tournament_parser(sub: Subparsers, epilog: str) -> None:
    t = _parser(
        sub,
        "tournament",
        "create a tournament, enter players, list tournaments",
        "Live tournaments: boards t-<id> with a start, an end and an entry list.",
        epilog,
    )
    tsub = t.add_subparsers(dest="action", metavar="{create,join,list}", required=True)
    c = tsub.add_parser("create", help="create a tournament (again with the same bounds: no-op)")
    c.add_argument("id", help="tournament id (1-32 of A-Z a-z 0-9 _ -); its boards are window t-<id>")
    c.add_argument("--start", required=True, help="start: ms since the epoch, or ISO 8601 UTC")
    c.add_argument("--end", required=True, help="end (exclusive): ms since the epoch, or ISO 8601 UTC")
    j = tsub.add_parser("join", help="enter players (before the start or while it runs)")
    j.add_argument("id", help="tournament id")
    j.add_argument("players", nargs="+", help="player ids")
    tsub.add_parser("list", help="every tournament with its start and end")
    redis_option(c, j, t)


async def tournament(settings: ScorerSettings, args: argparse.Namespace) -> str:
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        lb = Leaderboard(redis, settings.game.served[0])  # with LB_GAMES: the first game
        if args.action == "create":
            spec = await lb.create_tournament(args.id, parse_time(args.start), parse_time(args.end))
            period = spec.period(0)
            return f"tournament {args.id}: board window {spec.name}, {iso(period.start_ms)} to {iso(period.end_ms)}"
        if args.action == "join":
            added = await lb.join(args.id, args.players)
            return f"tournament {args.id}: {added} of {len(args.players)} players newly entered"
        lines = []
        for spec in await lb.tournaments.all():
            period = spec.period(0)
            lines.append(f"{spec.tournament}\t{spec.name}\t{iso(period.start_ms)}\t{iso(period.end_ms)}")
        return "\n".join(lines) or "no tournaments"
    finally:
        await redis.aclose()


# ---------------------------------------------------------------- board definitions


def board_parser(sub: Subparsers, epilog: str) -> None:
    b = _parser(
        sub,
        "board",
        "create, list, show, update or delete board definitions",
        "Board definitions: keys and directions, operator, tie rule, windows, rank mode, top N "
        "(docs/data-model.md). Every scorer and gateway sees a change within a tick.",
        epilog,
    )
    bsub = b.add_subparsers(dest="action", metavar="{create,list,show,update,delete,apply,schema}", required=True)
    c = bsub.add_parser("create", help="create a board from its definition (JSON; again the same: no-op)")
    c.add_argument("definition", help='definition JSON, e.g. {"id":"tower","keys":[{"name":"floor"}]}, or @file')
    u = bsub.add_parser("update", help="replace a definition (its order-fixing fields cannot change)")
    u.add_argument("definition", help="definition JSON, or @file")
    s = bsub.add_parser("show", help="a board's definition as JSON, with its encoding")
    s.add_argument("id", type=p.board_id, help="board id (speedrun, or board:speedrun)")
    d = bsub.add_parser("delete", help="delete a board's definition")
    d.add_argument("id", type=p.board_id, help="board id (speedrun, or board:speedrun)")
    bsub.add_parser("list", help="every board: id, encoding, keys, version")
    a = bsub.add_parser("apply", help="boards as code: plan and apply definition files (exit 2 if any is refused)")
    a.add_argument("files", nargs="+", metavar="FILE", help="board definition files (JSON, one definition each)")
    a.add_argument("--dry-run", action="store_true", help="show the plan, apply nothing")
    bsub.add_parser("schema", help="the JSON Schema of a board file (docs/board-definition.schema.json)")
    redis_option(b, c, u, s, d, a)


def _definition_text(text: str) -> str:
    if not text.startswith("@"):
        return text
    try:
        with open(text[1:], encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {text[1:]}: {exc.strerror}") from None


async def board(settings: ScorerSettings, args: argparse.Namespace) -> str | Answer:
    if args.action == "schema":
        return orjson.dumps(file_schema(), option=orjson.OPT_INDENT_2).decode()
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        lb = Leaderboard(redis, settings.game.served[0])  # with LB_GAMES: the first game
        if args.action == "apply":
            return Answer(*await apply_files(lb, args.files, dry_run=args.dry_run))
        if args.action == "create":
            made = await lb.create_board(boards.parse(_definition_text(args.definition)))
            return f"board {made.id}: created ({made.encoding} encoding)"
        if args.action == "update":
            made = await lb.update_board(boards.parse(_definition_text(args.definition)))
            return f"board {made.id}: version {made.version}"
        if args.action == "delete":
            await lb.delete_board(args.id)
            return f"board {args.id}: deleted"
        await lb.boards.refresh()
        if args.action == "show":
            found = lb.boards.get(args.id)
            if found is None:
                raise InvalidBoard("unknown_board", f"no board {args.id!r}")
            return orjson.dumps(found.shown(), option=orjson.OPT_SORT_KEYS).decode()
        return "\n".join(
            f"{d.id}\t{d.encoding}\t{','.join(f'{k.name}:{k.direction}' for k in d.keys)}\tv{d.version}"
            for d in lb.boards.all()
        )
    finally:
        await redis.aclose()


def top_parser(sub: Subparsers, epilog: str) -> None:
    t = _parser(
        sub,
        "top",
        "a board's top N as JSON (the socket's top reply)",
        "A board's top N, read as the socket and the HTTP API read it: the same parser, the same reply, the same "
        "error codes (docs/protocol.md). --board names the game's own board (global, region:<name>, "
        "mode:<name>) or a defined one (speedrun, or board:speedrun).",
        epilog,
    )
    t.add_argument("--board", default="global", help="the board (default: global)")
    t.add_argument("--window", help="the window (default: the board's first; the game's default for its own)")
    t.add_argument("--period", help="previous, or a period label such as 2026-W48 (default: the current)")
    t.add_argument("-n", type=int, default=10, help="entries (default 10)")
    t.add_argument("--game", help="the game (default: the first of LB_GAMES, else LB_GAME)")
    redis_option(t)


async def top(settings: ScorerSettings, args: argparse.Namespace) -> str:
    served = {c.game: c for c in settings.game.served}
    config = served.get(args.game or next(iter(served)))
    if config is None:
        raise p.ProtocolError("unknown_game", f"game {args.game!r} is not served here ({', '.join(served)})")
    msg = {"type": "top", "board": args.board, "n": args.n}
    msg |= {name: getattr(args, name) for name in ("window", "period") if getattr(args, name) is not None}
    redis = connect(settings.redis_url, pool=settings.redis_pool)
    try:
        game = replies.Game.of(Leaderboard(redis, config))
        await game.lb.boards.refresh()  # a process of one request: its registry read once
        req = replies.parse(game, msg, default_window=default_window(game.lb.config, ""))
        # an operator's read: a game server's, as a trusted process reads
        body = await replies.answer(game, Identity("server", "operator"), req)
        return orjson.dumps(orjson.loads(body), option=orjson.OPT_INDENT_2).decode()
    finally:
        await redis.aclose()
