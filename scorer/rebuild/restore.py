"""The rebuild's course: refuse a Redis that holds the game already, fold the log's prefix (in
worker processes: parts.py), write the folded state, replay the newest submissions through
``lb_submit`` (writes.py), report (report.py). The package's docstring says what comes back.
"""

from __future__ import annotations

import time
from typing import TextIO

from leaderboard import GameConfig, Leaderboard, now_ms
from leaderboard.keys import HOUR_MS
from leaderboard.transport import RedisClient

from .. import auditlog
from ..durable import Store
from ..durable.audit import AuditStore
from ..durable.fold import newest_ordered
from ..durable.records import PARTS, Position
from . import writes
from .parts import FoldTask, fold_in_parts
from .report import Progress, Restored


class RebuildRefused(Exception):
    """The target Redis already holds data of the game (and ``force`` was not given)."""


# Keys a game keeps that are not state a rebuild restores: their presence does not make a Redis
# "non-empty" (a scorer started on the empty Redis creates the queue and its group at once).
def _operational(config: GameConfig) -> tuple[set[str], tuple[str, ...]]:
    k = config.keys
    # (the gateways' heartbeats come back within seconds of a FLUSHALL while they run)
    exact = {k.submissions, k.queued, k.dead_letters, k.publish_lease, k.published, k.journal, k.heartbeats}
    return exact, (f"{k.prefix}:latest:", k.refused(0).removesuffix("0"))


async def existing_keys(redis: RedisClient, config: GameConfig, *, limit: int = 5) -> list[str]:
    """Up to ``limit`` keys of the game that a rebuild would write over."""
    exact, prefixes = _operational(config)
    found: list[str] = []
    async for key in redis.scan_iter(match=f"{config.keys.prefix}:*", count=1000):
        if key in exact or key.startswith(prefixes):
            continue
        found.append(key)
        if len(found) >= limit:
            break
    return found


async def rebuild(
    redis: RedisClient,
    store: Store,
    config: GameConfig,
    *,
    force: bool = False,
    batch: int = 1_000,
    replay: int | None = None,
    progress_to: TextIO | None = None,
    now: int | None = None,
    workers: int = 2,
) -> Restored:
    """Restore the boards of ``config``'s game from ``store`` into ``redis`` (the package's
    docstring says what comes back). ``workers``: processes folding the log, each a part of the
    players (one of records.PARTS; 1: folded in this one)."""
    if workers not in PARTS:
        raise ValueError(f"workers must be one of {', '.join(map(str, PARTS))}, got {workers}")
    started = time.monotonic()
    present = await existing_keys(redis, config)
    if present and not force:
        raise RebuildRefused(
            f"Redis already holds data of game {config.game!r} (e.g. {', '.join(present)}); "
            "rebuild into an empty one, or pass --force to write over it"
        )
    lb = Leaderboard(redis, config)
    await lb.load()
    now = now_ms() if now is None else now
    game = config.game
    idem_ms = config.idempotency_s * 1000
    # Folded: a prefix of the log in applied order, up to the last submission lb_submit would
    # refuse as too old, and at least all but the newest ``replay``.
    cut = await store.last_before(game, now - idem_ms)
    total = await store.count(game)
    fold_first = total - (config.activity_maxlen if replay is None else replay)
    restored = Restored()
    progress = Progress(total, progress_to)
    # The journaled actions fold with the submissions, in the order Redis applied both. Replaying
    # an action through its function would journal it again, so every submission applied before
    # the newest action whose place matters (fold.ordered) is folded; only later ones replay.
    actions = await store.actions(game)
    through = await _fold_through(store, game, cut, fold_first, newest_ordered(actions))
    # The fold is per player: each part of the players is read and folded apart, in a process of
    # its own (the fold is Python, bound by one core), and the parts' states add up.
    task = FoldTask(config, through, now, _alive_from(now, idem_ms), max(batch, 5_000))
    folded = await fold_in_parts(task, store, actions, workers, progress.advance)
    folder = folded.folder
    restored.folded, restored.board_rows = folded.folded, folded.board_rows
    folder.actions = len(actions)  # the tournaments' definitions were folded in every part
    # The defined boards' slips are not folded: each goes through lb_submit at the moment it was
    # first applied, before the tombstones and close markers the folded state writes (they were
    # not there yet when it was applied; their boards are apart from the folded ones).
    await writes.write_tournaments(lb, folder, now)
    await writes.replay_slips(lb, folder, await store.slips(game), actions, restored)
    # before the first replayed one: it builds on the folded state
    await writes.write_folded(lb, folder, folded.seen, await store.names(game), restored, now)
    pending: list[dict[str, str]] = []
    async for records in store.scan(game, after=through, batch=batch):
        for record in records:
            if record.tournament and record.tournament not in folder.state.tournaments:
                restored.tournament_slips += 1  # its definition is not in the log: lb_submit would refuse it
                continue
            pending.append(writes.fields_of(record))
            if len(pending) >= batch:
                await writes.replay(lb, pending, now, restored)
                pending = []
        progress.advance(len(records))
    if pending:
        await writes.replay(lb, pending, now, restored)
    progress.finish()
    # the moderators' audit log, as it was shown (its entries' ids and all)
    restored.audit = await auditlog.restore(redis, AuditStore(store), config)
    if folder.refused:
        restored.refused["points_out_of_range (fold)"] = folder.refused
    restored.tournament_slips += folder.tournament_slips
    restored.seconds = time.monotonic() - started
    return restored


async def _fold_through(
    store: Store, game: str, cut: Position | None, fold_first: int, newest_action: int | None
) -> Position | None:
    """The last position folded (None: none). The folded part is a prefix of the log in applied
    order, the longest of: up to the last submission lb_submit would refuse as too old (``cut``),
    all but the newest ``replay`` (``fold_first`` rows), every one applied before the newest
    ordered action (Redis's clock, microseconds)."""
    ends = [cut]
    if fold_first > 0:
        ends.append(await store.position(game, fold_first - 1))
    if newest_action is not None:
        # after every row applied in the microsecond before it (an index and a seq above any real
        # one, within both backends' column types)
        ends.append((newest_action - 1, 2**31 - 1, 2**62))
    return max((end for end in ends if end is not None), default=None)


def _alive_from(now: int, idem_ms: int) -> int:
    """The first timestamp whose idempotency bucket (its hour's) is still alive at ``now``."""
    hour = (now - idem_ms) // HOUR_MS - 1
    while ((hour + 1) * HOUR_MS + idem_ms) // 1000 <= now // 1000:
        hour += 1
    return hour * HOUR_MS
