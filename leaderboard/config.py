"""Game configuration shared by every process: windows, operators and limits of one game, and
which games a process serves.

Each process builds its own frozen settings object from environment variables prefixed ``LB_``
(through ``leaderboard.settings``; README's configuration table lists them); this part is common
to all of them::

    config = GameConfig.from_env()            # LB_GAME, LB_WINDOWS, LB_OPERATOR, ...
    config = GameConfig(game="arena", windows=("daily", "alltime"))

One gateway process or scorer replica can serve several games (``LB_GAMES``); each game gets
the same windows, operators and limits (``for_game``)::

    config = GameConfig(games=("arena", "kart"))
    [c.game for c in config.served]            # ["arena", "kart"]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .keys import Keys, check_name
from .ranking import RANK_MODES
from .settings import SettingsError, at_least, between, load, parse_pairs, setting, validate
from .submission import OPERATORS, Rules
from .windows import Window, window


@dataclass(frozen=True, slots=True)
class GameConfig:
    game: str = setting("LB_GAME", "arena", "game name (the hash tag of every key)")
    games: tuple[str, ...] = setting(
        "LB_GAMES",
        (),
        shown="(LB_GAME)",
        help="games this process serves, comma-separated (replaces LB_GAME; the first is the default for "
        "clients that name none); every game gets the same windows and limits",
    )
    windows: tuple[str, ...] = setting(
        "LB_WINDOWS", ("daily", "weekly", "alltime"), "windows kept: any of daily, weekly, monthly, alltime"
    )
    operator: str = setting("LB_OPERATOR", "best", "default write operator: best, incr or set")
    window_operators: Mapping[str, str] = setting(
        "LB_WINDOW_OPERATORS",
        factory=dict,
        shown="(none)",
        parse=parse_pairs,
        help="per-window operator, e.g. alltime=incr",
    )
    rank_mode: str = setting(
        "LB_RANK_MODE", "ordinal", "how ties rank: ordinal (by time), dense (1,1,2) or competition (1,1,3)"
    )
    window_rank_modes: Mapping[str, str] = setting(
        "LB_WINDOW_RANK_MODES",
        factory=dict,
        shown="(none)",
        parse=parse_pairs,
        help="per-window rank mode, e.g. alltime=dense",
    )
    top_n: int = setting(
        "LB_TOP_N", 10, "size of the top that snapshots and announcements track", check=between(1, 100)
    )
    activity_maxlen: int = setting(
        "LB_ACTIVITY_MAXLEN",
        10_000,
        "about how many submissions the activity stream keeps"
        " (an entry per batch: trimmed to this many over the batch's size)",
        check=at_least(1),
    )
    clock_skew_ms: int = setting(
        "LB_CLOCK_SKEW_MS", 30_000, "how far ahead of the server clock a timestamp may be", check=at_least(0)
    )
    idempotency_s: int = setting(
        "LB_IDEMPOTENCY_S",
        48 * 3600,
        "how long a submission id is remembered (and the oldest timestamp accepted)",
        check=at_least(60),
    )
    max_scopes: int = setting(
        "LB_MAX_SCOPES",
        256,
        "distinct region and mode values a game may have (together, a defined board's per-region or per-mode "
        "boards counted as values too); a slip naming one more is refused with too_many_scopes (0 = no cap)",
        check=at_least(0),
    )
    max_boards: int = setting(
        "LB_MAX_BOARDS",
        100_000,
        "board definitions a game may store; a create past it is refused with too_many_boards (0 = no cap)",
        check=at_least(0),
    )

    # The queue's rules: the scorer's `submit` command and the gateways' server connections both
    # file slips, so both read them here.
    backlog_max: int = setting(
        "LB_BACKLOG_MAX",
        1_000_000,
        "submissions the queue holds before a submit is refused with backlog_full",
        check=at_least(1),
    )
    wait_replicas: int = setting(
        "LB_WAIT_REPLICAS",
        0,
        "replicas that must confirm a submission before it is acknowledged (WAIT; 0 = none: a failover "
        "can lose the last acknowledged ones)",
        check=at_least(0),
    )
    wait_timeout_ms: int = setting(
        "LB_WAIT_TIMEOUT_MS",
        100,
        "how long a submission waits for LB_WAIT_REPLICAS before it is refused with not_replicated",
        check=at_least(1),
    )
    # Not a setting: the stored default board's season (``definitions.applied``), the one window
    # of ``windows`` that is not one of windows.py's fixed ones; its periods are the definition's.
    season: Window | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        validate(self)
        try:
            check_name("game", self.game)
        except ValueError as exc:
            raise SettingsError(f"LB_GAME: {exc}") from None
        for name in self.games:
            try:
                check_name("game", name)
            except ValueError as exc:
                raise SettingsError(f"LB_GAMES: {exc}") from None
        if len(set(self.games)) != len(self.games):
            raise SettingsError(f"LB_GAMES: a game is listed twice: {','.join(self.games)}")
        if not self.windows:
            raise SettingsError("LB_WINDOWS: at least one window is required")
        for name in self.windows:
            try:
                self.window_spec(name)
            except ValueError as exc:
                raise SettingsError(f"LB_WINDOWS: {exc}") from None
        for var, op in (
            ("LB_OPERATOR", self.operator),
            *(("LB_WINDOW_OPERATORS", o) for o in self.window_operators.values()),
        ):
            if op not in OPERATORS:
                raise SettingsError(f"{var}: operator must be one of {', '.join(OPERATORS)}, got {op!r}")
        for name in self.window_operators:
            if name not in self.windows:
                raise SettingsError(f"LB_WINDOW_OPERATORS: operator given for window {name!r}, not in LB_WINDOWS")
        for var, mode in (
            ("LB_RANK_MODE", self.rank_mode),
            *(("LB_WINDOW_RANK_MODES", m) for m in self.window_rank_modes.values()),
        ):
            if mode not in RANK_MODES:
                raise SettingsError(f"{var}: rank mode must be one of {', '.join(RANK_MODES)}, got {mode!r}")
        for name in self.window_rank_modes:
            if name not in self.windows:
                raise SettingsError(f"LB_WINDOW_RANK_MODES: rank mode given for window {name!r}, not in LB_WINDOWS")
        # A submission may be as old as the idempotency window; its period's keys must still be
        # alive then, or the write would land in a key that expires at once.
        # (A season's periods are its definition's, as a defined board's season: not counted.)
        retentions = [w.retention_s for w in self.window_specs if w.retention_s is not None and w is not self.season]
        if retentions and self.idempotency_s > min(retentions):
            raise SettingsError(
                f"LB_IDEMPOTENCY_S: must not exceed the shortest retention of LB_WINDOWS ({min(retentions)} s), "
                f"got {self.idempotency_s}"
            )

    @property
    def keys(self) -> Keys:
        return Keys(self.game)

    @property
    def served(self) -> tuple[GameConfig, ...]:
        """One configuration per game served (``LB_GAMES``, or ``LB_GAME`` alone), the default first."""
        return tuple(self.for_game(name) for name in self.games or (self.game,))

    def for_game(self, name: str) -> GameConfig:
        """This configuration for one game (windows, operators and limits are shared)."""
        return replace(self, game=name, games=())

    def default_window(self, named: str = "") -> str:
        """The window of a request that names none: ``named`` (LB_GW_WINDOW) when set, else weekly
        when kept, else the first window kept. A named window the game does not keep is refused."""
        if named:
            if named not in self.windows:
                raise SettingsError(f"LB_GW_WINDOW: {named!r} is not a configured window")
            return named
        return "weekly" if "weekly" in self.windows else self.windows[0]

    @property
    def window_specs(self) -> tuple[Window, ...]:
        return tuple(self.window_spec(name) for name in self.windows)

    def window_spec(self, name: str) -> Window:
        """The window ``name`` (windows.py's, or the stored default's season); ValueError for
        one that is neither (kept or not: the caller checks ``windows``)."""
        return self.season if self.season is not None and name == self.season.name else window(name)

    def operator_for(self, window_name: str) -> str:
        return self.window_operators.get(window_name, self.operator)

    def rank_mode_for(self, window_name: str) -> str:
        return self.window_rank_modes.get(window_name, self.rank_mode)

    def rules(self) -> Rules:
        return Rules(
            max_points=min(w.max_points for w in self.window_specs),
            clock_skew_ms=self.clock_skew_ms,
            max_age_ms=self.idempotency_s * 1000,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GameConfig:
        return load(cls, env)
