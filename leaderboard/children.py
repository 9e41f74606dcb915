"""Child processes that never outlive their parent (Linux)."""

from __future__ import annotations

import contextlib
import ctypes
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn`` for a child: it gets SIGTERM when the process that started it dies, so a
    killed fleet or test run leaves no redis-server, scorer or gateway behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
