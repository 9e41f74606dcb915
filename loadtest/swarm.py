"""A swarm: N sockets spread over several client processes (``loadtest.wsworker``), each on its
own loopback source address, so neither the per-process descriptor limit nor a source address's
ephemeral ports run out::

    async with Swarm(url, sockets=20_000, rate=1000) as swarm:
        await swarm.wait_open(timeout=60)
        totals = swarm.totals()            # summed from the workers' last ticks
        reports = await swarm.report(expected_keys, since=t0)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import orjson

from fleet.children import die_with_parent, stop_process
from leaderboard.lifecycle import Service

from .wsworker import WorkerSettings

PER_WORKER = 8000  # sockets per client process: well under the 20k descriptor cap
COUNTERS = (
    "open",
    "attempts",
    "opened",
    "failed",
    "frames",
    "snaps",
    "ranks",
    "announces",
    "drops",
    "refused",
    "failed_connect",
    "failed_timeout",
    "failed_closed",
    "failed_tls",
)
STALLS = ("cpu_s", "wait_s", "gc_n", "gc_s")  # cumulative per process (wsworker.Stalls), summed


def parse_ws_url(url: str) -> tuple[str, int, str]:
    """(host, port, request target: path and query) of a ws:// or wss:// URL on a loopback
    address; anything else is refused."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname or parts.port is None:
        raise ValueError(f"expected ws://127.x.x.x:PORT/path (or wss://), got {url!r}")
    if not parts.hostname.startswith("127."):
        raise ValueError("the load test only sends traffic to loopback addresses (127.0.0.0/8)")
    return parts.hostname, parts.port, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def url_game(url: str) -> str | None:
    """The game a gateway URL names (``/ws?game=arena``), or None: the gateway's default game."""
    games = parse_qs(urlsplit(url).query).get("game")
    return games[-1] if games else None


def with_game(url: str, game: str) -> str:
    """``url`` naming ``game`` (``?game=``): a gateway serving several games puts a socket that
    names none on its default game, which need not be the one the load writes into."""
    parts = urlsplit(url)
    if url_game(url) is not None:
        return url
    query = "&".join(q for q in (parts.query, urlencode({"game": game})) if q)
    return urlunsplit(parts._replace(query=query))


