"""Boards: their definitions, encodings, periods, model and reads, re-exported here (``from
leaderboard import boards``).

A board is *defined*, not configured: its keys and their directions, write operator, tie rule,
windows and where their days start, rank mode, top N, metadata limit and display hints live in
one definition, created at run time (leaderboard/definitions.py stores it in Redis)::

    tower = parse({"id": "tower", "keys": [{"name": "floor"},
                                           {"name": "time", "direction": "asc", "display": "duration_ms"}]})
    tower.encoding                          # "lex": two unbounded keys do not fit one double
    m = encode_member(tower, (12, 81_250), ts_ms=1_764_000_000_000, player="mia")
    decode_member(tower, m)                 # ((12, 81250), 1764000000000, "mia")

Encodings (docs/data-model.md gives the exact limits):

* ``packed`` — one exact double, ``score = points * 2^k + tie`` (windows.py), where points
  are the keys in mixed radix (``points``: the first key signed by its direction times the
  product of the later keys' ranges, plus their gains), for a definition whose keys' bounds fit
  every window's points bound; one key packs its value (an ``asc`` one negated), so the highest
  score is still the best. A new board takes it wherever its keys fit (``created``); a stored
  record keeps the encoding it was created with (``Definition.encoding``).
* ``lex`` — every other definition: all members score 0 and the member itself orders the board
  (Redis sorts equal scores by memcmp of the member): per key 16 hex digits of the value with
  its sign bit flipped (so unsigned order is signed order), complemented for ``desc``; then 12
  hex digits of the time it was reached (complemented for tie ``last``); then the player id's
  bytes complemented and 0xFF (``player_part``). Ascending member order is best first, so top N
  is ``ZRANGE 0 N-1`` and a rank is ``ZRANK``.

Ties: entries with equal values reached at the same time (in the window's tie unit) read by
descending player id (bytewise) on both encodings, the order Redis gives a packed board read
highest score first.

The model (``Board``) is the ordering's specification in plain Python: the property tests hold
every read of the function library to it.

The package, one module per concept: ``definition`` (the definition, its parsing and
validation, a submission's values checked against it), ``encoding`` (packed scores, lex
members), ``periods`` (the periods of a definition's windows), ``model`` (``Board``, and
``combine``), ``names`` (which definition and scope a board's name means: the game's own
boards are the definition ``default`` kept per scope), ``reads`` (``BoardPeriod``: any board
period a read names, its calls and their replies).
"""

from .definition import (
    BOARD_WINDOWS,
    DEFAULT_ID,
    DIRECTIONS,
    DISPLAYS,
    EXTENSIONS,
    INT64_MAX,
    INT64_MIN,
    LEX,
    MAX_DEFINITION_BYTES,
    MAX_KEYS,
    MAX_METADATA_BYTES,
    MAX_SEASON_S,
    MAX_TOP_N,
    MIN_SEASON_S,
    PACKED,
    SEASON,
    TIES,
    BoardKey,
    Definition,
    Season,
    check_default,
    check_id,
    check_metadata,
    check_recreate,
    check_time_zone,
    check_update,
    configured_shape,
    created,
    default_definition,
    parse,
    parse_values,
    written_as,
)
from .encoding import (
    KEY_HEX,
    TIME_HEX,
    decode_member,
    encode_member,
    key_prefix,
    pack,
    player_of,
    player_part,
    points,
    unpack,
)
from .model import Board, combine, order_key
from .names import LiveBoard, board_scopes, definition_of, home_of, home_scope, keeps, listed, on_offer
from .periods import named, period, period_bounds, resolve, window_of
from .reads import BoardPeriod

__all__ = [
    "BOARD_WINDOWS",
    "DEFAULT_ID",
    "DIRECTIONS",
    "DISPLAYS",
    "EXTENSIONS",
    "INT64_MAX",
    "INT64_MIN",
    "KEY_HEX",
    "LEX",
    "MAX_DEFINITION_BYTES",
    "MAX_KEYS",
    "MAX_METADATA_BYTES",
    "MAX_SEASON_S",
    "MAX_TOP_N",
    "MIN_SEASON_S",
    "PACKED",
    "SEASON",
    "TIES",
    "TIME_HEX",
    "Board",
    "BoardKey",
    "BoardPeriod",
    "Definition",
    "LiveBoard",
    "Season",
    "board_scopes",
    "check_default",
    "check_id",
    "check_metadata",
    "check_recreate",
    "check_time_zone",
    "check_update",
    "combine",
    "configured_shape",
    "created",
    "decode_member",
    "default_definition",
    "definition_of",
    "encode_member",
    "home_of",
    "home_scope",
    "keeps",
    "key_prefix",
    "listed",
    "named",
    "on_offer",
    "order_key",
    "pack",
    "parse",
    "parse_values",
    "period",
    "period_bounds",
    "player_of",
    "player_part",
    "points",
    "resolve",
    "unpack",
    "window_of",
    "written_as",
]
