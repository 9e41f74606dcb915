"""The submissions queue: game servers (and gateways, for ``server`` connections) file score
slips into a Redis Stream that the scorer consumes. The queue refuses new slips when its backlog
is full instead of trimming ones nobody has applied yet. The check and the appends are one call of
``lb_enqueue``, and the scorer deletes entries once applied, so the stream's length is exactly the
number of slips still waiting::

    queue = Queue(redis, config, backlog_max=1_000_000)
    stream_id = await queue.submit(Submission("m-1", "mia", 120, now_ms()))
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis

from .config import GameConfig
from .library import Leaderboard
from .submission import Submission
from .transport import now_ms


class Queue:
    def __init__(self, redis: aioredis.Redis, config: GameConfig, *, backlog_max: int = 1_000_000) -> None:
        self.lb = Leaderboard(redis, config)
        self.config = config
        self.backlog_max = backlog_max
        self.stream = config.keys.submissions

    async def submit(self, submission: Submission) -> str:
        [stream_id] = await self.submit_many([submission])
        return stream_id

    async def submit_many(self, submissions: Sequence[Submission]) -> list[str]:
        """Check the clock and the game's limits, then append every submission in one call;
        returns their stream ids. The rest of the rules held when each Submission was made.

        Raises InvalidSubmission for the first bad one (nothing is appended then) and
        BacklogFull when the stream already holds ``backlog_max`` entries."""
        if not submissions:
            return []
        now, rules = now_ms(), self.config.rules()
        for sub in submissions:
            sub.check(now_ms=now, rules=rules)
        return await self.lb.enqueue([sub.fields() for sub in submissions], backlog_max=self.backlog_max)
