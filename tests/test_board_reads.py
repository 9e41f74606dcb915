"""The reads of a board are one path per encoding: the same definition's entries read in the same
order, with the same ranks, packed or lex-encoded (exact ties by descending player id, as the
game's own packed boards have always read them), and every read (stats too) serves every window
the board keeps."""

from __future__ import annotations

from typing import Any

import pytest

from leaderboard import BadRequest, Leaderboard, Submission, boards

from .conftest import NOW

# Ids that tie exactly (same value, same time): one a prefix of another, one of several UTF-8 bytes
TIED = ["a", "ab", "b", "é", "ana", "z"]
OTHERS = {"top": 9, "mid": 4, "low": 1}


def _definition(board_id: str, *, lex: bool, rank_mode: str) -> boards.Definition:
    # one key bounded 0..1000 fits a packed double; a negative bound makes the same board lex
    key = {"name": "score", "min": -1 if lex else 0, "max": 1000}
    return boards.parse({"id": board_id, "keys": [key], "windows": ["alltime"], "rank_mode": rank_mode})


async def _fill(lb: Leaderboard) -> None:
    """The same slips on the game's boards, a packed defined board and a lex one."""
    slips = {**dict.fromkeys(TIED, 5), **OTHERS}
    game = [Submission(f"g-{p}", p, v, NOW).fields() for p, v in slips.items()]
    defined = [
        {"id": f"{b}-{p}", "player": p, "board": b, "values": str(v), "ts": str(NOW)}
        for b in ("packed", "lex")
        for p, v in slips.items()
    ]
    for result in await lb.submit_batch([*game, *defined], now=NOW):
        assert result.status == "ok", result


@pytest.mark.parametrize("rank_mode", ["ordinal", "competition", "dense"])
async def test_exact_ties_read_in_one_order_on_every_encoding(lb: Leaderboard, rank_mode: str) -> None:
    packed = _definition("packed", lex=False, rank_mode=rank_mode)
    lex = _definition("lex", lex=True, rank_mode=rank_mode)
    assert (packed.encoding, lex.encoding) == (boards.PACKED, boards.LEX)
    await lb.create_board(packed)
    await lb.create_board(lex)
    await _fill(lb)

    def rows(entries: Any) -> list[tuple[str, int | None, int | None]]:
        return [(e.player, e.rank, e.score) for e in entries]

    # the game's packed board has always read ties by descending player id (bytewise)
    game = await lb.top("alltime", "global", n=20, at=NOW)
    tied = sorted(TIED, key=lambda p: p.encode(), reverse=True)
    assert [e.player for e in game.entries] == ["top", *tied, "mid", "low"]

    tops = [await lb.top("alltime", f"board:{b}", n=20, at=NOW) for b in ("packed", "lex")]
    assert [e.player for e in tops[0].entries] == [e.player for e in game.entries]
    assert rows(tops[0].entries) == rows(tops[1].entries)
    players = [*TIED, *OTHERS, "nobody"]
    ranks = [await lb.ranks(players, "alltime", f"board:{b}", at=NOW) for b in ("packed", "lex")]
    assert [(s.player, s.rank, s.score, s.top_percent) for s in ranks[0].standings] == [
        (s.player, s.rank, s.score, s.top_percent) for s in ranks[1].standings
    ]
    if rank_mode == "ordinal":
        assert [s.rank for s in ranks[0].standings][: len(TIED)] == [2 + tied.index(p) for p in TIED]
    for player in players:
        around = [await lb.around(player, "alltime", f"board:{b}", k=2, at=NOW) for b in ("packed", "lex")]
        assert rows(around[0].entries) == rows(around[1].entries)
        assert [e.top_percent for e in around[0].entries] == [e.top_percent for e in around[1].entries]


async def test_stats_serve_every_window_the_board_keeps(lb: Leaderboard) -> None:
    """A defined board's own windows (monthly, a season) the game does not keep are read like its
    others: stats and size too, not only top, around and ranks."""
    assert "monthly" not in lb.config.windows
    season = {"start_ms": NOW - 86_400_000, "length_s": 7 * 86_400}
    for board_id, key in (("m", {"name": "v"}), ("mx", {"name": "v", "min": -5})):  # packed, lex
        definition = boards.parse({"id": board_id, "keys": [key], "windows": ["monthly", "season"], "season": season})
        await lb.create_board(definition)
        slips = [{"id": f"{board_id}{p}", "player": p, "board": board_id, "values": "3", "ts": str(NOW)} for p in "xy"]
        assert [r.status for r in await lb.submit_batch(slips, now=NOW)] == ["ok", "ok"]
        for window_name in ("monthly", "season"):
            stats = await lb.stats(window_name, f"board:{board_id}", at=NOW)
            top = await lb.top(window_name, f"board:{board_id}", at=NOW)
            assert (stats.size, stats.period.label) == (2, top.period.label)
            assert stats.players >= 2
            assert await lb.size(window_name, f"board:{board_id}", at=NOW) == 2
    # a window the board does not keep stays a bad request
    with pytest.raises(BadRequest):
        await lb.stats("weekly", "board:m", at=NOW)


