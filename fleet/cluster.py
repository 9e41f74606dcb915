"""A private Redis Cluster on loopback: N masters with R replicas each, for the cluster tests,
the cluster benchmark and anyone who wants to run the fleet against a cluster by hand::

    python -m fleet.cluster --dir var/cluster        # prints LB_REDIS_URL=redis+cluster://...
    python -m fleet.cluster --port 7000              # nodes on 7000-7005, their buses on 7006-7011
    python -m fleet.cluster --port 7000 --bus-port 17000   # buses on 17000-17005 (Redis's +10000)

    with Cluster(tmp_path) as cluster:               # 3 masters, 1 replica each
        cluster.url                                  # redis+cluster://127.0.0.1:<port>
        node = cluster.owner("lb:{arena}:versions")  # the master serving that key's slot
        cluster.kill(node)                           # SIGKILL; a replica takes over
        cluster.wait_owner_changes(node, "lb:{arena}:versions")

Every node listens on a free loopback port and a free cluster-bus port (``cluster-port``), so
it never collides with another server on the machine; or, with a base port P (``--port``,
``Cluster(base_port=P)``), on P, P+1, …, P+N-1 and its bus on P+N, …, P+2N-1: one block of 2N
ports from P, so an operator reserves one range, and the URL stays the same from one start to
the next (a port in use is then an error, not a new pick). ``--bus-port B``
(``Cluster(bus_port=B)``) puts the buses on B, …, B+N-1 instead (B = P+10000: Redis's own
convention).
``cluster-node-timeout`` is short (1 s by default) so a failover completes within a few seconds.
No password: it only listens on loopback and lives as long as the process that started it.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import redis

from leaderboard.settings import argument_parser

from .redis_server import RedisServer, free_ports


def free_ports_check(host: str, ports: tuple[int, ...]) -> None:
    """OSError unless every one of ``ports`` can be bound on ``host`` now."""
    with contextlib.ExitStack() as stack:
        for port in ports:
            stack.enter_context(socket.socket()).bind((host, port))


def pinned_ports(base: int, count: int, bus: int = 0) -> list[tuple[int, int]]:
    """``count`` nodes on ``base``, ``base + 1``, … with their buses on ``bus``, ``bus + 1``, …
    (0: right after the nodes, ``base + count``: one block of ``2 * count`` ports); ValueError
    when they do not fit in 1024..65535 or the two ranges overlap."""
    bus = bus or base + count
    nodes, buses = range(base, base + count), range(bus, bus + count)
    span = f"{count} nodes need {base}..{base + count - 1} and their buses {bus}..{bus + count - 1}"
    if min(base, bus) < 1024 or max(nodes[-1], buses[-1]) > 65_535:
        raise ValueError(f"base port {base}, bus port {bus}: {span}, all within 1024..65535")
    if nodes.start < buses.stop and buses.start < nodes.stop:
        raise ValueError(f"base port {base}, bus port {bus}: {span}, which overlap")
    return list(zip(nodes, buses, strict=True))


class ClusterNode(RedisServer):
    """One redis-server with cluster mode on, its bus on a port of its own."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        node_timeout_ms: int,
        aof: bool = False,
        ports: tuple[int, int] | None = None,
        pinned: bool = False,
    ) -> None:
        super().__init__(data_dir, aof=aof)
        self.port, self.bus_port = ports or free_ports(2, self.host)
        self.node_timeout_ms = node_timeout_ms
        self.pinned = pinned  # the ports were asked for: never pick others

    def start(self) -> ClusterNode:
        if self.pinned:
            # Checked first: a server already on the port would answer the start-up ping for this
            # node, which would then seem to have started.
            try:
                free_ports_check(self.host, (self.port, self.bus_port))
            except OSError:
                raise RuntimeError(
                    f"port {self.port} or its bus port {self.bus_port} is in use: choose another base port"
                ) from None
        # The ports were free when picked, not reserved: another process (or a sibling node) may
        # have taken one since. Pick again; the data directory is new, so nothing refers to them.
        for attempt in range(3):
            try:
                super().start()
                return self
            except RuntimeError:
                if attempt == 2 or self.pinned or "Address already in use" not in self._log_tail():
                    raise
                self.port, self.bus_port = free_ports(2, self.host)
        return self

    def _log_tail(self) -> str:
        try:
            return (self.data_dir / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [
            *super().command(),
            "--cluster-enabled", "yes",
            "--cluster-port", str(self.bus_port),
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            # The slots of a dead master are served again once its replica is promoted; until
            # then, only its slots are down, not the whole cluster.
            "--cluster-require-full-coverage", "no",
        ]  # fmt: skip

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, socket_timeout=2, decode_responses=True)


