"""Boards as code: board definitions kept as files, one JSON definition each, checked against
the published schema (docs/board-definition.schema.json, leaderboard/boardschema.py) and
deployed by ``python -m scorer board apply FILES...``::

    plan = await plan_files(lb, ["boards/tower.json", "boards/speedrun.json"])
    print(show(plan))
    if not refused(plan):
        await apply(lb, plan)

The plan says, per file, what applying it does: ``created``, ``updated`` (the next version),
``unchanged`` (the stored definition is the file's, its version aside) or ``refused`` with the
code the HTTP API and the socket give the same definition (a change that would reorder a live
board: ``board_reorder``). A plan with a refusal is not applied at all, so a studio's CI fails
before anything of a broken change lands; applying the same files again is all ``unchanged``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from leaderboard import Leaderboard, boards, bodies
from leaderboard.boardschema import FIELD_CODES, file_schema
from leaderboard.errors import InvalidBoard

CREATED, UPDATED, UNCHANGED, REFUSED = "created", "updated", "unchanged", "refused"
_SCHEMAS = {"BoardFile": file_schema()}


@dataclass(frozen=True, slots=True)
class Step:
    """What applying one file does."""

    path: str
    board: str  # the definition's id ("" when the file has none readable)
    action: str  # CREATED, UPDATED, UNCHANGED or REFUSED
    definition: boards.Definition | None = None  # what is stored when applied (CREATED, UPDATED)
    code: str = ""  # REFUSED: the stable code (docs/protocol.md)
    detail: str = ""  # REFUSED: why; UPDATED: the fields that change


def read_file(path: str) -> boards.Definition:
    """A board file's definition: JSON, the published schema's shape, then the parser's rules;
    InvalidBoard with the code the API gives the same definition."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidBoard("invalid_board", f"cannot read the file: {exc.strerror}") from None
    if len(raw) > boards.MAX_DEFINITION_BYTES:
        raise InvalidBoard("invalid_board", f"a definition is at most {boards.MAX_DEFINITION_BYTES} bytes of JSON")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidBoard("invalid_board", "the file is not valid JSON") from None
    violation = bodies.check(_SCHEMAS, "BoardFile", value, FIELD_CODES)
    if violation is not None:
        raise InvalidBoard(violation.code, violation.message)
    return boards.parse(value)


def _changed(old: boards.Definition, new: boards.Definition) -> list[str]:
    """The fields ``new`` sets otherwise than ``old`` (the version aside: the store counts it)."""
    before, after = old.as_dict(), new.as_dict()
    return sorted(f for f in before.keys() | after.keys() if f != "version" and before.get(f) != after.get(f))


async def _step(lb: Leaderboard, path: str, definition: boards.Definition) -> Step:
    board = definition.id
    lb.boards.admit(definition)  # the game's default takes only what its configuration can carry
    stored = await lb.boards.stored_json(board)
    if stored is None and board != boards.DEFAULT_ID:
        deleted = await lb.boards.deleted_json(board)
        # its entries are kept under the id: created again, it reads them as written
        base = None if deleted is None else boards.parse(deleted)
        definition = boards.created(definition, base)  # the encoding it will have
        if base is not None:
            boards.check_recreate(base, definition)
        return Step(path, board, CREATED, definition)
    old = boards.parse(stored) if stored is not None else lb.boards.defaults[boards.DEFAULT_ID]
    # the stored encoding kept unless the file asks for another (board_reorder)
    changed = _changed(old, boards.check_update(old, definition))
    if not changed:
        return Step(path, board, UNCHANGED)
    return Step(path, board, UPDATED, definition, detail=", ".join(changed))


async def plan_files(lb: Leaderboard, paths: Sequence[str]) -> list[Step]:
    """One step per file, in the order given; nothing is written."""
    steps: list[Step] = []
    seen: dict[str, str] = {}
    for path in paths:
        board = ""
        try:
            definition = read_file(path)
            board = definition.id
            if board in seen:
                raise InvalidBoard("invalid_board", f"board {board} is defined by {seen[board]} too")
            seen[board] = path
            steps.append(await _step(lb, path, definition))
        except InvalidBoard as exc:
            steps.append(Step(path, board, REFUSED, code=exc.code, detail=exc.message))
    return steps


def refused(plan: Sequence[Step]) -> list[Step]:
    return [s for s in plan if s.action == REFUSED]


async def apply(lb: Leaderboard, plan: Sequence[Step]) -> list[Step]:
    """Store the plan's created and updated definitions, through the calls the API makes; the
    steps as done (a board changed by someone else since the plan: refused, with the library's
    code, ``stale_board`` or ``board_exists``; the others are still applied, and a second run
    applies what is left)."""
    done = []
    for step in plan:
        try:
            if step.action == CREATED and step.definition is not None:
                step = Step(step.path, step.board, CREATED, await lb.create_board(step.definition))
            elif step.action == UPDATED and step.definition is not None:
                stored = await lb.update_board(step.definition)
                step = Step(step.path, step.board, UPDATED, stored, detail=step.detail)
        except InvalidBoard as exc:
            step = Step(step.path, step.board, REFUSED, code=exc.code, detail=exc.message)
        done.append(step)
    return done


def show(plan: Sequence[Step], *, note: str = "") -> str:
    """The plan as lines, ``<action> <board> (<file>): <detail>``, then a count by action."""
    lines = []
    for s in plan:
        what = f"{s.action:<9} {s.board or '-'} ({s.path})"
        if s.action == REFUSED:
            what += f": {s.code}: {s.detail}"
        elif s.action == UPDATED:
            what += f": {s.detail}"
        elif s.action == CREATED and s.definition is not None:
            what += f": {s.definition.encoding} encoding"
        lines.append(what)
    tail = ", ".join(f"{sum(s.action == a for s in plan)} {a}" for a in (CREATED, UPDATED, UNCHANGED, REFUSED))
    lines.append(tail + (f" ({note})" if note else ""))
    return "\n".join(lines)


async def apply_files(lb: Leaderboard, paths: Sequence[str], *, dry_run: bool = False) -> tuple[str, int]:
    """``board apply``: the plan shown, applied unless ``dry_run`` or a file is refused; the text
    to print and the exit status (2 when anything is refused, as the other refusals exit)."""
    plan = await plan_files(lb, paths)
    if refused(plan):
        return show(plan, note="nothing applied"), 2
    if dry_run:
        return show(plan, note="dry run: nothing applied"), 0
    done = await apply(lb, plan)
    return show(done), 2 if refused(done) else 0
