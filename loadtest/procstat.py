"""CPU time, run-queue wait and memory of processes, read from /proc (Linux)."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_s: float  # user + system CPU seconds since the process started
    rss_bytes: int
    user_s: float = 0.0  # of which in user space (the rest is the kernel's: syscalls, TCP)
    # Seconds its threads were runnable but waited for a core (0 without schedstats): on a
    # machine with more runnable processes than cores, this is the time a process "stalls"
    # while using no CPU, which CPU time alone cannot show.
    wait_s: float = 0.0


def run_queue_wait(pid: int) -> float:
    """Seconds the process's threads waited runnable for a core (/proc/<pid>/task/*/schedstat)."""
    total = 0
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError, ValueError, IndexError),
                open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f,
            ):
                total += int(f.read().split()[1])
    return total / 1e9


def usage(pid: int) -> Usage:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        # the command name may hold spaces: fields start after its closing parenthesis
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    rss_kb = 0
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
                break
    # /proc/<pid>/stat counts in clock ticks (10 ms): a light process read over a short window
    # used 0 or 10 ms. The process's CPU clock (every thread, ended ones too) counts nanoseconds.
    try:
        cpu_s = time.clock_gettime(_cpu_clock(pid))
    except OSError:  # the process has just ended
        cpu_s = (utime + stime) / _TICKS
    return Usage(cpu_s, rss_kb * 1024, utime / _TICKS, run_queue_wait(pid))


def _cpu_clock(pid: int) -> int:
    """The clock id of a process's CPU time, as clock_getcpuclockid(3) makes it on Linux."""
    return (~pid << 3) | 2  # CPUCLOCK_SCHED: the scheduler's run time, every thread of the process


def command_line(pid: int) -> list[str]:
    """The process's arguments (/proc/<pid>/cmdline); [] when it is gone or not readable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [arg.decode(errors="replace") for arg in raw.split(b"\0") if arg]


def runs_gateway(argv: list[str]) -> bool:
    """Whether a command line is a gateway process (``python -m gateway``, as the fleet and
    docs/operations.md start one): a balancer or anything else in front of the gateways is not."""
    for i, arg in enumerate(argv[1:], 1):
        module = argv[i + 1] if arg == "-m" and i + 1 < len(argv) else arg[2:] if arg.startswith("-m") else None
        if module is not None:
            return module in ("gateway", "gateway.__main__")
    return False


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), "" where it cannot be read: a run's machine facts."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""