class Cluster:
    """``with Cluster(data_dir) as cluster: cluster.url`` — created, then stopped."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 1000,
        aof: bool = False,
        startup_timeout: float = 20.0,
        base_port: int = 0,
        bus_port: int = 0,
    ) -> None:
        if masters < 3:
            raise ValueError("Redis Cluster needs at least 3 masters")
        self.data_dir = Path(data_dir).resolve()
        self.startup_timeout = startup_timeout
        count = masters * (1 + replicas)
        self.replicas = replicas
        if bus_port and not base_port:
            raise ValueError("a bus port needs a base port (--port) too")
        if base_port:
            pairs = pinned_ports(base_port, count, bus_port)
        else:
            ports = free_ports(2 * count)  # at once: no two nodes get the same port
            pairs = [(ports[2 * i], ports[2 * i + 1]) for i in range(count)]
        self.nodes = [
            ClusterNode(
                self.data_dir / f"node{i}", node_timeout_ms=node_timeout_ms, aof=aof, ports=pair, pinned=bool(base_port)
            )
            for i, pair in enumerate(pairs)
        ]

    @property
    def url(self) -> str:
        """The URL the fleet takes (LB_REDIS_URL): any node; the client learns the rest."""
        return f"redis+cluster://{self.nodes[0].address}"

    @property
    def seed_urls(self) -> list[str]:
        return [f"redis://{node.address}/0" for node in self.nodes]

    def start(self) -> Cluster:
        try:
            for node in self.nodes:
                node.start()
            cli = shutil.which("redis-cli") or "redis-cli"
            subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *(n.address for n in self.nodes),
                    "--cluster-replicas",
                    str(self.replicas),
                    "--cluster-yes",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=self.startup_timeout,
            )
            self._wait(self._settled, "the cluster did not settle")
        except BaseException:
            self.stop()
            raise
        return self

    def _settled(self) -> bool:
        """Every live node says the cluster is ok and knows every master and replica."""
        for node in self.live():
            with node.client() as c:
                info = c.execute_command("CLUSTER", "INFO")
                if "cluster_state:ok" not in info:
                    return False
                nodes = [line.split() for line in c.execute_command("CLUSTER", "NODES").splitlines() if line]
                if len(nodes) < len(self.nodes):
                    return False
                # A master's replicas online: WAIT (LB_WAIT_REPLICAS) counts only those.
                repl = c.info("replication")
                if repl.get("role") == "master":
                    links = [v for k, v in repl.items() if k.startswith("slave") and isinstance(v, dict)]
                    if sum(1 for link in links if link.get("state") == "online") < self.replicas:
                        return False
        return True

    def _wait(self, ready: object, message: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        while True:
            with contextlib.suppress(redis.RedisError, OSError):
                if ready():  # type: ignore[operator]
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(message)
            time.sleep(0.05)

    def live(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.running()]

    def node_at(self, address: str) -> ClusterNode:
        return next(n for n in self.nodes if n.address == address)

    def owner(self, key: str) -> ClusterNode:
        """The master serving ``key``'s slot, as a live node sees the cluster now."""
        with self.live()[0].client() as c:
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return self.node_at(f"{master[0]}:{master[1]}")
        raise RuntimeError(f"no master serves the slot of {key!r}")

    def masters(self) -> list[ClusterNode]:
        with self.live()[0].client() as c:
            return [self.node_at(f"{m[0]}:{m[1]}") for _, _, m, *_ in c.execute_command("CLUSTER", "SLOTS")]

    def move_slot(self, key: str, to: ClusterNode) -> None:
        """Reshard ``key``'s slot (its keys included) to the master ``to``, as ``redis-cli --cluster
        reshard`` does, one slot: IMPORTING / MIGRATING, MIGRATE the keys, then SETSLOT NODE on
        every master. Clients of the old owner get ``MOVED`` (and its sharded subscribers an
        unasked ``sunsubscribe``) from then on."""
        source = self.owner(key)
        if source is to:
            raise ValueError(f"{key!r} is already served by {to.address}")
        with source.client() as src, to.client() as dst:
            slot = int(src.execute_command("CLUSTER", "KEYSLOT", key))
            src_id, dst_id = src.execute_command("CLUSTER", "MYID"), dst.execute_command("CLUSTER", "MYID")
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", to.host, to.port, "", 0, 5000, "KEYS", *keys)
            for master in self.masters():
                with master.client() as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        """The replicas ``master`` has online now (its shard's other nodes)."""
        with master.client() as c:
            repl = c.info("replication")
        links = [v for k, v in repl.items() if k.startswith("slave") and isinstance(v, dict)]
        return [self.node_at(f"{link['ip']}:{link['port']}") for link in links if link.get("state") == "online"]

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL: no goodbye to clients or replicas, as when a host dies."""
        assert node.process is not None
        node.process.kill()
        node.process.wait()

    def wait_owner_changes(self, old: ClusterNode, key: str, timeout: float = 20.0) -> ClusterNode:
        """Until a live node serves ``key``'s slot instead of ``old`` (a replica was promoted)."""
        found: list[ClusterNode] = []

        def promoted() -> bool:
            node = self.owner(key)
            if node is old or not node.running():
                return False
            with node.client() as c:
                if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    return False
            found.append(node)
            return True

        self._wait(promoted, f"no replica took over the slot of {key!r}", timeout)
        return found[-1]

    def wait_replicas_online(self, master: ClusterNode, timeout: float = 30.0) -> None:
        """Until ``master`` has its replicas online (a restarted node rejoins as a replica)."""

        def online() -> bool:
            with master.client() as c:
                repl = c.info("replication")
            links = [v for k, v in repl.items() if k.startswith("slave") and isinstance(v, dict)]
            return sum(1 for link in links if link.get("state") == "online") >= self.replicas

        self._wait(online, f"{master.address} has no replica online", timeout)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def keyslot_names(masters: list[ClusterNode], prefix: str, count: int) -> list[str]:
    """Game names ``<prefix>1``, ``<prefix>2`` … one per master (by CLUSTER KEYSLOT of its hash
    tag), so ``count`` games land on ``count`` different masters."""
    with masters[0].client() as c:
        ranges: dict[str, list[tuple[int, int]]] = {}
        for start, end, m, *_ in c.execute_command("CLUSTER", "SLOTS"):
            ranges.setdefault(f"{m[0]}:{m[1]}", []).append((start, end))
        names: dict[str, str] = {}
        i = 0
        while len(names) < count:
            i += 1
            name = f"{prefix}{i}"
            slot = int(c.execute_command("CLUSTER", "KEYSLOT", f"{{{name}}}"))
            owner = next(a for a, rs in ranges.items() if any(s <= slot <= e for s, e in rs))
            names.setdefault(owner, name)
        return list(names.values())


