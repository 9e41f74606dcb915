"""Fault 5, of a kind: the hypothesis property tests (tests/test_properties_*.py) with a longer
search (``LB_PROPERTY_SCALE`` times their normal example count), in a pytest child process."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


async def run(scale: float, timeout: float) -> dict[str, Any]:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_properties_*.py"))
    if not files:
        return {"scale": scale, "skipped": f"no tests/test_properties_*.py under {ROOT} (not a checkout)"}
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *files,
        cwd=ROOT,
        env={**os.environ, "LB_PROPERTY_SCALE": str(scale)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"scale": scale, "files": files, "passed": 0, "failed": 0, "error": f"no result within {timeout:.0f} s"}
    text = out.decode(errors="replace")
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?)", text.splitlines()[-1] if text else "")}
    return {
        "scale": scale,
        "files": files,
        "passed": counts.get("passed", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0),
        "exit": proc.returncode,
        "seconds": round(time.monotonic() - t0, 1),
        "tail": text.strip().splitlines()[-15:] if proc.returncode else [],
    }
