"""Property: the Python validator and the function library give every submission the same verdict.

Inputs are stream entries (what the library reads): any bytes, kept as surrogates where they
are not UTF-8, plus the values next to each rule's edge. A valid base slip gets one or more
fields replaced. With one field replaced, both layers must give the same code; with several,
both must refuse, each with a code that one of the bad fields alone would get (the layers may
check fields in different orders). A refused slip writes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

import redis.asyncio as aioredis
from hypothesis import event, given
from hypothesis import strategies as st

from fleet.redis_server import RedisServer
from leaderboard import WINDOWS, GameConfig, InvalidSubmission, Leaderboard, Submission, connect
from leaderboard.batch import SETTINGS_FIELDS, decode_batch, encode_batch
from leaderboard.submission import SLIP_PARTS

from .conftest import NOW
from .properties import bounded

HOUR = 3_600_000
BASE = {"id": "sub-1", "player": "ana", "points": "10", "ts": str(NOW)}
CONFIGS = [("daily", "weekly", "alltime"), ("daily",), ("weekly", "monthly"), ("alltime",)]


# Bytes at UTF-8's edges: ASCII's last, continuation bytes' ends, the overlong leads (C0, C1, E0
# then 80-9F, F0 then 80-8F), the surrogates' lead (ED then A0-BF), F4's limit and the leads past it.
_EDGE_BYTES = [
    0x41,
    0x7F,
    0x80,
    0x8F,
    0x90,
    0x9F,
    0xA0,
    0xBF,
    0xC0,
    0xC1,
    0xC2,
    0xDF,
    0xE0,
    0xED,
    0xEF,
    0xF0,
    0xF4,
    0xF5,
    0xFF,
]


def _stream_text(max_size: int) -> st.SearchStrategy[str]:
    """A stream field as the wrappers read it: bytes, undecodable ones kept as surrogates."""
    edges = st.lists(st.sampled_from(_EDGE_BYTES), max_size=max_size).map(bytes)
    return (st.binary(max_size=max_size) | edges).map(lambda b: b.decode("utf-8", "surrogateescape")) | st.text(
        max_size=max_size
    )


_limits = [str(w.max_points + d) for w in WINDOWS.values() for d in (0, 1)]
_plain = st.text("abcXYZ019_-é", min_size=1, max_size=12)  # valid in every text field
# Per field: values at a rule's edge, plausible valid values, and anything at all.
FIELDS: dict[str, st.SearchStrategy[str]] = {
    "id": st.sampled_from(["", "i" * 64, "i" * 65, "é" * 32, "é" * 33]) | _plain | _stream_text(70),
    "player": st.sampled_from(
        [
            "",
            "p" * 64,
            "p" * 65,
            "ok\udcff",
            "\udced\udca0\udc80",
            "a\x00",
            "a\n",
            "\u202eb",
            "\u2066c",
            "z\u200bw",
            "\ufeff",
            "\x85",
        ]
    )
    | _plain
    | _stream_text(70),
    "name": st.sampled_from(["", "n" * 64, "n" * 65, "Ünïcødé ✓"]) | _plain | _stream_text(70),
    "points": st.one_of(
        st.sampled_from(_limits),
        st.sampled_from(["", "-5", "1.5", "nan", "inf", "1e3", " 12", "0x10", "٣", "007", "9" * 16, "9" * 17]),
        st.integers(0, 10**17).map(str),
        _stream_text(20),
    ),
    "op": st.sampled_from(["", "best", "incr", "set", "max", "BEST", "best "]) | _stream_text(8),
    "ts": st.one_of(
        st.sampled_from(["", "-1", str(NOW) + ".0", "9" * 15, "9" * 16, str(NOW - 48 * HOUR), str(NOW + 30_000)]),
        st.integers(NOW - 50 * HOUR, NOW + 90_000).map(str),
        _stream_text(16),
    ),
    "region": st.sampled_from(["", "eu", "e u", "r" * 32, "r" * 33, "eu:west", "EU_w-1"]) | _stream_text(40),
    "mode": st.sampled_from(["", "duel", "m" * 33, "m:x"]) | _stream_text(40),
}
overrides = st.dictionaries(st.sampled_from(list(FIELDS)), st.just(""), min_size=1, max_size=4).flatmap(
    lambda chosen: st.fixed_dictionaries({name: FIELDS[name] for name in chosen})
)


def python_verdict(fields: Mapping[str, str], config: GameConfig) -> str:
    try:
        Submission.parse(fields, now_ms=NOW, rules=config.rules())
    except InvalidSubmission as exc:
        return exc.code
    return "ok"


def slip_entry(fields: Mapping[str, str]) -> dict[str, str] | None:
    """The same submission as a queue entry of this release: its slip and the other fields (None
    when a field holds a tab, which Submission.fields never writes)."""
    parts = [fields.get(k, "") for k in SLIP_PARTS]
    if any("\t" in part for part in parts):
        return None
    return {"slip": "\t".join(parts), **{k: v for k, v in fields.items() if k not in SLIP_PARTS}}


async def library_verdicts(lb: Leaderboard, r: aioredis.Redis, fields: dict[str, str]) -> list[str]:
    """The verdict of the wrapper the scorer uses, for the entry by name and as a slip entry, and
    where the wrapper refuses a timestamp before the call, the library's own (called with a clock
    at which the wrapper lets it through)."""
    verdicts = []
    for how in ("by name", "slip", "direct"):
        await r.flushall()  # keys only: the function library stays loaded
        if how != "direct":
            entry = fields if how == "by name" else slip_entry(fields)
            if entry is None:
                continue
            [result] = await lb.submit_batch([entry], now=NOW)
        else:
            ts = fields["ts"]
            if not (ts.isascii() and ts.isdigit() and abs(int(ts) - NOW) < 60 * HOUR):
                continue
            plan = encode_batch(lb.config, [fields], int(ts))
            if plan.count == 0:  # refused before the call for another reason (a scope)
                continue
            plan.args[SETTINGS_FIELDS.index("now_ms")] = NOW  # the function's clock argument
            [result] = decode_batch(plan, await r.fcall("lb_submit", len(plan.keys), *plan.keys, *plan.args))
        verdict = "ok" if result.status == "ok" else str(result.code)
        assert result.status in ("ok", "error"), result
        if verdict != "ok":
            assert result.message
            assert await r.dbsize() == 0, f"refused ({verdict}) but wrote keys"
        verdicts.append(verdict)
    return verdicts


def test_python_and_library_give_the_same_verdict(redis_server: RedisServer) -> None:
    with asyncio.Runner() as runner:
        r = connect(redis_server.url)
        assert isinstance(r, aioredis.Redis)

        @bounded(250)
        @given(st.sampled_from(CONFIGS), overrides)
        def check(windows: tuple[str, ...], override: dict[str, str]) -> None:
            config = GameConfig(game="prop", windows=windows)
            fields = {**BASE, **override}
            expected = python_verdict(fields, config)
            alone = {python_verdict({**BASE, name: value}, config) for name, value in override.items()}
            assert expected in alone  # a refusal is caused by one field, never by a combination
            event(expected)
            for verdict in runner.run(library_verdicts(Leaderboard(r, config), r, fields)):
                if len(override) == 1 or expected == "ok" or verdict == "ok":
                    assert verdict == expected, (fields, verdict, expected)
                else:
                    assert verdict in alone - {"ok"}, (fields, verdict, alone)

        try:
            check()
        finally:
            runner.run(r.aclose())


def test_every_short_name_at_utf8_s_edges_gets_python_s_verdict(redis_server: RedisServer) -> None:
    """The library's UTF-8 check (valid.utf8) against Python's decoder on every name of one to three
    bytes drawn from UTF-8's edges, and on four-byte ones led by F0, F4 and F5: drawn examples
    reach these corners rarely, so every one of them is tried, in one batch."""
    seqs = [bytes(p) for n in (1, 2, 3) for p in itertools.product(_EDGE_BYTES, repeat=n)]
    seqs += [
        bytes((lead, a, b, c))
        for lead in (0xF0, 0xF4, 0xF5)
        for a in (0x80, 0x8F, 0x90, 0xBF)
        for b in (0x41, 0x80, 0xBF)
        for c in (0x41, 0x80)
    ]
    config = GameConfig(game="edges", windows=("alltime",))
    slips = [
        {**BASE, "id": f"e{i}", "player": f"p{i}", "name": s.decode("utf-8", "surrogateescape")}
        for i, s in enumerate(seqs)
    ]
    expected = [python_verdict(slip, config) for slip in slips]
    assert {"ok", "invalid_name"} <= set(expected)

    async def verdicts() -> list[str]:
        r = connect(redis_server.url)
        try:
            await r.flushall()
            results = await Leaderboard(r, config).submit_batch(slips, now=NOW)
            return ["ok" if result.status == "ok" else str(result.code) for result in results]
        finally:
            await r.aclose()

    got = asyncio.run(verdicts())
    wrong = [(seqs[i].hex(), g, e) for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
    assert not wrong, wrong[:10]