def main(argv: list[str] | None = None) -> int:
    p = argument_parser("python -m fleet.cluster", __doc__ or "")
    p.add_argument("--dir", default="var/cluster", help="data directory (one subdirectory per node)")
    p.add_argument("--masters", type=int, default=3, help="masters (at least 3)")
    p.add_argument("--replicas", type=int, default=1, help="replicas per master")
    p.add_argument("--node-timeout-ms", type=int, default=1000, help="cluster-node-timeout: failure detection")
    p.add_argument("--aof", action="store_true", help="appendonly on every node")
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="base port: the N nodes on PORT..PORT+N-1 and, unless --bus-port says otherwise, their cluster "
        "buses on PORT+N..PORT+2N-1 (default 0: free ports, new at each start)",
    )
    p.add_argument(
        "--bus-port",
        type=int,
        default=0,
        help="first cluster-bus port with --port: the buses on BUS_PORT..BUS_PORT+N-1 (e.g. PORT+10000, "
        "Redis's own convention) (default 0: right after the nodes' ports)",
    )
    args: argparse.Namespace = p.parse_args(argv)
    try:
        cluster = Cluster(
            args.dir,
            masters=args.masters,
            replicas=args.replicas,
            node_timeout_ms=args.node_timeout_ms,
            aof=args.aof,
            base_port=args.port,
            bus_port=args.bus_port,
        )
    except ValueError as exc:
        p.error(str(exc))
    try:
        cluster.start()  # stops what it started when it fails
    except RuntimeError as exc:
        print(f"fleet.cluster: {exc}", file=sys.stderr)
        return 1
    try:
        # Blocked only now, for sigwait below: the nodes started above must not inherit the mask,
        # or they would ignore the SIGTERM that stops them.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        print(f"LB_REDIS_URL={cluster.url}", flush=True)
        for node in cluster.nodes:
            print(f"  node {node.address} (bus {node.bus_port})", flush=True)
        print("Ctrl-C stops every node.", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
