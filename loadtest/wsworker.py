"""One load-test client process: thousands of WebSocket sockets from one 127.0.0.x address.

Started by ``loadtest.swarm`` as ``python -m loadtest.wsworker``; it talks JSON lines:

* stdin, first line: the settings (``WorkerSettings`` fields); then commands
  ``{"cmd": "report", "expected": [key…], "since": t}`` and ``{"cmd": "stop"}``;
* stdout: ``{"ev": "started", "priority_warning": text}`` first (``yield_cores``: "" when
  ``nice`` took effect or is 0), then ``{"ev": "tick", …}`` once per ``tick`` seconds (counters,
  the latencies seen since the last tick, and what held the process: ``Stalls``),
  ``{"ev": "report", …}`` in answer to ``report``.

Every socket opens at its slot of the ramp (``rate`` per second), answers protocol pings, and
notes for every snapshot its identity, its arrival time (the kernel's receive timestamp: when the
gateway delivered it) and when this process read it. With ``reconnect`` on it comes back after
any drop with ``client.backoff.Backoff`` (full jitter), as the product's clients do. A snapshot's
latency (arrival wall time − its ``ts``) is taken only when the socket was open before the
snapshot was built: the stored snapshot a socket gets at connect is a replay, not a push.
The process stops on ``stop``, on EOF of stdin, or when its parent dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import resource
import select
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from client.backoff import Backoff
from client.connection import tls_context
from fleet.children import die_with_parent

from .messages import ENTRIES, snapshot_identity
from .procstat import run_queue_wait
from .stamps import stamped_socket
from .wsconn import Conn

PROBE_S = 0.05  # the loop-lag probe's period
POLL_BATCH = 1024  # ready sockets read per loop callback: the loop's other work (ticks, probe) runs between


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/ws"  # the request target: path and query (``/ws?game=arena``)
    source: str = "127.0.0.2"  # local address of every socket of this process
    count: int = 100
    first: int = 0  # global index of this process's first socket (player ids, token share)
    rate: float = 500.0  # connects per second from this process; 0 = as fast as possible
    inflight: int = 200  # handshakes in flight at once
    handshake_timeout: float = 15.0
    reconnect: bool = False  # come back after drops, with full-jitter backoff
    backoff_base: float = 0.5
    backoff_ceiling: float = 20.0
    token_secret: str = ""  # sign player tokens with this HS256 secret ...
    token_share: float = 0.0  # ... for this share of the sockets (0..1)
    player_prefix: str = "p"  # players are <prefix><global index>
    tick: float = 1.0
    # scheduling priority (nice increment, see ``yield_cores``): > 0 lets the gateways, sharing
    # the cores, write first; arrival times are the kernel's, so only the read times move
    nice: int = 0
    # wss://: TLS to the balancer, verified against the system's CAs or only this file's ("")
    tls: bool = False
    ca_file: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Stalls:
    """What held this process back, so a run can tell a slow gateway from a slow instrument:
    garbage collections (timed by ``gc.callbacks``: the loop stands still meanwhile), the event
    loop's lag (a probe every ``PROBE_S`` notes how late it woke: any stall, whatever its cause),
    CPU time, and the time its threads waited runnable for a core (the machine oversubscribed).
    Counts and times are cumulative; the two maxima are since the previous ``take``."""

    def __init__(self) -> None:
        self.gc_n = 0
        self.gc_s = 0.0
        self.gc_max = 0.0
        self.lag_max = 0.0
        self._gc_started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        pause = time.perf_counter() - self._gc_started
        self.gc_n += 1
        self.gc_s += pause
        self.gc_max = max(self.gc_max, pause)

    async def probe(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(PROBE_S)
            self.lag_max = max(self.lag_max, loop.time() - before - PROBE_S)

    def take(self) -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        figures = {
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "wait_s": run_queue_wait(os.getpid()),
            "gc_n": self.gc_n,
            "gc_s": self.gc_s,
            "gc_max_s": self.gc_max,
            "lag_max_s": self.lag_max,
        }
        self.gc_max = self.lag_max = 0.0
        return figures


class Worker:
    def __init__(self, s: WorkerSettings) -> None:
        self.s = s
        self.loop = asyncio.get_running_loop()
        self.rng = random.Random()  # one for all sockets' backoffs: a Random per socket costs 2.5 KB
        self.conns: list[Conn | None] = [None] * s.count
        self.tokens: dict[int, str] = {}
        self.sem = asyncio.Semaphore(s.inflight)
        self.tls = tls_context(s.ca_file or None) if s.tls else None
        self.stopping = False
        self.stalls = Stalls()
        # One epoll for every socket, itself watched by the loop: one loop callback reads up to
        # POLL_BATCH ready sockets, where a reader per socket would cost a loop handle each.
        self.epoll = select.epoll()
        self.by_fd: dict[int, Conn] = {}
        self.loop.add_reader(self.epoll.fileno(), self._poll)
        # counters (cumulative)
        self.attempts = self.opened = self.failed = self.frames = self.snaps = self.ranks = 0
        self.welcomes = self.drops = self.open_now = self.refused = self.announces = 0
        # failed handshakes by cause (refused = HTTP 503): no TCP connection, no 101 within the
        # handshake timeout, or closed by the server before its 101
        self.failed_connect = self.failed_timeout = self.failed_closed = 0
        self.failed_tls = 0  # wss://: the certificate did not verify, or TLS broke
        # snapshots: key -> small id; per id the ts and the arrival times of first receipts
        self.sids: dict[str, int] = {}
        self.idents: dict[bytes, tuple[str, int]] = {}  # a snapshot's head -> its identity
        self.ts: list[float] = []
        self.arrivals: list[list[float]] = []  # kernel receive timestamps
        self.reads: list[list[float]] = []  # when this process read them
        self.late: list[int] = []  # of the arrivals, those stamped with a later tick's (stamped_late)
        self.seen: list[int] = [0] * s.count  # bit sid set: socket got snapshot sid
        self.live_lat: list[float] = []
        # storm events: (wall time, socket index[, gateway])
        self.open_events: list[tuple[float, int]] = []
        self.drop_events: list[tuple[float, int, str]] = []
        self.attempt_times: list[float] = []
        # continuity per socket index, across its reconnects (rollout): the longest wait between
        # two snapshots, and per reconnect (last snapshot before, first after) to tell a snapshot
        # missed from one replaced by the stored latest it got on reconnect
        self.last_at: list[float] = [0.0] * s.count
        self.last_sid: list[int] = [-1] * s.count
        self.max_gap: list[float] = [0.0] * s.count
        self.resuming: set[int] = set()
        self.resumes: dict[int, list[tuple[int, int]]] = {}
        self.waiters: dict[int, asyncio.Future[bool]] = {}
        if s.token_secret and s.token_share > 0:
            from leaderboard.auth import issue

            exp = time.time() + 24 * 3600
            for i in range(s.count):
                g = s.first + i
                if int((g + 1) * s.token_share) > int(g * s.token_share):
                    self.tokens[i] = issue(f"{s.player_prefix}{g}", "player", s.token_secret, exp=exp)

    def watch(self, conn: Conn) -> None:
        assert conn.sock is not None
        fd = conn.sock.fileno()
        self.by_fd[fd] = conn
        self.epoll.register(fd, select.EPOLLIN)

    def unwatch(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        self.by_fd.pop(fd, None)
        with contextlib.suppress(OSError):
            self.epoll.unregister(fd)

    def _poll(self) -> None:
        by_fd = self.by_fd
        for fd, _ in self.epoll.poll(0, POLL_BATCH):
            conn = by_fd.get(fd)
            if conn is not None:
                conn.readable()

    def close(self) -> None:
        self.loop.remove_reader(self.epoll.fileno())
        self.epoll.close()

    def path_for(self, index: int) -> str:
        token = self.tokens.get(index)
        if not token:
            return self.s.path
        return f"{self.s.path}{'&' if '?' in self.s.path else '?'}token={token}"

    # --- socket events

    def handshake_done(self, conn: Conn, now: float) -> None:
        self.opened += 1
        self.open_now += 1
        self.open_events.append((now, conn.index))
        if self.last_sid[conn.index] >= 0:
            self.resuming.add(conn.index)
        waiter = self.waiters.pop(conn.index, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def handshake_failed(self, conn: Conn, retry_after: float | None) -> None:
        conn.retry_after = retry_after
        conn.why = "refused"
        self.refused += 1
        conn.abort()  # lost() counts the failure, schedules the retry

    def on_snapshot(self, conn: Conn, buf: bytes, head: int, end: int, now: float, read_at: float) -> int:
        """The snapshot in ``buf[head:end]``, arrived at ``now`` and read at ``read_at``; its
        identity is parsed once per process (every socket gets the same bytes), found again by
        the part before the entries. Returns its id when its arrival was recorded, else -1."""
        self.snaps += 1
        cut = buf.find(ENTRIES, head, end)
        top = buf[head : cut if cut > 0 else end]
        ident = self.idents.get(top)
        if ident is None:
            ident = snapshot_identity(buf[head:end])
            if ident is None:
                return -1
            if len(self.idents) >= 4096:
                self.idents.clear()
            self.idents[top] = ident
        key, ts_ms = ident
        sid = self.sids.get(key)
        if sid is None:
            sid = self.sids[key] = len(self.ts)
            self.ts.append(ts_ms / 1000)
            self.arrivals.append([])
            self.reads.append([])
            self.late.append(0)
        index = conn.index
        if index in self.resuming:
            self.resuming.discard(index)
            self.resumes.setdefault(index, []).append((self.last_sid[index], sid))
        if self.last_at[index]:
            self.max_gap[index] = max(self.max_gap[index], now - self.last_at[index])
        self.last_at[index] = now
        self.last_sid[index] = sid
        bit = 1 << sid
        seen = self.seen[conn.index]
        if seen & bit:
            return -1  # a replay on reconnect of one it already had
        self.seen[conn.index] = seen | bit
        ts = self.ts[sid]
        if conn.opened_at <= ts:  # a push, not the stored snapshot sent at connect
            self.arrivals[sid].append(now)
            self.reads[sid].append(read_at)
            self.live_lat.append(round((now - ts) * 1000, 2))
            return sid
        return -1

    def stamped_late(self, sids: list[int]) -> None:
        """Snapshots recorded from one read (-1: not recorded): those of a tick before the read's
        last got its timestamp, the last segment's, so their latency is an upper bound (the
        socket was read a tick late). Several boards of one tick share a ts: not counted."""
        recorded = [sid for sid in sids if sid >= 0]
        last = max((self.ts[sid] for sid in recorded), default=0.0)
        for sid in recorded:
            if self.ts[sid] < last:
                self.late[sid] += 1

    def lost(self, conn: Conn) -> None:
        now = time.time()
        was_open = conn.state == 1
        conn.state = 2
        waiter = self.waiters.pop(conn.index, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(False)
        if was_open:
            self.open_now -= 1
            self.drops += 1
            self.drop_events.append((now, conn.index, conn.gateway))
        else:
            self.failed += 1
            if conn.why == "connect":
                self.failed_connect += 1
            elif conn.why == "timeout":
                self.failed_timeout += 1
            elif conn.why == "closed":
                self.failed_closed += 1
            elif conn.why == "tls":
                self.failed_tls += 1
        if self.stopping or not self.s.reconnect:
            return
        backoff = conn.backoff or Backoff(base=self.s.backoff_base, ceiling=self.s.backoff_ceiling, rng=self.rng)
        if was_open:
            backoff.connected_for(now - conn.opened_at)
        delay = backoff.next_delay(close_code=conn.code, retry_after=conn.retry_after)
        self.loop.call_later(delay, self._redial, conn.index, backoff)

    def _redial(self, index: int, backoff: Backoff) -> None:
        if not self.stopping:
            self.loop.create_task(self.dial(index, backoff))

    async def dial(self, index: int, backoff: Backoff | None = None) -> None:
        async with self.sem:
            if self.stopping:
                return
            conn = Conn(self, index)
            conn.backoff = backoff
            self.conns[index] = conn
            self.attempts += 1
            self.attempt_times.append(time.time())
            waiter: asyncio.Future[bool] = self.loop.create_future()
            self.waiters[index] = waiter
            sock: socket.socket | None = None
            try:
                sock = stamped_socket(self.s.source)
                await self.loop.sock_connect(sock, (self.s.host, self.s.port))
                conn.attach(sock)
                await asyncio.wait_for(waiter, self.s.handshake_timeout)
            except (OSError, TimeoutError) as exc:
                conn.why = "timeout" if isinstance(exc, TimeoutError) else "connect"
                self.waiters.pop(index, None)
                if conn.sock is not None:
                    conn.abort()  # lost() counts the failure
                else:
                    if sock is not None:
                        sock.close()
                    conn.state = 2
                    self.lost(conn)

    async def ramp(self) -> None:
        s = self.s
        started = self.loop.time()
        i = 0
        tasks: set[asyncio.Task[None]] = set()
        while i < s.count and not self.stopping:
            due = s.count if s.rate <= 0 else min(s.count, int((self.loop.time() - started) * s.rate) + 1)
            while i < due:
                task = self.loop.create_task(self.dial(i))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                i += 1
            await asyncio.sleep(0.01)
        if tasks:
            await asyncio.wait(tasks)

    # --- reporting

    def tick(self) -> dict[str, Any]:
        lat, self.live_lat = self.live_lat, []
        return {
            "ev": "tick",
            "t": time.time(),
            "open": self.open_now,
            "attempts": self.attempts,
            "opened": self.opened,
            "failed": self.failed,
            "frames": self.frames,
            "snaps": self.snaps,
            "ranks": self.ranks,
            "announces": self.announces,
            "drops": self.drops,
            "refused": self.refused,
            "failed_connect": self.failed_connect,
            "failed_timeout": self.failed_timeout,
            "failed_closed": self.failed_closed,
            "failed_tls": self.failed_tls,
            **self.stalls.take(),
            "lat": lat,
        }

    def unseen(self, expected: list[str], since: float) -> tuple[int, int, int]:
        """(eligible, complete, missing): the sockets open since before ``since``, those of them
        with every snapshot in ``expected``, and the snapshots they have not got (yet). A snapshot
        that reached none of this process's sockets is missing from every one of them."""
        mask = never = 0
        for key in expected:
            sid = self.sids.get(key)
            if sid is None:
                never += 1
            else:
                mask |= 1 << sid
        eligible = complete = missing = 0
        for conn in self.conns:
            if conn is None or conn.state != 1 or conn.opened_at > since:
                continue
            eligible += 1
            lost = never + bin(mask & ~self.seen[conn.index]).count("1")
            missing += lost
            complete += lost == 0
        return eligible, complete, missing

    def report(self, expected: list[str], since: float) -> dict[str, Any]:
        """Figures for the snapshots in ``expected`` (published in the measured window)."""
        per: dict[str, list[float]] = {}
        latencies: list[float] = []
        read_latencies: list[float] = []
        late = 0
        for key in expected:
            sid = self.sids.get(key)
            if sid is None:
                per[key] = [0, 0.0, 0.0]
                continue
            times = self.arrivals[sid]
            ts = self.ts[sid]
            per[key] = [len(times), min(times, default=0.0), max(times, default=0.0)]
            latencies.extend(round((t - ts) * 1000, 2) for t in times)
            read_latencies.extend(round((t - ts) * 1000, 2) for t in self.reads[sid])
            late += self.late[sid]
        eligible, complete, missing = self.unseen(expected, since)
        gateways: dict[str, int] = {}
        for conn in self.conns:
            if conn is not None and conn.state == 1:
                gateways[conn.gateway] = gateways.get(conn.gateway, 0) + 1
        # sockets that reconnected: snapshots published from the one they resumed with on that
        # they never got (those published while away, up to the stored latest, are replaced by it)
        position = {self.sids[key]: i for i, key in enumerate(expected) if key in self.sids}
        moved_missed = 0
        for index, pairs in self.resumes.items():
            excused: set[int] = set()
            for before, after in pairs:
                lo, hi = position.get(before, -1), position.get(after, -1)
                excused.update(range(lo + 1, hi + 1))
            start = position.get(pairs[0][1], len(expected))
            for i in range(start, len(expected)):
                sid = self.sids.get(expected[i])
                if (sid is None or not self.seen[index] >> sid & 1) and i not in excused:
                    moved_missed += 1
        return {
            **self.tick(),
            "ev": "report",
            "per_snapshot": per,
            "latencies": latencies,
            "read_latencies": read_latencies,
            "stamped_late": late,
            "eligible": eligible,
            "complete": complete,
            "missing": missing,
            "gateways": gateways,
            "open_events": self.open_events,
            "drop_events": self.drop_events,
            "attempt_times": self.attempt_times,
            "max_gaps": [round(g, 3) for g in self.max_gap if g],
            "moved": len(self.resumes),
            "moved_missed": moved_missed,
            "not_open": sum(conn is None or conn.state != 1 for conn in self.conns),
        }


