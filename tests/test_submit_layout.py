"""lb_submit's argument layout has three writings that must agree: the library's header of lb_submit
(its Input block, in lua/submit.lua), the locals the library reads each record into, and the encoder of
leaderboard/batch.py (its ``*_FIELDS`` tuples, and what it writes under each name). A field added,
dropped or moved in any one of them fails here, before a batch reaches Redis. The library's error
codes are held to its header's list the same way."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from leaderboard import GameConfig, Submission, boards
from leaderboard.batch import (
    BOARD_FIELDS,
    FULL_FIELDS,
    LAYOUT_FIELDS,
    PERIOD_FIELDS,
    SETTINGS_FIELDS,
    SUBMISSION_FIELDS,
    SUBMIT_DEFINITION_FIELDS,
    SUBMIT_LAYOUT,
    encode_batch,
)
from leaderboard.library import library_code
from leaderboard.submission import SLIP_PARTS, entry_fields
from leaderboard.windows import tournament_window, window

from .properties import bounded

LIBRARY = library_code()  # assembled: the files of lua/ in order
RECORDS = {
    "settings": SETTINGS_FIELDS,
    "period": PERIOD_FIELDS,
    "definition": SUBMIT_DEFINITION_FIELDS,
    "layout": LAYOUT_FIELDS,
    "board": BOARD_FIELDS,
    "submission": SUBMISSION_FIELDS,
    "full": FULL_FIELDS,
}
NOW = 1_764_592_200_000  # 2025-12-01T12:30:00Z
HOUR_MS = 3_600_000


def header_records() -> dict[str, tuple[str, ...]]:
    """The record table of lb_submit's Input block: ``    <record>  <field> <field> ...``."""
    block = LIBRARY[LIBRARY.index("--[[ lb_submit:") :]
    block = block[: block.index("]]")]
    found = re.findall(r"^    (\w+) +([\w ]+)$", block, re.MULTILINE)
    return {record: tuple(fields.split()) for record, fields in found}


def code_records() -> dict[str, tuple[str, ...]]:
    """The locals each record is read into: ``local a, b, ... = unpack(args, ..., <RECORD>_FIELDS)``,
    each checked against the field count the library declares for it (every function's records:
    ``<module>.<RECORD>_FIELDS = <n>`` at the top level of its file)."""
    sizes: dict[str, int] = {}
    for names, values in re.findall(r"^((?:\w+\.[A-Z_]+(?:, )?)+) = ([\d, ]+)$", LIBRARY, re.MULTILINE):
        for qualified, value in zip(names.split(", "), values.split(", "), strict=True):
            name = qualified.partition(".")[2]
            if name.endswith("_FIELDS"):
                sizes[name.removesuffix("_FIELDS").lower()] = int(value)
    read = {}
    for names, record in re.findall(r"local ([\w, ]+?) =\s+unpack\(args, [^)]*?\b(\w+)_FIELDS\b[^)]*\)", LIBRARY):
        fields = tuple(names.split(", "))
        assert len(fields) == sizes[record.lower()], record
        read[record.lower()] = fields
    return read


def slip_parts() -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[str, ...]]]:
    """The slip's parts as the header names them (``parts `a b ...` (SLIP_PARTS)``), as the
    library's two patterns capture them, and the locals it reads their captures into."""
    named = re.search(r"parts `([\w ]+)` \(SLIP_PARTS\)", LIBRARY)
    assert named is not None
    patterns = re.search(r"^\w+\.COMMON_SLIP, \w+\.ANY_SLIP = '(.*)', '(.*)'$", LIBRARY, re.MULTILINE)
    assert patterns is not None
    captures = tuple(str(len(re.findall(r"\((?!\?)", p))) for p in patterns.groups())
    matches = re.findall(r"(\w[\w, ]*) = slip:match\((?:\w+\.)?\w+_SLIP\)", LIBRARY)
    read = [tuple(names.split(", ")) for names in matches]
    return tuple(named.group(1).split()), captures, read


def test_the_header_the_library_and_the_encoder_name_the_same_fields() -> None:
    header = header_records()
    assert header == RECORDS
    read = code_records()
    assert {record: read[record] for record in RECORDS} == RECORDS
    named, captures, reads = slip_parts()
    assert named == SLIP_PARTS
    assert captures == (str(len(SLIP_PARTS)),) * 2  # one capture per part, in both patterns
    assert reads == [SLIP_PARTS] * 2


