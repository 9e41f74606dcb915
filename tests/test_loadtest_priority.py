"""``--client-nice``: the load test's client processes yield the cores to the fleet even with the
kernel's autogroups on (each niced worker in a session and autogroup of its own, niced), and
being out of the load test's session does not let them outlive a run, a Ctrl-C or a kill."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.swarm import Swarm

pytestmark = pytest.mark.timeout(90)

AUTOGROUP = re.compile(r"(/autogroup-\d+) nice (-?\d+)")


def autogroup(pid: int | str) -> tuple[str, int]:
    """(the autogroup's name, its nice value) of a process; ("", 0) for the kernel's default
    group, which it prints as nothing (init's session, and a daemon's that never made its own:
    a test run under a service manager is in it)."""
    text = Path(f"/proc/{pid}/autogroup").read_text().strip()
    if not text:
        return "", 0
    m = AUTOGROUP.fullmatch(text)
    assert m, f"/proc/{pid}/autogroup: {text!r}"
    return m[1], int(m[2])


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A ws:// URL whose port is held but not listening: every connect is refused at once, so
    the client processes run without a server."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"ws://127.0.0.1:{held.getsockname()[1]}/ws"


needs_autogroups = pytest.mark.skipif(
    not Path("/proc/self/autogroup").exists(), reason="this kernel has no autogroups (/proc/self/autogroup)"
)


@needs_autogroups
@pytest.mark.parametrize("nice", [10, 0])
async def test_niced_client_processes_get_an_autogroup_of_their_own_niced(refused_url: str, nice: int) -> None:
    own, own_nice = autogroup("self")
    swarm = Swarm(refused_url, sockets=4, workers=2, rate=0, nice=nice)
    async with swarm:
        assert await swarm.wait_open(timeout=30), "the client processes never reported"
        pids = [p.pid for p in swarm.procs]
        for pid in pids:
            group, group_nice = autogroup(pid)
            if nice:
                # a plain nice inside the load test's autogroup would not count against the gateways'
                assert group != own and group_nice == nice and os.getsid(pid) == pid
                assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0) + nice
            else:
                assert (group, group_nice) == (own, own_nice) and os.getsid(pid) == os.getsid(0)
        assert swarm.priority_warnings == set()
    assert all(p.returncode == 0 for p in swarm.procs)
    assert not [pid for pid in pids if alive(pid)]


def children_of(parent: int) -> dict[int, bytes]:
    """pid: command line of every process whose parent is ``parent``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found[int(entry)] = cmdline
    return found


@needs_autogroups
@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_niced_client_processes_stop_with_the_run(tmp_path: Path, how: str) -> None:
    """Ctrl-C (SIGINT to the terminal's foreground group: not to the workers, in sessions of their
    own) stops the run and everything it started; a SIGKILL of the run takes its workers with it.
    The run starts its own redis-server: a killed run cannot remove its players from a shared one."""
    argv = [sys.executable, "-m", "loadtest", "sockets", "--out", str(tmp_path / "r")]
    argv += ["--sockets", "200", "--duration", "60", "--client-nice", "10", "--quiet"]
    run = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 40
        # until the workers have read their settings and niced their autogroups
        while not (workers := [p for p, cmd in children_of(run.pid).items() if b"loadtest.wsworker" in cmd]) or not all(
            autogroup(pid)[1] == 10 for pid in workers
        ):
            assert run.poll() is None, run.stderr.read() if run.stderr else ""
            assert time.monotonic() < deadline, "no niced client process started"
            time.sleep(0.1)
        started = list(children_of(run.pid))  # the workers, the private fleet's processes
        if how == "ctrl-c":
            os.killpg(run.pid, signal.SIGINT)
            assert run.wait(timeout=30) == 130
        else:
            run.kill()
            run.wait(timeout=10)
        deadline = time.monotonic() + 15
        while [pid for pid in started if alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in started if alive(pid)], "a process of the run outlived it"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
