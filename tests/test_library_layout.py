"""The function library's layout: one file per concept under lua/, assembled in the order of
lua/parts.txt into one chunk (leaderboard/assembly.py). The chunk stays far below Lua 5.1's 200
locals, a Redis error raised inside it names the file and line it came from, and its header's key
schema and function table say what keys.py builds and what the library registers."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from leaderboard import Leaderboard
from leaderboard.assembly import MANIFEST, SINGLE_FILE, assemble, from_directory, packaged
from leaderboard.keys import Keys
from leaderboard.library import library_code
from leaderboard.windows import window

from .conftest import NOW

LUA = Path(__file__).resolve().parent.parent / "lua"
# Top-level locals as every file writes them: at column 0 (anything inside a function is indented),
# `local function name` or `local a, b = ...`. Lua 5.1 refuses a chunk of more than 200.
TOP_LOCAL = re.compile(r"^local (?:function (\w+)|([\w, ]+?)\s*=)", re.MULTILINE)
MOST_LOCALS = 100


def top_level_locals(text: str) -> list[str]:
    names: list[str] = []
    for function, variables in TOP_LOCAL.findall(text):
        names += [function] if function else [v.strip() for v in variables.split(",")]
    return names


def test_the_chunk_keeps_few_top_level_locals() -> None:
    names = top_level_locals(library_code())
    assert len(names) <= MOST_LOCALS, names
    assert len(names) == len(set(names))  # a second top-level local of one name hides the first
    # what the count reads: each file's module table is one of them
    assert {"valid", "int64", "batch", "submit", "moderation"} <= set(names)


def test_the_manifest_names_every_file_once_header_first_registration_last() -> None:
    library = packaged()
    names = [name for name, _ in library.parts]
    assert sorted(names) == sorted(p.name for p in LUA.glob("*.lua")) and len(set(names)) == len(names)
    assert names[0] == "text.lua" and names[-1] == "registration.lua"
    assert library.text.startswith("#!lua name=leaderboard\n")
    assert library.text.count("#!lua") == 1
    registering = [name for name, _ in library.parts if "redis.register_function" in (LUA / name).read_text()]
    assert registering == ["registration.lua"]


def test_the_line_map_names_each_files_lines() -> None:
    files = {MANIFEST: "# order\na.lua\n\nb.lua\n", "a.lua": "one\ntwo\n", "b.lua": "three\nfour"}
    library = assemble(lambda name: files[name])
    assert library.text == "one\ntwo\nthree\nfour\n"
    assert [library.locate(n) for n in (1, 2, 3, 4)] == [("a.lua", 1), ("a.lua", 2), ("b.lua", 1), ("b.lua", 2)]
    with pytest.raises(ValueError):
        library.locate(0)
    # Redis 7's two ways of naming a line: a runtime error's, and the position it appends
    assert library.translate("user_function:3: attempt to index nil script: f, on @user_function:4.") == (
        "b.lua:1: attempt to index nil script: f, on @b.lua:2."
    )
    assert library.translate("ERR bad_request n must be 1..1000") == "ERR bad_request n must be 1..1000"


def test_a_tree_without_a_manifest_is_its_one_file() -> None:
    def read(name: str) -> str:
        if name != SINGLE_FILE:
            raise FileNotFoundError(name)
        return "#!lua name=leaderboard\nlocal x = 1\n"

    library = assemble(read)
    assert library.text == read(SINGLE_FILE) and library.parts == ((SINGLE_FILE, 1),)


def test_the_packaged_library_is_the_trees() -> None:
    assert library_code() == from_directory(LUA).text


async def test_a_redis_error_inside_the_library_names_its_file_and_line(lb: Leaderboard, r: aioredis.Redis) -> None:
    label = window("weekly").resolve(None, NOW).label
    await r.set(lb.keys.board("weekly", label, "global"), "not a board")
    with pytest.raises(redis.exceptions.ResponseError) as raised:
        await lb.top("weekly", at=NOW)
    # lb_top's read of a packed board (reads.slice, in reads.lua), named where Redis named
    # user_function:<line>
    lines = (LUA / "reads.lua").read_text().splitlines()
    start = lines.index("function reads.slice(board, enc, param, start, stop)")
    line = next(i for i in range(start, len(lines)) if "redis.call(" in lines[i] and "'REV'" in lines[i]) + 1
    assert f"reads.lua:{line}" in str(raised.value)
    assert "user_function" not in str(raised.value)


async def test_the_header_lists_every_registered_function(r: aioredis.Redis) -> None:
    """Its function table: each registered function once, the read-only ones (registered
    no-writes) marked so, and nothing else."""
    header = header_text()
    table = header[header.index("\nFunctions (") : header.index("\nScore packing")]
    rows = re.split(r"^  (?=lb_)", table, flags=re.MULTILINE)[1:]  # a row and its continuation lines
    listed = {row.split()[0]: "(no-writes)" in row for row in rows}
    [library] = await r.function_list(library="leaderboard")
    fields = dict(zip(library[::2], library[1::2], strict=True))  # name, value, ... (RESP2)
    functions = [dict(zip(f[::2], f[1::2], strict=True)) for f in fields["functions"]]
    registered = {f["name"]: "no-writes" in f["flags"] for f in functions}
    assert len(rows) == len(listed) and len(registered) > 20
    assert listed == registered


def test_the_header_names_every_key_keys_py_builds() -> None:
    header = header_text()
    named = set(re.findall(r"^  (lb:\{g\}:\S+)", header, re.MULTILINE))
    built = set()
    keys = Keys("g")
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_") or name in ("game", "prefix", "board_pattern"):  # not keys: a SCAN pattern
            continue
        if isinstance(member, property):
            built.add(getattr(keys, name))
        else:  # each parameter as the header writes it: <window>, <period>, ...
            params = [p for p in inspect.signature(member).parameters if p != "self"]
            built.add(getattr(keys, name)(*(f"<{p}>" for p in params)))
    assert built == named


def header_text() -> str:
    text = (LUA / "text.lua").read_text()
    return text[: text.index("]]")]