AUTOGROUP = "/proc/self/autogroup"


def yield_cores(nice: int) -> str:
    """Lower this process's CPU priority by ``nice``; a one-line warning where it could only be
    done in part ("" when done).

    With autogroups on (``kernel.sched_autogroup_enabled``, see ``man 7 sched``) the scheduler
    first shares the cores between sessions' autogroups, and a nice value only orders tasks
    inside one: a niced worker in the load test's session took the same share as before. So the
    swarm starts a worker with ``nice`` in a session of its own (its own autogroup) and the worker
    gives that autogroup the nice value too; the plain ``os.nice`` is what applies where the
    kernel has no autogroups or they are off. Lowering a priority needs no privilege."""
    os.nice(nice)
    if os.getsid(0) != os.getpid():
        # the autogroup is the whole session's (the load test's, the shell's): never nice that
        return "warning: a client process outside a session of its own: --client-nice is a plain nice"
    for _ in range(20):
        try:
            with open(AUTOGROUP, "w", encoding="ascii") as f:
                f.write(str(nice))
            return ""
        except FileNotFoundError:
            return f"warning: no {AUTOGROUP} (a kernel without autogroups): --client-nice is a plain nice"
        except BlockingIOError:
            # EAGAIN: without CAP_SYS_ADMIN the kernel takes one autogroup nice write per 100 ms,
            # machine-wide, and the workers start together
            time.sleep(0.1)
        except OSError as exc:
            return f"warning: {AUTOGROUP} refused nice {nice} ({exc.strerror}): --client-nice is a plain nice"
    return f"warning: {AUTOGROUP} stayed busy: --client-nice is a plain nice"


