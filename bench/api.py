"""``python -m bench.api``: one HTTP API process under load, each figure against a baseline
measured in the same run (wrk, Debian's ``apt-get install wrk``, is the load generator).

1. ``GET top`` of a watched board (the snapshot pub/sub keeps: no Redis read) against the same
   route reading the board from Redis at each request (``?period=<the current period>`` skips
   the held snapshot): the most requests/s with p99 <= 50 ms over a ladder of connection counts;
   and the held answer through Starlette's routing (``?window=weekly``: not answered before it).
2. The 304 path: the same route with ``If-None-Match`` of the current ETag.
3. ``POST scores`` through one API process against a server-role socket of one gateway process
   submitting the same slips: throughput, and the serving process's CPU ms per 1,000; and the
   same slips ``--batch`` at a time through ``POST scores:batch`` (CPU per submission).
4. ``?wait=applied`` latency p50 / p99 at a steady offered rate, with a scorer applying.
5. ``GET top`` of the watched board through haproxy with its top cache (the fleet's balancer)
   against the same haproxy without it and the API directly (1.).

Everything runs on loopback against a private redis-server and stops by itself. The read budget
is lifted for the run (``LB_API_READ_RATE``, the gateway's ``LB_GW_RATE``): what is measured is
the serving path, not the limiter.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis
from websockets.asyncio.client import connect as ws_connect

from bench import results
from fleet.haproxy import API_BACKEND, BalancerConfig, Gateway, Haproxy
from fleet.redis_server import RedisServer, free_port
from leaderboard import GameConfig, Leaderboard, Submission, connect, now_ms, snapshot
from leaderboard.auth import issue
from leaderboard.library import library_code
from leaderboard.settings import argument_parser
from leaderboard.windows import window

ROOT = Path(__file__).resolve().parent.parent
CONFIG = GameConfig(game="bench")
SECRET = "bench-api-secret-of-at-least-32-bytes!!"
P99_BOUND_MS = 50.0
SERVER_TOKEN = issue("bench-server", "server", SECRET, exp=time.time() + 86_400)


def _env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LB_")}
    return {**env, "LB_REDIS_URL": redis_url, "LB_GAME": CONFIG.game, "LB_JWT_SECRETS": SECRET,
            "LB_LOG_LEVEL": "WARNING", **extra}  # fmt: skip


@contextlib.contextmanager
def process(module: str, redis_url: str, ready: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m module`` until the block ends; ``ready`` (a URL) answers 200 first."""
    proc = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=_env(redis_url, **env))
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"python -m {module} exited with {proc.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(ready, timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"python -m {module} did not answer {ready} within 30 s")
            time.sleep(0.05)  # a process starting: no event to await across processes
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def wrk(url: str, connections: int, seconds: float, *, headers: dict[str, str], script: str = "") -> dict[str, Any]:
    """One wrk run (one thread): requests/s, p50/p99 in ms, errors (non-2xx/3xx and socket errors)."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency", "--timeout", "5s"]
    for name, value in headers.items():
        cmd += ["-H", f"{name}: {value}"]
    if script:
        cmd += ["-s", script]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True, timeout=seconds + 30).stdout
    lat = {m[0]: float(m[1]) * _UNITS[m[2]] for m in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
    return {"connections": connections, "rps": rps, "requests": total, "p50_ms": lat["50"], "p99_ms": lat["99"],
            "errors": errors}  # fmt: skip


def best_under_bound(url: str, ladder: list[int], seconds: float, headers: dict[str, str]) -> dict[str, Any]:
    """The most requests/s whose p99 stays within the bound, over the ladder of connections."""
    runs = [wrk(url, c, seconds, headers=headers) for c in ladder]
    within = [r for r in runs if r["p99_ms"] <= P99_BOUND_MS and r["errors"] == 0]
    best = max(within, key=lambda r: r["rps"]) if within else None
    return {"best": best, "runs": runs}


def redis_calls(r: redis.Redis, command: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


async def seed(url: str, players: int) -> None:
    """A board of ``players`` and its published snapshot, stored as the scorer stores it."""
    client = connect(url)
    lb, now = Leaderboard(client, CONFIG), now_ms()
    try:
        for start in range(0, players, 500):
            batch = [
                Submission(f"s{i}", f"p{i}", 10 * i, now).fields() for i in range(start, min(players, start + 500))
            ]
            await lb.submit_batch(batch, now=now)
        top = await lb.top("weekly", "global", CONFIG.top_n, at=now)
        await client.set(CONFIG.keys.latest("weekly", "global"), snapshot.build("global", top, version=1, ts_ms=now))
    finally:
        await client.aclose()


def reads(api: str, pid: int, r: redis.Redis, args: Any) -> dict[str, Any]:
    top = f"{api}/v1/boards/global/top"
    period = window("weekly").period(now_ms()).label
    first = httpx.get(top, timeout=5)
    etag = first.headers["etag"]
    # watched once asked for: wait (bounded) until requests read nothing from Redis
    deadline = time.monotonic() + 10
    while True:
        before = redis_calls(r, "get")
        for _ in range(20):
            httpx.get(top, timeout=5)
        if redis_calls(r, "get") == before:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the board was not watched within 10 s")
    ladder = [int(c) for c in args.connections.split(",")]
    figures: dict[str, Any] = {}
    for name, url, headers in (
        ("held", top, {}),
        ("held_routed", f"{top}?window=weekly", {}),  # the same, past Starlette's routing (server.HeldTop)
        ("redis_per_request", f"{top}?period={period}", {}),
        ("not_modified", top, {"If-None-Match": etag}),
    ):
        gets, total = redis_calls(r, "get"), int(r.info("stats")["total_commands_processed"])
        cpu0 = cpu_s(pid)
        figures[name] = best_under_bound(url, ladder, args.seconds, headers)
        requests = sum(run["requests"] for run in figures[name]["runs"])
        figures[name]["api_cpu_us_per_request"] = round(1e6 * (cpu_s(pid) - cpu0) / requests, 1)
        figures[name]["redis_gets_per_request"] = round((redis_calls(r, "get") - gets) / requests, 4)
        commands = int(r.info("stats")["total_commands_processed"]) - total
        figures[name]["redis_commands_per_request"] = round(commands / requests, 4)
    return figures


async def balanced(api: str, pid: int, args: Any) -> dict[str, Any]:
    """``GET top`` of the watched board through haproxy with its top cache (the balancer answers
    within max-age) against the same haproxy without it (every request reaches the API), each a
    best within the bound; the API's and haproxy's CPU per request, and the share that reached
    the API."""
    ladder = [int(c) for c in args.connections.split(",")]
    figures: dict[str, Any] = {}
    for name, cache_mb in (("haproxy_cache", 16), ("haproxy_no_cache", 0)):
        config = BalancerConfig(
            (Gateway("gw-1", "127.0.0.2:1"),),  # only /v1/ is asked
            apis=(Gateway("api-1", api.removeprefix("http://")),),
            bind=f"127.0.0.1:{free_port()}",
            stats_socket="",
            log="",
            top_cache_mb=cache_mb,
        )
        async with Haproxy(config) as lb:
            assert lb.proc is not None
            url = f"http://{config.bind}/v1/boards/global/top"
            deadline = time.monotonic() + 10
            while (await lb.servers(API_BACKEND))["api-1"]["status"] != "UP":
                if time.monotonic() > deadline:
                    raise RuntimeError("haproxy did not see the API up within 10 s")
                await asyncio.sleep(0.1)
            reached0, cpu0, lb_cpu0 = await _reached(lb), cpu_s(pid), cpu_s(lb.proc.pid)
            row = await asyncio.to_thread(best_under_bound, url, ladder, args.seconds, {})
            requests = sum(run["requests"] for run in row["runs"])
            row["api_cpu_us_per_request"] = round(1e6 * (cpu_s(pid) - cpu0) / requests, 1)
            row["haproxy_cpu_us_per_request"] = round(1e6 * (cpu_s(lb.proc.pid) - lb_cpu0) / requests, 1)
            row["reached_api_per_request"] = round((await _reached(lb) - reached0) / requests, 5)
            figures[name] = row
    return figures


async def _reached(lb: Haproxy) -> int:
    row = (await lb.servers(API_BACKEND))["api-1"]
    return sum(int(row[f"hrsp_{k}xx"] or 0) for k in range(1, 6))


WRK_POST = """
counter = 0
tokens = {{{tokens}}}
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  counter = counter + 1
  local n = counter
  local body = string.format('{{"player_id":"p%d","score":%d,"match_id":"{prefix}-%d"}}', n % 5000, n, n)
  local headers = {{["Authorization"] = "Bearer " .. tokens[counter % #tokens + 1]}}
  return wrk.format(nil, "/v1/boards/global/scores", headers, body)
end
"""
FRESH_TOKENS = 8192  # twice what an API process holds verified (auth.Tokens): each one verified again

WRK_BATCH = """
counter = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {token}"
request = function()
  local slips = {{}}
  for i = 1, {size} do
    counter = counter + 1
    slips[i] = string.format('{{"player_id":"p%d","score":%d,"match_id":"batch-%d"}}', counter % 5000, counter, counter)
  end
  return wrk.format(nil, "/v1/boards/global/scores:batch", nil, '{{"slips":[' .. table.concat(slips, ",") .. ']}}')
end
"""


def http_writes(api: str, pid: int, args: Any, tmp: Path, *, batch: int = 0, fresh: bool = False) -> dict[str, Any]:
    """wrk's ``POST scores`` (``batch``: ``POST scores:batch`` of that many slips), new ids each:
    throughput and the API process's CPU per 1,000 submissions. ``fresh``: a token of many in
    turn, none held verified when it comes back (the token check as it was before auth.Tokens)."""
    script = tmp / "post.lua"
    if batch:
        lua = WRK_BATCH.format(token=SERVER_TOKEN, size=batch)
    elif fresh:
        signed = (issue(f"bench-{i}", "server", SECRET, exp=time.time() + 86_400) for i in range(FRESH_TOKENS))
        lua = WRK_POST.format(tokens=",".join(f'"{t}"' for t in signed), prefix="token")
    else:
        lua = WRK_POST.format(tokens=f'"{SERVER_TOKEN}"', prefix="http")
    script.write_text(lua)
    cpu0 = cpu_s(pid)
    run = wrk(f"{api}/v1/boards/global/scores", args.write_connections, args.seconds, headers={}, script=str(script))
    cpu = cpu_s(pid) - cpu0
    done = run["requests"] * max(1, batch)
    return {**run, "batch": batch, "submissions_per_s": round(run["rps"] * max(1, batch), 1),
            "cpu_ms_per_1000": round(1e6 * cpu / max(1, done), 1)}  # fmt: skip


async def socket_writes(ws_url: str, pid: int, seconds: float, window_size: int) -> dict[str, Any]:
    """A server-role socket submitting the same slips, ``window_size`` unanswered at most."""
    done = 0
    async with ws_connect(f"{ws_url}?token={SERVER_TOKEN}", max_queue=None) as ws:
        await ws.recv()  # welcome
        cpu0, t0 = cpu_s(pid), time.monotonic()
        sent, deadline = 0, t0 + seconds
        inflight = asyncio.Semaphore(window_size)

        async def receive() -> None:
            nonlocal done
            async for raw in ws:
                if b'"submitted"' in (raw if isinstance(raw, bytes) else raw.encode()):
                    done += 1
                    inflight.release()

        reader = asyncio.create_task(receive())
        while time.monotonic() < deadline:
            await inflight.acquire()
            sent += 1
            slip = {"id": f"ws-{sent}", "player": f"p{sent % 5000}", "points": sent}
            await ws.send(orjson.dumps({"type": "submit", "submission": slip, "id": sent}).decode())
        elapsed = time.monotonic() - t0
        for _ in range(window_size):  # the last answers, bounded
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(inflight.acquire(), 5)
        cpu = cpu_s(pid) - cpu0
        reader.cancel()
    return {"window": window_size, "rps": round(done / elapsed, 1), "requests": done,
            "cpu_ms_per_1000": round(1e6 * cpu / max(1, done), 1)}  # fmt: skip


async def applied_latency(api: str, rate: float, seconds: float) -> dict[str, Any]:
    """``?wait=applied`` at ``rate`` submissions/s, each on its own: latency p50 / p99 (ms)."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {SERVER_TOKEN}"}
    async with httpx.AsyncClient(base_url=api, timeout=10, limits=httpx.Limits(max_connections=200)) as http:

        async def one(i: int) -> None:
            t = time.perf_counter()
            slip = {"player_id": f"w{i}", "score": i, "match_id": f"applied-{i}"}
            resp = await http.post("/v1/boards/global/scores", params={"wait": "applied"}, json=slip, headers=headers)
            latencies.append(1000 * (time.perf_counter() - t))
            statuses[str(resp.status_code)] = statuses.get(str(resp.status_code), 0) + 1

        tasks, start = [], time.perf_counter()
        for i in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))  # a steady offered rate
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    return {"rate": rate, "requests": len(latencies), "p50_ms": round(q[49], 1), "p99_ms": round(q[98], 1),
            "statuses": statuses}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("python -m bench.api", (__doc__ or "").split("\n\n")[0])
    parser.add_argument("--players", type=int, default=10_000, help="players on the board")
    parser.add_argument("--seconds", type=float, default=5.0, help="each wrk run")
    parser.add_argument("--connections", default="4,16,64", help="the ladder of wrk connections for the reads")
    parser.add_argument("--write-connections", type=int, default=16, help="wrk connections for POST scores")
    parser.add_argument("--socket-window", type=int, default=64, help="a socket's unanswered submissions at most")
    parser.add_argument("--applied-rate", type=float, default=50.0, help="?wait=applied submissions per second")
    parser.add_argument("--batch", type=int, default=100, help="slips per POST scores:batch")
    parser.add_argument("--writes-only", action="store_true", help="only the writes (3.): HTTP, batch, socket")
    results.add_no_write(parser)
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        parser.error("wrk is not installed: apt-get install wrk")
    figures: dict[str, Any] = {"players": args.players, "p99_bound_ms": P99_BOUND_MS}
    with tempfile.TemporaryDirectory(prefix="bench-api-") as data, RedisServer(Path(data) / "redis") as server:
        r = redis.Redis.from_url(server.url)
        r.function_load(library_code(), replace=True)
        asyncio.run(seed(server.url, args.players))
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        lifted = {"LB_API_READ_RATE": "1000000000", "LB_API_PORT": str(port)}
        with process("api", server.url, f"{api}/readyz", **lifted) as proc:
            if not args.writes_only:
                figures["reads"] = reads(api, proc.pid, r, args)
                if Haproxy.binary() is not None:
                    figures["reads"] |= asyncio.run(balanced(api, proc.pid, args))
            figures["writes_http"] = http_writes(api, proc.pid, args, Path(data))
            figures["writes_http_fresh_token"] = http_writes(api, proc.pid, args, Path(data), fresh=True)
            figures["writes_batch"] = http_writes(api, proc.pid, args, Path(data), batch=args.batch)
        gw_port = free_port()
        gateway = {"LB_GW_PORT": str(gw_port), "LB_GW_METRICS_PORT": "0", "LB_GW_RATE": "1000000000",
                   "LB_GW_BURST": "1000000"}  # fmt: skip
        with process("gateway", server.url, f"http://127.0.0.1:{gw_port}/readyz", **gateway) as gw:
            ws = f"ws://127.0.0.1:{gw_port}/ws"
            figures["writes_socket"] = asyncio.run(socket_writes(ws, gw.pid, args.seconds, args.socket_window))
        r.delete(CONFIG.keys.submissions)  # the writes above were only queued: a fresh queue for the scorer
        if args.writes_only:
            r.close()
            show(figures)
            results.save("api-writes", figures, args, module="bench.api", argv=argv)
            return 0
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        scorer = {"LB_SCORER_METRICS_PORT": str(free_port())}
        metrics = f"http://127.0.0.1:{scorer['LB_SCORER_METRICS_PORT']}/metrics"
        with (
            process("scorer", server.url, metrics, **scorer),
            process("api", server.url, f"{api}/readyz", LB_API_PORT=str(port)),
        ):
            figures["wait_applied"] = asyncio.run(applied_latency(api, args.applied_rate, args.seconds * 2))
        r.close()
    show(figures)
    results.save("api", figures, args, module="bench.api", argv=argv)
    return 0


