"""The badge worker: reads the activity stream (an entry per submission batch or moderation action:
leaderboard/activity.py) through its own consumer group and awards badges.

An award is a set membership (``SADD lb:{g}:badges:<player> <badge>``), so awarding is idempotent
by construction: an entry delivered twice — claimed after a crash between award and ack, or read
by a consumer that never acknowledged it — adds nothing the second time, and only awards SADD
reports as new are counted.

Awards are state a rebuild from the durable log must bring back (they depend on ranks at the
time, which no log can recompute), so an award a player does not hold yet is also appended to
the game's journal (``lb:{g}:journal``, fn ``badge``) in the same MULTI as its SADD: the scorer
records it with the other journaled changes (scorer/journal.py). Which awards are new is read
first (one pipelined SISMEMBER round trip): a badge already held is not journaled again, so the
journal grows with first awards only; two workers racing on one award journal it twice, which
the rebuild's union absorbs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import orjson

from leaderboard import RedisClient, activity
from leaderboard.keys import defined_of

from .settings import ScorerSettings
from .stats import Stats
from .stream import Batch, GroupWorker

GROUP = "badges"
JOURNAL_MAXLEN = 100_000  # the function library's cap on the journal (lua/text.lua)


def awards(entry: Mapping[str, str], thresholds: Sequence[tuple[str, int]], top_n: int | None) -> list[str]:
    """The badges one activity entry earns (pure): each threshold its points reach, and
    ``top<N>`` when its rank on its first board is within N: the game's (the first window's
    global board), or a defined board's first window, whose badge names the board
    (``<id>:top<N>``: a top place on one board is not one on another).

    Thresholds apply to the points of one submission (with ``incr``, one match's delta); a
    defined board's slip carries key values, not points, so it earns no threshold badge."""
    points, rank, board = entry.get("points", ""), entry.get("rank", ""), entry.get("board", "")
    out = []
    if points.isdigit():
        out += [name for name, minimum in thresholds if int(points) >= minimum]
    if top_n is not None and rank.isdigit() and 1 <= int(rank) <= top_n:
        defined = defined_of(board)
        out.append(f"top{top_n}" if defined is None else f"{defined}:top{top_n}")
    return out


class BadgeWorker(GroupWorker):
    def __init__(self, redis: RedisClient, settings: ScorerSettings, stats: Stats | None = None) -> None:
        keys = settings.game.keys
        # a new group starts from the oldest activity still kept
        super().__init__(redis, settings, stream=keys.activity, group=GROUP, start_id="0", stats=stats)
        self.keys = keys
        self.thresholds = settings.badge_thresholds
        self.top_n = settings.game.top_n if settings.badge_top_n else None

    async def handle(self, batch: Batch) -> None:
        earned = list(
            dict.fromkeys(
                (event["player"], badge)
                for event in activity.events(batch)
                if event.get("player")
                for badge in awards(event, self.thresholds, self.top_n)
            )
        )
        new: list[tuple[str, str]] = []
        if earned:
            async with self.redis.pipeline(transaction=False) as pipe:
                for player, badge in earned:
                    pipe.sismember(self.keys.badges(player), badge)
                held = await pipe.execute()
            new = [award for award, has in zip(earned, held, strict=True) if not has]
        async with self.redis.pipeline(transaction=True) as pipe:
            for player, badge in earned:
                pipe.sadd(self.keys.badges(player), badge)
            if new:
                # the journal's clock is Redis's; a badge's order against other changes does not
                # matter (awards only accumulate), so the worker's clock stands in for it
                pipe.xadd(
                    self.keys.journal,
                    {
                        "fn": "badge",
                        "at": str(time.time_ns() // 1000),
                        "args": orjson.dumps([x for award in new for x in award]).decode(),
                    },
                    maxlen=JOURNAL_MAXLEN,
                    approximate=True,
                )
            pipe.xack(self.stream, self.group, *(sid for sid, _ in batch))
            replies = await pipe.execute()
        self.stats.badges_awarded += sum(int(n) for n in replies[: len(earned)])
