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
from redis.exceptions import ResponseError

from .config import GameConfig
from .errors import BacklogFull
from .library import execute_packed, now_ms
from .submission import Submission


class Queue:
    def __init__(self, redis: aioredis.Redis, config: GameConfig, *, backlog_max: int = 1_000_000) -> None:
        self.redis = redis
        self.config = config
        self.backlog_max = backlog_max
        self.stream = config.keys.submissions

    async def submit(self, submission: Submission) -> str:
        [stream_id] = await self.submit_many([submission])
        return stream_id

    async def submit_many(self, submissions: Sequence[Submission]) -> list[str]:
        """Validate, then append every submission (pipelined); returns their stream ids.

        Raises InvalidSubmission for the first bad one (nothing is appended then) and
        BacklogFull when the stream already holds ``backlog_max`` entries."""
        now, rules = now_ms(), self.config.rules()
        entries = [sub.fields() for sub in submissions]
        for fields in entries:  # every rule, also for objects built without parse()
            Submission.parse(fields, now_ms=now, rules=rules)
        if not entries:
            return []
        args: list[str | int] = [self.backlog_max, len(entries)]
        for fields in entries:
            args.append(len(fields))
            for item in fields.items():
                args += item
        try:
            [ids] = await execute_packed(self.redis, ("FCALL", "lb_enqueue", 1, self.stream, *args))
        except ResponseError as exc:
            code, _, message = str(exc).partition(" ")
            if code == "backlog_full":
                raise BacklogFull(f"{message}; retry later") from None
            raise
        return [str(i) for i in ids]