def test_the_encoder_writes_each_field_where_its_name_says() -> None:
    config = GameConfig(
        game="layout",
        windows=("daily", "alltime"),
        window_operators={"alltime": "incr"},
        window_rank_modes={"daily": "dense"},
    )
    cup = tournament_window("cup", NOW - HOUR_MS, NOW + HOUR_MS)
    tower = boards.parse(
        {
            "id": "tower",
            "keys": [{"name": "floor", "min": 0, "max": 500}, {"name": "ms", "direction": "asc", "operator": "set"}],
            "windows": ["daily"],
            "time_zone": "+05:30",
            "tie": "last",
            "rank_mode": "competition",
            "metadata_bytes": 16,
        }
    )
    entries = [
        {"id": "s1", "player": "mia", "points": "70", "ts": str(NOW - 5), "name": "Mia"},
        {"id": "s2", "player": "leo", "points": "9", "ts": str(NOW - 4), "op": "set", "region": "eu"},
        {"id": "s3", "player": "ada", "points": "3", "ts": str(NOW - 3), "tournament": "cup"},
        {"id": "s4", "player": "kai", "board": "tower", "values": "12,-81250", "meta": "r1", "ts": str(NOW - 2)},
    ]
    plan = encode_batch(config, entries, NOW, tournaments={"cup": cup}, definitions={"tower": tower})
    args, keys = list(plan.args), config.keys

    def take(names: tuple[str, ...]) -> dict[str, str | int]:
        record = dict(zip(names, args[: len(names)], strict=True))
        del args[: len(names)]
        return record

    def key(index: str | int) -> str:
        assert isinstance(index, int) and index >= 1
        return plan.keys[index - 1]

    settings = take(SETTINGS_FIELDS)
    assert settings == {
        "call_layout": SUBMIT_LAYOUT,
        "now_ms": NOW,
        "activity_maxlen": config.activity_maxlen,
        "clock_skew_ms": config.clock_skew_ms,
        "idempotency_ms": config.idempotency_s * 1000,
        "announce": keys.announce_channel,
        "rows": 1,
        "max_scopes": config.max_scopes,
    }

    periods = [take(PERIOD_FIELDS) for _ in range(int(args.pop(0)))]
    assert {(p["window"], p["label"]) for p in periods} == {
        ("daily", "2025-12-01"),
        ("alltime", "all"),
        ("t-cup", "cup"),
    }
    assert len(periods) == 4  # tower's day starts at 18:30 UTC: its own period record
    for p in periods:
        name, label = str(p["window"]), str(p["label"])
        spec = cup if name == "t-cup" else window(name)
        period = spec.period(NOW)
        if p["start_ms"] != period.start_ms:  # tower's
            period = boards.period(tower, name, NOW)
            assert p["mode"] == "competition"  # the board's own, and its own close marker
            assert key(p["closed_key"]) == keys.closed_marker(name, label, "board:tower")
        else:
            assert p["mode"] == config.rank_mode_for(name)
            assert key(p["closed_key"]) == keys.closed_marker(name, label)
        assert (p["start_ms"], p["end_ms"], p["expire_at"]) == (period.start_ms, period.end_ms, period.expire_at_s)
        assert (p["shift"], p["unit_ms"]) == (spec.shift, spec.unit_ms)
        assert key(p["players_key"]) == keys.players(name, label)
        assert (key(p["entrants_key"]) == keys.entrants("cup")) if name == "t-cup" else p["entrants_key"] == 0

    definitions = [take(SUBMIT_DEFINITION_FIELDS) for _ in range(int(args.pop(0)))]
    game = {  # the game's boards as the environment shapes them, sent as a definition too
        "encoding": "points",
        "tie": "first",
        "metadata_bytes": 0,
        "operator": config.operator,
        "key_spec": f"d,,0,{2**63 - 1}",
        "top_n": config.top_n,
        "scoped": 1,
        "points": 1,
    }
    assert definitions == [
        game,
        {
            "encoding": "lex",
            "tie": "last",
            "metadata_bytes": 16,
            "operator": "keys",
            "key_spec": f"d,best,0,500;a,set,{-(2**63)},{2**63 - 1}",
            "top_n": 10,
            "scoped": 0,
            "points": 0,
        },
    ]

    layouts = []
    for _ in range(int(args.pop(0))):
        layout = take(LAYOUT_FIELDS)
        layouts.append([take(BOARD_FIELDS) for _ in range(int(layout["board_count"]))])
        assert key(layout["seen_key"]) == keys.seen(NOW // HOUR_MS)
        assert layout["seen_expire_at"] == ((NOW // HOUR_MS + 1) * HOUR_MS + config.idempotency_s * 1000) // 1000
    for board in (b for refs in layouts for b in refs):
        p = periods[int(board["period"]) - 1]
        at = (str(p["window"]), str(p["label"]), str(board["scope"]))
        assert key(board["board_key"]) == keys.board(*at)
        assert (key(board["hist_key"]), key(board["points_key"])) == (keys.histogram(*at), keys.points(*at))
        if board["scope"] == "board:tower":
            assert (board["definition"], key(board["members_key"]), key(board["meta_key"])) == (
                2,
                keys.members(*at),
                keys.metadata(*at),
            )
            continue
        assert (board["definition"], board["members_key"], board["meta_key"]) == (1, 0, 0)
        assert board["op"] == config.operator_for(at[0]) if at[0] != "t-cup" else board["op"] == config.operator

    submissions = []
    for _ in range(int(args.pop(0))):
        sub = take(SUBMISSION_FIELDS)
        if sub["slip"] == "":  # a full record follows
            sub |= take(FULL_FIELDS)
        else:  # the slip's parts, and the rest of the record empty
            parts = str(sub["slip"]).split("\t")
            sub |= dict(zip(SLIP_PARTS, parts, strict=True)) | {"op": "", "outcome": "", "values": "", "meta": ""}
        submissions.append(sub)
    assert args == []  # every argument was named
    assert [s["slip"] == "" for s in submissions] == [False, True, False, True]  # op set; a defined board's
    for sub, entry in zip(submissions, entries, strict=True):
        sub["ts"] = str(sub["ts"])  # an int in a full record (the Redis client writes it as digits)
        assert (sub["id"], sub["player"], sub["points"], sub["ts"]) == (
            entry["id"],
            entry["player"],
            entry.get("points", ""),
            entry["ts"],
        )
        assert (sub["op"], sub["name"]) == (entry.get("op", ""), entry.get("name", ""))
        assert (sub["values"], sub["meta"]) == (entry.get("values", ""), entry.get("meta", ""))
        refs = layouts[int(sub["layout"]) - 1]
        written = {(periods[int(b["period"]) - 1]["window"], b["scope"]) for b in refs}
        if "board" in entry:
            assert written == {("daily", "board:tower")}
        elif "tournament" in entry:
            assert written == {("t-cup", "global")}
        else:
            scopes = {"global", f"region:{entry['region']}"} if "region" in entry else {"global"}
            assert written == {(w, s) for w in ("daily", "alltime") for s in scopes}


def test_the_header_names_every_error_code_the_library_answers() -> None:
    header = LIBRARY[: LIBRARY.index("]]")]
    codes = set(re.findall(r"(?:refuse|entry_error)\('(\w+)'", LIBRARY))
    codes |= set(re.findall(r"'(missing_id|invalid_\w+)'", LIBRARY))  # the submission id's, by submission_id
    codes |= {f"invalid_{field}" for field in re.findall(r"^  (\w+) = function\(v\)", LIBRARY, re.MULTILINE)}
    codes.discard("invalid_")  # refuse('invalid_' .. field, ...): the profile fields, added above
    assert codes and {code for code in codes if not re.search(rf"\b{code}\b", header)} == set()


@bounded(150)
@given(
    st.lists(
        st.tuples(
            st.integers(-3 * HOUR_MS, 30_000),  # across hours, the days' ends, the clock's edges
            st.sampled_from([None, "eu", "na"]),
            st.sampled_from([None, "Ana", "Zoë"]),
            st.sampled_from([None, "incr"]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_a_slip_entry_is_laid_out_as_its_fields_by_name(
    slips: list[tuple[int, str | None, str | None, str | None]],
) -> None:
    """The scorer's two readings of a queue entry, a slip (this release's; most take the fast path
    of a slip alone) and fields by name (an earlier release's), make the same call."""
    config = GameConfig(game="g", windows=("daily", "weekly", "alltime"))
    now = 1_798_415_999_000  # 2026-12-27T23:59:59Z, a Sunday: the next second is a new day and week
    subs = [
        Submission(f"s{i}", f"p{i % 7}", i * 13, now + dt, region=region, name=name, op=op)
        for i, (dt, region, name, op) in enumerate(slips)
    ]
    as_slips = encode_batch(config, [s.fields() for s in subs], now)
    by_name = encode_batch(config, [entry_fields(s.fields()) for s in subs], now)
    assert (as_slips.keys, as_slips.args, as_slips.entries) == (by_name.keys, by_name.args, by_name.entries)
