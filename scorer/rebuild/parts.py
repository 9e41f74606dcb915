"""The fold of the log's prefix, one part of the players at a time, each in a worker process.

The fold is per player (``durable/records.py``: ``part_of``, which each backend also computes in
SQL), so each part of the players is read and folded apart, the journaled actions shared between
them (``fold.shares``), and their states add up (``ActionFolder.merge``). Reading and folding
are Python, bound by one core each: a process per part. A worker is a new interpreter (not
multiprocessing's, which would import the caller's main module again) that reads its task from
its stdin, opens a store connection of its own, and writes to its stdout a frame per chunk
folded (the progress bar moves while it works), then what it folded, pickled.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass

from leaderboard import GameConfig
from leaderboard.keys import HOUR_MS

from ..durable import ActionFolder, Store, StoreError, open_store
from ..durable.fold import shares
from ..durable.records import Action, Part, Position

# a worker's frames on its stdout: (b"f", submissions folded) per chunk, then (b"r", length)
# and the pickled FoldedPart
_FRAME = struct.Struct("<cQ")


@dataclass(slots=True)
class FoldedPart:
    """What one part of the players' fold left (pickled back from its worker process)."""

    folder: ActionFolder
    seen: dict[int, list[str]]  # hour -> folded ids whose bucket is still alive
    folded: int
    board_rows: int


@dataclass(frozen=True, slots=True)
class FoldTask:
    """The fold of the log's prefix through ``through``, one part of the players at a time."""

    config: GameConfig
    through: Position | None
    now: int
    alive_from: int  # the first timestamp whose idempotency bucket is still alive
    batch: int

    async def fold(
        self, store: Store, part: Part | None, actions: list[Action], folded: Callable[[int], None]
    ) -> FoldedPart:
        """``folded(n)`` after each chunk of ``n`` submissions folded (the progress bar)."""
        game, now_s = self.config.game, self.now // 1000
        folder = ActionFolder(self.config, actions)
        out = FoldedPart(folder, {}, 0, 0)
        async for rows in store.board_rows(game, now_s=now_s, part=part):
            folder.load(rows)
            out.board_rows += len(rows)
        if self.through is not None:
            seen, alive_from = out.seen, self.alive_from
            async for records in store.scan(game, through=self.through, part=part, batch=self.batch):
                folder.apply(records)
                for record in records:
                    if record.ts >= alive_from:
                        seen.setdefault(record.ts // HOUR_MS, []).append(record.id)
                out.folded += len(records)
                folded(len(records))
        folder.finish()  # the actions after its last folded submission: all before the first replayed one
        return out

    async def fold_apart(
        self, url: str, part: Part, actions: list[Action], folded: Callable[[int], None]
    ) -> FoldedPart:
        """``fold`` in a worker process of its own (``work``), on a connection of its own."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from scorer.rebuild.parts import work; work()",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        result: FoldedPart | None = None
        try:
            proc.stdin.write(pickle.dumps((self, url, part, actions), protocol=pickle.HIGHEST_PROTOCOL))
            proc.stdin.close()
            with contextlib.suppress(asyncio.IncompleteReadError):  # a worker that failed: below
                while result is None:
                    kind, n = _FRAME.unpack(await proc.stdout.readexactly(_FRAME.size))
                    if kind == b"f":
                        folded(n)
                    else:
                        result = pickle.loads(await proc.stdout.readexactly(n))
            await proc.wait()
        finally:
            if proc.returncode is None:  # cancelled: another part failed
                proc.kill()
                await proc.wait()
        if proc.returncode != 0 or result is None:  # what failed it is on the inherited stderr, above
            raise StoreError(f"the rebuild's worker for part {part[0]} of {part[1]} failed (exit {proc.returncode})")
        return result


async def fold_in_parts(
    task: FoldTask, store: Store, actions: list[Action], workers: int, folded: Callable[[int], None]
) -> FoldedPart:
    """``task`` folded in ``workers`` parts of the players, each in a worker process (1: in this
    one), the journaled actions shared between them; their states added up into one."""
    if workers == 1:
        return await task.fold(store, None, actions, folded)
    actions_of = shares(actions, workers)
    running = [
        asyncio.ensure_future(task.fold_apart(store.url, (i, workers), actions_of[i], folded)) for i in range(workers)
    ]
    try:
        await asyncio.gather(*running)
    finally:
        for worker in running:
            worker.cancel()
    whole = FoldedPart(ActionFolder(task.config), {}, 0, 0)
    for part in (worker.result() for worker in running):
        whole.folder.merge(part.folder)
        for hour, ids in part.seen.items():
            whole.seen.setdefault(hour, []).extend(ids)
        whole.folded += part.folded
        whole.board_rows += part.board_rows
    return whole


def work() -> None:
    """A worker process of ``FoldTask.fold_apart`` (its errors go to the inherited stderr)."""
    task: FoldTask
    task, url, part, actions = pickle.load(sys.stdin.buffer)

    out = sys.stdout.buffer

    def folded(n: int) -> None:
        out.write(_FRAME.pack(b"f", n))
        out.flush()

    async def run() -> FoldedPart:
        store = open_store(url)
        await store.open()
        try:
            return await task.fold(store, part, actions, folded)
        finally:
            await store.close()

    result = pickle.dumps(asyncio.run(run()), protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_FRAME.pack(b"r", len(result)) + result)
    out.flush()