def _emit(msg: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(msg) + b"\n")
    sys.stdout.buffer.flush()


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    line = await reader.readline()
    if not line:
        return
    raw = orjson.loads(line)
    settings = WorkerSettings(**raw)
    # before any socket opens; the swarm shows each distinct warning once
    _emit({"ev": "started", "priority_warning": yield_cores(settings.nice) if settings.nice else ""})
    worker = Worker(settings)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(worker.s.tick)
            _emit(worker.tick())

    tasks = [loop.create_task(worker.ramp()), loop.create_task(ticker()), loop.create_task(worker.stalls.probe())]
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            cmd = orjson.loads(line)
            if cmd["cmd"] == "report":
                _emit(worker.report(cmd["expected"], float(cmd["since"])))
            elif cmd["cmd"] == "missing":
                _emit({"ev": "missing", "missing": worker.unseen(cmd["expected"], float(cmd["since"]))[2]})
            elif cmd["cmd"] == "stop":
                break
    finally:
        worker.stopping = True
        for task in tasks:
            task.cancel()
        for conn in worker.conns:
            if conn is not None:
                conn.abort()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
        worker.close()
        _emit({"ev": "stopped"})


def run() -> None:
    die_with_parent()  # also set by the parent as preexec_fn; harmless twice
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import uvloop

    uvloop.run(main())


if __name__ == "__main__":
    run()