def plan(sockets: int, workers: int = 0) -> list[int]:
    """Sockets per worker process: ``workers`` of them (0: as few as PER_WORKER allows, min 1)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    per_cap = min(PER_WORKER, max(100, hard - 200))
    k = workers or max(1, math.ceil(sockets / per_cap))
    if sockets / k > per_cap:
        raise ValueError(f"{sockets} sockets over {k} processes exceed {per_cap} per process")
    return [sockets // k + (1 if i < sockets % k else 0) for i in range(k)]


class Swarm(Service):
    def __init__(
        self,
        url: str,
        *,
        sockets: int,
        rate: float = 1000.0,
        workers: int = 0,
        first_source: int = 2,
        reconnect: bool = False,
        token_secret: str = "",
        token_share: float = 0.0,
        first_index: int = 0,
        handshake_timeout: float = 15.0,
        player_prefix: str = "p",
        spread: Sequence[str] = (),
        nice: int = 0,
        ca_file: str = "",
    ) -> None:
        """``spread``: URLs the client processes take in turn instead of ``url`` (straight to each
        gateway of a fleet whose gateways listen on addresses of their own). ``nice``: the
        client processes' scheduling priority increment (``wsworker.yield_cores``). ``ca_file``:
        with wss:// URLs, the only CA trusted (else the system's)."""
        targets = [parse_ws_url(u) for u in spread] or [parse_ws_url(url)]
        if spread and not workers:  # as many processes per URL, so each gets the same share
            workers = math.ceil(len(plan(sockets)) / len(targets)) * len(targets)
        counts = plan(sockets, workers)
        self.sockets = sockets
        self.settings: list[WorkerSettings] = []
        first = first_index
        for i, count in enumerate(counts):
            source = f"127.0.{(first_source + i) // 254}.{(first_source + i) % 254 + 1}"
            host, port, path = targets[i % len(targets)]
            self.settings.append(
                WorkerSettings(
                    host=host,
                    port=port,
                    path=path,
                    source=source,
                    count=count,
                    first=first,
                    rate=rate / len(counts) if rate > 0 else 0.0,
                    reconnect=reconnect,
                    token_secret=token_secret,
                    token_share=token_share,
                    handshake_timeout=handshake_timeout,
                    player_prefix=player_prefix,
                    nice=nice,
                    tls=urlsplit(spread[i % len(spread)] if spread else url).scheme == "wss",
                    ca_file=ca_file,
                )
            )
            first += count
        self.procs: list[asyncio.subprocess.Process] = []
        self.last: list[dict[str, Any]] = [{} for _ in counts]
        self.live_lat: list[float] = []
        # per tick of any process: (its wall time, longest GC pause, longest loop lag) since its last
        self.stall_ticks: list[tuple[float, float, float]] = []
        self.priority_warnings: set[str] = set()  # the workers' yield_cores warnings, distinct
        self._readers: list[asyncio.Task[None]] = []
        self._reports: list[asyncio.Future[dict[str, Any]]] = []
        self._missing: list[asyncio.Future[int]] = []
        self.started = 0.0

    @property
    def sources(self) -> list[str]:
        return [s.source for s in self.settings]

    async def start(self) -> Swarm:
        self.started = time.time()
        for i, s in enumerate(self.settings):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "loadtest.wsworker",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                preexec_fn=die_with_parent,
                # a niced worker needs an autogroup of its own for its nice to count against the
                # gateways' (wsworker.yield_cores); it then gets no terminal signals: Ctrl-C
                # reaches the parent, which stops it on stdin, or else die_with_parent does
                start_new_session=s.nice != 0,
                limit=1 << 28,
            )
            assert proc.stdin is not None
            # the settings (with the token secret) go through the pipe, never the command line
            proc.stdin.write(orjson.dumps(asdict(s)) + b"\n")
            await proc.stdin.drain()
            self.procs.append(proc)
            self._readers.append(asyncio.create_task(self._read(i, proc)))
        return self

    async def _read(self, i: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            msg = orjson.loads(line)
            if msg["ev"] == "started":
                if msg["priority_warning"]:
                    self.priority_warnings.add(msg["priority_warning"])
            elif msg["ev"] == "tick":
                self.live_lat.extend(msg.pop("lat"))
                self.stall_ticks.append((msg["t"], msg["gc_max_s"], msg["lag_max_s"]))
                self.last[i] = msg
            elif msg["ev"] == "report":
                self.live_lat.extend(msg.pop("lat"))
                self.stall_ticks.append((msg["t"], msg["gc_max_s"], msg["lag_max_s"]))
                self.last[i] = {k: msg[k] for k in (*COUNTERS, *STALLS)}
                if i < len(self._reports) and not self._reports[i].done():
                    self._reports[i].set_result(msg)
            elif msg["ev"] == "missing" and i < len(self._missing) and not self._missing[i].done():
                self._missing[i].set_result(int(msg["missing"]))

    def totals(self) -> dict[str, int]:
        return {k: sum(int(t.get(k, 0)) for t in self.last) for k in COUNTERS}

    def stalls(self) -> dict[str, float]:
        """The client processes' CPU, run-queue wait and GC pauses so far, summed (seconds, count)."""
        return {k: sum(float(t.get(k, 0.0)) for t in self.last) for k in STALLS}

    def worst_stalls(self, since: float, until: float) -> tuple[float, float]:
        """(longest GC pause, longest event-loop lag) of any client process between two wall
        times, in seconds, from the ticks that reported them."""
        ticks = [(gc, lag) for t, gc, lag in self.stall_ticks if since <= t <= until]
        return max((g for g, _ in ticks), default=0.0), max((lag for _, lag in ticks), default=0.0)

    def alive(self) -> bool:
        return all(p.returncode is None for p in self.procs)

    async def wait_open(self, timeout: float, *, want: int | None = None) -> bool:
        """Until every socket has opened or failed (or ``want`` are open); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.totals()
            if want is not None and t["open"] >= want:
                return True
            if want is None and len(self.last) == len(self.procs) and t["opened"] + t["failed"] >= self.sockets:
                return True
            if not self.alive():
                raise RuntimeError("a load-test client process died")
            await asyncio.sleep(0.1)
        return False

    async def report(self, expected: list[str], since: float, timeout: float = 60.0) -> list[dict[str, Any]]:
        self._reports = self._ask("report", expected, since)
        return list(await asyncio.wait_for(asyncio.gather(*self._reports), timeout))

    async def missing(self, expected: list[str], since: float, timeout: float = 60.0) -> int:
        """The snapshots in ``expected`` not (yet) read by the sockets open since before
        ``since`` (``Worker.unseen``), all processes together: a cheap ``report``."""
        self._missing = self._ask("missing", expected, since)
        return sum(await asyncio.wait_for(asyncio.gather(*self._missing), timeout))

    def _ask(self, cmd: str, expected: list[str], since: float) -> list[asyncio.Future[Any]]:
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[Any]] = [loop.create_future() for _ in self.procs]
        line = orjson.dumps({"cmd": cmd, "expected": expected, "since": since}) + b"\n"
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(line)
        return answers

    async def _close(self) -> None:
        """Stop every worker: ask, then wait, then kill what hangs."""
        for proc in self.procs:
            if proc.stdin is not None and proc.returncode is None:
                with contextlib.suppress(OSError, RuntimeError):
                    proc.stdin.write(b'{"cmd":"stop"}\n')
                    proc.stdin.close()
        for proc in self.procs:
            await stop_process(proc, 10, sig=None)  # asked above, on stdin
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