def show(f: dict[str, Any]) -> None:
    if "reads" in f:
        show_reads(f)
    w, b, s = f["writes_http"], f["writes_batch"], f["writes_socket"]
    t = f["writes_http_fresh_token"]
    print(f"  POST scores, each token verified anew: {t['rps']:,.0f} /s, {t['cpu_ms_per_1000']} CPU ms per 1,000")
    print(
        f"  POST scores: {w['rps']:,.0f} /s, {w['cpu_ms_per_1000']} CPU ms per 1,000 (errors {w['errors']}); "
        f"server socket: {s['rps']:,.0f} /s, {s['cpu_ms_per_1000']} CPU ms per 1,000"
    )
    print(
        f"  POST scores:batch of {b['batch']}: {b['submissions_per_s']:,.0f} submissions/s, {b['cpu_ms_per_1000']} CPU"
        f" ms per 1,000 (errors {b['errors']}); per submission {b['cpu_ms_per_1000'] / s['cpu_ms_per_1000']:.2f}x the"
        f" socket's, {b['cpu_ms_per_1000'] / w['cpu_ms_per_1000']:.2f}x one POST scores each"
    )
    if "wait_applied" in f:
        a = f["wait_applied"]
        print(f"  ?wait=applied at {a['rate']:g}/s: p50 {a['p50_ms']} ms, p99 {a['p99_ms']} ms,", a["statuses"])


