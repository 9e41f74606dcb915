"""``python -m fleet.cluster --port P``: a private cluster on ports chosen by the operator (P, P+1,
…, buses 10000 above), the same at every start; free ports stay the default."""

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
    """A base port whose six node ports and six bus ports are all free right now."""
    for _ in range(50):
        base = random.randrange(20_000, 30_000)
        try:
            free_ports_check("127.0.0.1", (*range(base, base + NODES), *range(base + 10_000, base + 10_000 + NODES)))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports")


def test_pinned_ports_are_the_base_and_its_buses_10000_above() -> None:
    assert pinned_ports(7000, 3) == [(7000, 17000), (7001, 17001), (7002, 17002)]
    for base in (1000, 55_531):  # below 1024; a bus past 65535
        with pytest.raises(ValueError, match=r"within 1024\.\.65535"):
            pinned_ports(base, NODES)


def test_a_bad_base_port_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--dir", str(tmp_path), "--port", "60000"])
    assert exc.value.code == 2 and "within 1024..65535" in capsys.readouterr().err
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
        assert nodes == [f"node 127.0.0.1:{base + i} (bus {base + 10_000 + i})" for i in range(NODES)]
        # the same ports again while they are taken: an error naming them, never other ports
        with pytest.raises(RuntimeError, match=f"port {base} or its bus port {base + 10_000} is in use"):
            Cluster(tmp_path / "b", base_port=base, startup_timeout=10).start()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
