"""``python -m fleet.cluster --port P``: a private cluster on ports chosen by the operator (the
nodes on P, P+1, …, their buses right after them: one block from P; or from ``--bus-port``), the
same at every start; free ports stay the default."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.cluster import Cluster, free_ports_check, main, pinned_ports

NODES = 6  # 3 masters, 1 replica each


def free_base() -> int:
    """A base port whose block of six node ports and six bus ports is all free right now."""
    for _ in range(50):
        base = random.randrange(20_000, 30_000)
        try:
            free_ports_check("127.0.0.1", tuple(range(base, base + 2 * NODES)))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports")


def test_pinned_ports_keep_the_buses_in_the_block_from_the_base() -> None:
    # the operator's range: --port 7000 for three nodes takes 7000..7005, nothing else
    assert pinned_ports(7000, 3) == [(7000, 7003), (7001, 7004), (7002, 7005)]
    # or wherever --bus-port says, Redis's own +10000 among them
    assert pinned_ports(7000, 3, 17000) == [(7000, 17000), (7001, 17001), (7002, 17002)]
    assert pinned_ports(7003, 3, 7000) == [(7003, 7000), (7004, 7001), (7005, 7002)]
    for base, bus in ((1000, 0), (65_530, 0), (7000, 65_534), (7000, 1000)):  # outside 1024..65535
        with pytest.raises(ValueError, match=r"within 1024\.\.65535"):
            pinned_ports(base, NODES, bus)
    with pytest.raises(ValueError, match="overlap"):
        pinned_ports(7000, NODES, 7005)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--port", "65530"], "within 1024..65535"),
        (["--port", "7000", "--bus-port", "7003"], "overlap"),
        (["--bus-port", "17000"], "needs a base port"),
    ],
)
def test_bad_ports_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], error: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--dir", str(tmp_path), *args])
    assert exc.value.code == 2 and error in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing started


@pytest.mark.slow
def test_the_cluster_listens_on_the_ports_asked_for_and_refuses_taken_ones(tmp_path: Path) -> None:
    base = free_base()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet.cluster", "--dir", str(tmp_path / "a"), "--port", str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"LB_REDIS_URL=redis+cluster://127.0.0.1:{base}"
        nodes = [proc.stdout.readline().strip() for _ in range(NODES)]
        assert nodes == [f"node 127.0.0.1:{base + i} (bus {base + NODES + i})" for i in range(NODES)]
        # the same ports again while they are taken: an error naming them, never other ports
        with pytest.raises(RuntimeError, match=f"port {base} or its bus port {base + NODES} is in use"):
            Cluster(tmp_path / "b", base_port=base, startup_timeout=10).start()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
