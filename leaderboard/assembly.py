"""The function library's text: the files of lua/ assembled into one ``FUNCTION LOAD``, and the
line map that names a line of that text as ``file.lua:line``.

Redis loads a library as one chunk, so the files are joined in the order lua/parts.txt names (one
file a line): the first holds ``#!lua name=leaderboard`` and the key schema, the last registers
the functions. The same function reads a library wherever its files are: the installed package
(``packaged()``, what ``leaderboard.library.library_code()`` loads) and another release's tree (the
benchmarks' baselines, ``from_directory()``). A tree from before the library had a manifest holds
one file, leaderboard.lua, which is its library whole::

    library = packaged()
    library.locate(1200)                       # ('submit.lua', 57)
    library.translate("ERR ... @user_function:1200.")  # 'ERR ... @submit.lua:57.'
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path

MANIFEST = "parts.txt"
SINGLE_FILE = "leaderboard.lua"  # the whole library, in a tree from before the manifest
# Where Redis 7 names a line of a library in an error: the chunk is called "user_function", in a
# runtime error ("user_function:12: attempt to ...", "... on @user_function:12.") as in a compile error.
_POSITION = re.compile(r"user_function:(\d+)")


@dataclass(frozen=True, slots=True)
class Library:
    """An assembled library: its text and where each file starts in it (1-based lines)."""

    text: str
    parts: tuple[tuple[str, int], ...]  # (file name, the line of the text its first line is), in order

    def locate(self, line: int) -> tuple[str, int]:
        """The file and the line in it of line ``line`` of the text."""
        i = bisect_right([first for _, first in self.parts], line) - 1
        if i < 0 or line < 1:
            raise ValueError(f"line {line} is not in the library")
        name, first = self.parts[i]
        return name, line - first + 1

    def translate(self, message: str) -> str:
        """An error's text with each of Redis's positions in the library as ``file.lua:line``
        (the rest of the text, an error code included, as it was)."""

        def named(found: re.Match[str]) -> str:
            try:
                name, line = self.locate(int(found.group(1)))
            except ValueError:
                return found.group(0)
            return f"{name}:{line}"

        return _POSITION.sub(named, message)


def assemble(read: Callable[[str], str]) -> Library:
    """The library whose files ``read(name)`` returns (FileNotFoundError for a missing one): the
    manifest's files in its order, or the single file of a tree without a manifest."""
    try:
        manifest = read(MANIFEST)
    except FileNotFoundError:
        names = [SINGLE_FILE]
    else:
        names = [line.strip() for line in manifest.splitlines() if line.strip() and not line.startswith("#")]
    texts: list[str] = []
    parts: list[tuple[str, int]] = []
    line = 1
    for name in names:
        text = read(name)
        if not text.endswith("\n"):
            text += "\n"  # the next file starts on a line of its own
        parts.append((name, line))
        texts.append(text)
        line += text.count("\n")
    return Library("".join(texts), tuple(parts))


@cache
def packaged() -> Library:
    """This release's library, from the package ``leaderboard.lua`` (lua/ in the tree, package
    data in a wheel); read once per process."""
    root = files("leaderboard.lua")
    return assemble(lambda name: root.joinpath(name).read_text(encoding="utf-8"))


def from_directory(directory: Path) -> Library:
    """The library of a tree's lua/ directory (another release's: a benchmark's baseline)."""
    return assemble(lambda name: (directory / name).read_text(encoding="utf-8"))
