"""The board definition wrappers: ``lb_board_put``, ``lb_board_delete`` and ``lb_board_purge``
(definitions.lua; the definitions themselves in boards/, the registry in definitions.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .. import boards
from ..errors import InvalidBoard
from .calls import Calls, execute


class DefinitionCalls(Calls):
    """Create, update, delete and purge board definitions."""

    async def create_board(self, definition: boards.Definition) -> boards.Definition:
        """lb_board_put: store a new board definition (version 1). Creating the same one again is
        a no-op; InvalidBoard(board_exists) for another definition of that id. The id of a deleted
        board is created again only with keys that read its entries as they were written
        (boards.check_recreate: board_reorder), compare-and-set on that deleted definition
        (stale_board when it changed meanwhile)."""
        asked = boards.parse({**definition.as_dict(), "version": 1})
        deleted = await self.boards.deleted_json(asked.id)
        # the game's: _put_board's rule; another board goes on from a deleted one's entries
        base = boards.parse(deleted) if deleted is not None and asked.id != boards.DEFAULT_ID else None
        created = self.boards.admit(boards.created(asked, base))
        if base is not None:
            boards.check_recreate(base, created)
        await self._put_board(created, "", deleted or "", self._reshapes(None, created))
        return created

    async def update_board(self, definition: boards.Definition) -> boards.Definition:
        """lb_board_put: replace a board's definition with ``definition`` as its next version.
        InvalidBoard(unknown_board), (board_reorder) for a change that would reorder the live
        board (boards.check_update), (stale_board) when another update landed meanwhile. The
        game's default board may be updated while only its configuration describes it."""
        stored, deleted = await self.boards.stored_json(definition.id), None
        if stored is None:
            if definition.id != boards.DEFAULT_ID:
                raise InvalidBoard("unknown_board", f"no board {definition.id!r}")
            old = self.boards.defaults[boards.DEFAULT_ID]
            deleted = await self.boards.deleted_json(definition.id)  # stored as a create: its base too
        else:
            old = boards.parse(stored)
        if stored is None:  # the game's boards as the environment shapes them: _put_board's rule
            updated = replace(self.boards.admit(boards.created(definition)), version=old.version + 1)
        else:
            updated = boards.check_update(old, self.boards.admit(definition))
        await self._put_board(updated, stored or "", deleted or "", self._reshapes(old, updated))
        return updated

    async def delete_board(self, board: str) -> None:
        """lb_board_delete: delete a board's definition. InvalidBoard(unknown_board)."""
        boards.check_id(board)
        reshapes = False
        if board == boards.DEFAULT_ID:  # back to the environment's shape: _put_board's rule
            stored = await self.boards.stored_json(board)
            reshapes = stored is not None and self._reshapes(boards.parse(stored), None)
        keys = self._definition_keys
        await execute(self.redis, ("FCALL", "lb_board_delete", len(keys), *keys, board, int(reshapes)))

    async def purge_board(self, board: str, deleted: str, keys: Sequence[str]) -> bool:
        """lb_board_purge: forget the deleted definition ``deleted`` of ``board`` when none of
        ``keys`` (its periods' keys retention may keep: leaderboard/purge.py) exists; whether
        it was forgotten."""
        names = (self.keys.deleted_boards, self.keys.board_changes, self.keys.journal, *keys)
        return bool(await execute(self.redis, ("FCALL", "lb_board_purge", len(names), *names, board, deleted)))

    def _reshapes(self, old: boards.Definition | None, new: boards.Definition | None) -> bool:
        """Whether a change of the game's ``default`` from ``old`` to ``new`` (None: the
        environment's) changes how the game's boards are written (boards.written_as): the
        library then refuses it while the game has entries (board_reorder). Another board's
        changes are checked by check_update and check_recreate."""
        configured = self.boards.defaults[boards.DEFAULT_ID]
        if (new or old or configured).id != boards.DEFAULT_ID:
            return False
        return boards.written_as(old or configured, configured) != boards.written_as(new or configured, configured)

    @property
    def _definition_keys(self) -> tuple[str, ...]:
        k = self.keys
        return (k.boards, k.boards_version, k.journal, k.deleted_boards, k.board_changes, k.activity, k.board_epoch)

    async def _put_board(self, definition: boards.Definition, expected: str, deleted: str, reshapes: bool) -> None:
        """lb_board_put; ``reshapes``: the game's boards would be written otherwise than the
        entries they hold (``_reshapes``), refused atomically unless the game applied no slip yet
        (its activity stream does not exist)."""
        keys = self._definition_keys
        args = (definition.id, definition.to_json(), expected, deleted, self.config.max_boards, int(reshapes))
        await execute(self.redis, ("FCALL", "lb_board_put", len(keys), *keys, *args))