def show_reads(f: dict[str, Any]) -> None:
    reads = f["reads"]
    print(f"board of {f['players']:,} players; one API process; wrk, one thread; p99 bound {f['p99_bound_ms']:g} ms")
    for name in ("held", "held_routed", "redis_per_request", "not_modified"):
        row = reads[name]
        for run in row["runs"]:
            print(
                f"  GET top {name:<18} c={run['connections']:<3} {run['rps']:>9,.0f} req/s  p50 {run['p50_ms']:.2f} ms"
                f"  p99 {run['p99_ms']:.2f} ms  errors {run['errors']}"
            )
        print(
            f"    API process CPU {row['api_cpu_us_per_request']} us per request; Redis GETs per request "
            f"{row['redis_gets_per_request']}, commands {row['redis_commands_per_request']}"
        )
    for name in ("haproxy_cache", "haproxy_no_cache"):
        if name not in reads:
            continue
        row = reads[name]
        for run in row["runs"]:
            print(
                f"  GET top {name:<18} c={run['connections']:<3} {run['rps']:>9,.0f} req/s  p50 {run['p50_ms']:.2f} ms"
                f"  p99 {run['p99_ms']:.2f} ms  errors {run['errors']}"
            )
        print(
            f"    API process CPU {row['api_cpu_us_per_request']} us, haproxy CPU {row['haproxy_cpu_us_per_request']}"
            f" us per request; reached the API: {row['reached_api_per_request']} per request"
        )
    held, base = reads["held"]["best"], reads["redis_per_request"]["best"]
    if held and base:
        print(f"  held / reading Redis per request, best within the bound: {held['rps'] / base['rps']:.1f}x")
    cached = reads.get("haproxy_cache", {}).get("best")
    for name in ("haproxy_no_cache", "held", "redis_per_request"):
        other = reads.get(name, {}).get("best")
        if cached and other:
            print(f"  through haproxy's cache / {name}: {cached['rps'] / other['rps']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