async def test_a_lex_member_written_before_the_player_part_was_complemented_reads_its_player(
    lb: Leaderboard, r: Any
) -> None:
    """An entry an earlier release wrote (the id as it is after the time) keeps reading as its
    player until a slip rewrites it."""
    lex = _definition("lex", lex=True, rank_mode="ordinal")
    await lb.create_board(lex)
    period = boards.period(lex, "alltime", NOW)
    args = ("alltime", period.label, "board:lex")
    old = boards.encode_member(lex, (7,), NOW, "x")
    old = old[: -len(boards.player_part("x"))] + "mïa"  # the earlier layout: key part, time, id
    await r.zadd(lb.keys.board(*args), {old: 0})
    await r.hset(lb.keys.members(*args), "mïa", old)
    assert boards.decode_member(lex, old) == ((7,), NOW, "mïa")
    top = await lb.top("alltime", "board:lex", at=NOW)
    assert [(e.player, e.keys) for e in top.entries] == [("mïa", (7,))]
    [standing] = (await lb.ranks(["mïa"], "alltime", "board:lex", at=NOW)).standings
    assert (standing.rank, standing.keys) == (1, (7,))
    around = await lb.around("mïa", "alltime", "board:lex", k=1, at=NOW)
    assert [e.player for e in around.entries] == ["mïa"]


# Two bounded keys (level desc, time asc): packed where their ranges fit one double, or lex asked
RACE_KEYS = [{"name": "level", "min": 0, "max": 99}, {"name": "ms", "direction": "asc", "min": 0, "max": 1_000_000}]
RACE = {  # exact ties (same values, same time), ties on the first key, both keys' extremes
    **dict.fromkeys(TIED, (7, 81_000)),
    "top": (99, 0),
    "fast": (7, 500),
    "slow": (7, 1_000_000),
    "low": (0, 0),
    "last": (0, 1_000_000),
}


@pytest.mark.parametrize("rank_mode", ["ordinal", "competition", "dense"])
async def test_two_bounded_keys_read_alike_packed_and_lex(lb: Leaderboard, rank_mode: str) -> None:
    made = []
    for board_id, asked in (("racep", {}), ("racel", {"encoding": "lex"})):
        raw = {"id": board_id, "keys": RACE_KEYS, "windows": ["alltime"], "rank_mode": rank_mode, **asked}
        made.append((await lb.create_board(boards.parse(raw))).encoding)
    assert made == [boards.PACKED, boards.LEX]
    slips = [
        {"id": f"{b}-{p}", "player": p, "board": b, "values": f"{v[0]},{v[1]}", "ts": str(NOW)}
        for b in ("racep", "racel")
        for p, v in RACE.items()
    ]
    assert {r.status for r in await lb.submit_batch(slips, now=NOW)} == {"ok"}

    def rows(entries: Any) -> list[tuple[Any, ...]]:
        return [(e.player, e.rank, e.keys, e.top_percent) for e in entries]

    tops = [await lb.top("alltime", f"board:{b}", n=20, at=NOW) for b in ("racep", "racel")]
    tied = sorted(TIED, key=lambda p: p.encode(), reverse=True)
    assert [e.player for e in tops[0].entries] == ["top", "fast", *tied, "slow", "low", "last"]
    assert [e.keys for e in tops[0].entries] == [RACE[e.player] for e in tops[0].entries]
    assert rows(tops[0].entries) == rows(tops[1].entries)
    players = [*RACE, "nobody"]
    ranks = [await lb.ranks(players, "alltime", f"board:{b}", at=NOW) for b in ("racep", "racel")]
    assert [(s.player, s.rank, s.keys, s.top_percent) for s in ranks[0].standings] == [
        (s.player, s.rank, s.keys, s.top_percent) for s in ranks[1].standings
    ]
    for player in players:
        around = [await lb.around(player, "alltime", f"board:{b}", k=2, at=NOW) for b in ("racep", "racel")]
        assert rows(around[0].entries) == rows(around[1].entries)
