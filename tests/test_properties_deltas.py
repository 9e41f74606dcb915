"""Snapshot deltas reconstruct exactly what full snapshots show: any sequence of snapshots of a
board, with ticks a socket skips, reconnects and resyncs, through the gateway's choice of frame
(gateway/frames.py, as the hub makes it per socket) and the client's applier — the Python one
(leaderboard/delta.py, the Python client's) and, in one node run, the browser's (client.js)."""

from __future__ import annotations

import json
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import frames
from leaderboard import delta, wire
from leaderboard.results import Entry

from .properties import bounded

ROOT = Path(__file__).resolve().parent.parent
PLAYERS = [f"p{i}" for i in range(14)]
LEVEL = 6

# one tick's top: up to 10 distinct players, each with a score and maybe a name or a country
entry = st.fixed_dictionaries(
    {"score": st.integers(-(2**60), 2**60)},
    optional={"name": st.sampled_from(["Mia", "Leo", "Ava Storm", "Zoë"]), "country": st.sampled_from(["SE", "DE"])},
)
top = st.lists(st.tuples(st.sampled_from(PLAYERS), entry), max_size=10, unique_by=lambda pair: pair[0])
# what happens at a tick, for the one socket watched: it takes the frame, skips it, or
# reconnects first; or the board rolls over to a new period (the version counts on), or the
# versions go back (an earlier release's scorer took the lease: they restart each period); the
# version moves on by one (by two: the hub missed a publish; by a thousand: another scorer took
# the lease and numbered from its clock)
actions = st.sampled_from(["take", "take", "take", "skip", "reconnect", "period", "rewind"])
step = st.tuples(actions, top, st.sampled_from([1, 1, 1, 2, 1000]))
runs = st.tuples(st.lists(step, min_size=1, max_size=25), st.sampled_from([0, 3, 30]), st.booleans())


def snapshot(period: int, version: int, players: list[tuple[str, dict[str, Any]]]) -> bytes:
    return wire.snapshot(
        board="global",
        window="weekly",
        period=f"2030-W{period:02d}",
        version=version,
        ts_ms=1_900_000_000_000 + version,
        entries=[Entry(rank, player, fields["score"], {k: v for k, v in fields.items() if k != "score"})
                 for rank, (player, fields) in enumerate(players, 1)],
    )  # fmt: skip


def inflate(frame: bytes) -> bytes:
    """The message of a compressed server frame (frames.deflated_frame's inverse)."""
    n, head = frame[1] & 0x7F, 2
    if n == 126:
        head = 4
    elif n == 127:
        head = 10
    assert frame[0] == 0xC1  # FIN, RSV1, text
    return zlib.decompressobj(-15).decompress(frame[head:] + b"\x00\x00\xff\xff")


def replay(run: tuple[list[tuple[str, Any, int]], int, bool]) -> list[tuple[Any, ...]]:
    """Play ``run`` through the gateway's frame choice and the Python applier, checking at every
    message that the client holds what the full snapshot says. Returns what the client received,
    in order, for the browser's applier: ("reset",), ("msg", message, expected or None, mismatch)."""
    steps, full_every, deflate = run
    wire_bits = frames.DELTAS | (frames.DEFLATE if deflate else 0)
    log: list[tuple[Any, ...]] = []
    period, version = 1, 0
    latest: bytes | None = None  # the board's last published snapshot
    held: dict[str, Any] | None = None  # what the client shows
    fresh = False  # the gateway's view: the socket holds ``latest``

    def receive(payload: bytes, expected: bytes) -> None:
        nonlocal held, fresh
        message = orjson.loads(payload)
        try:
            now = delta.follow(held, message)
        except delta.Mismatch:
            log.append(("msg", message, None, True))
            # the client asks for the full snapshot (resync): the gateway sends the latest
            receive(expected, expected)
            return
        log.append(("msg", message, orjson.loads(expected), False))
        if now is not None:
            held = now
        assert held == orjson.loads(expected)
        fresh = True

    for action, players, gap in steps:
        if action == "period":
            period += 1
        elif action == "rewind":  # a version the socket may hold already, with other entries
            version = max(0, version - 3)
        version += gap
        payload = snapshot(period, version, players)
        base, latest = latest, payload
        if action == "reconnect":
            held, fresh = None, False
            log.append(("reset",))
            receive(payload, payload)  # subscribing: the latest, whole
            continue
        g = frames.group(wire_bits, fresh=fresh)
        body, frame = frames.build([g], base, payload, frames.text_frame(payload), full_every, LEVEL)[g]
        assert (inflate(frame) if deflate else frame) == (body if deflate else frames.text_frame(body))
        if body is not payload:
            assert orjson.loads(body)["type"] == "delta" and len(body) < len(payload)
        if action == "skip":
            fresh = False  # the hub's ``stale``: full snapshots until it holds the latest again
            continue
        receive(body, payload)
    return log


@given(runs)
@bounded(80)
def test_deltas_reconstruct_what_full_snapshots_show(run: tuple[list[tuple[str, Any, int]], int, bool]) -> None:
    replay(run)


def test_a_delta_names_entries_by_index_and_changes_only_what_changed() -> None:
    before = snapshot(1, 4, [("mia", {"score": 50, "name": "Mia"}), ("leo", {"score": 40}), ("ava", {"score": 30})])
    after = snapshot(1, 5, [("leo", {"score": 60}), ("mia", {"score": 50}), ("kai", {"score": 45})])
    message = orjson.loads(delta.encode(before, after) or b"null")
    assert (message["base"], message["dt"]) == (4, 1)
    assert message["entries"] == [[1, 60], {"@": 0, "-": ["name"]}, {"rank": 3, "player": "kai", "score": 45}]
    assert delta.apply(orjson.loads(before), message) == orjson.loads(after)
    assert delta.encode(before, after, full_every=5) is None  # every 5th version goes whole
    assert delta.encode(after, before) is None  # an older version: only whole
    assert delta.encode(before, snapshot(1, 6, [])) is None  # a version skipped: only whole
    with pytest.raises(delta.Mismatch):
        delta.apply(orjson.loads(after), message)  # not its base


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (./dev install installs Debian's)")
def test_the_browser_client_applies_deltas_as_the_python_one_does() -> None:
    """Runs collected from the same strategy, replayed through client.js's ``applyDelta`` in one
    node process: the same snapshots where Python had them, a mismatch where Python had one."""
    cases: list[list[tuple[Any, ...]]] = []

    @given(runs)
    @bounded(40)
    def collect(run: tuple[list[tuple[str, Any, int]], int, bool]) -> None:
        cases.append(replay(run))

    collect()
    script = f"""
import {{ readFileSync }} from "node:fs";
import {{ isDeepStrictEqual }} from "node:util";
const {{ applyDelta, DeltaMismatch }} = await import({json.dumps((ROOT / "clients/js/src/client.js").as_uri())});
let failures = 0, checked = 0;
for (const log of JSON.parse(readFileSync(0, "utf8"))) {{
  let held = null;
  for (const [kind, message, expected, mismatch] of log) {{
    if (kind === "reset") {{ held = null; continue; }}
    let now = message;
    if (message.type === "delta") {{
      if (held && Number.isInteger(message.base) && message.base < held.version) now = null;
      else {{
        try {{ now = applyDelta(held, message); }}
        catch (err) {{ if (!(err instanceof DeltaMismatch)) throw err; now = "mismatch"; }}
      }}
    }}
    checked += 1;
    if (mismatch) {{ if (now !== "mismatch") failures += 1; continue; }}
    if (now === "mismatch") {{ failures += 1; continue; }}
    if (now !== null) held = now;
    if (!isDeepStrictEqual(held, expected)) failures += 1;
  }}
}}
console.log(JSON.stringify({{ failures, checked }}));
"""
    out = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["failures"] == 0 and result["checked"] >= len(cases), result
