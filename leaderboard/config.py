"""Game configuration shared by every process: windows, operators and limits of one game.

Each process builds its own frozen settings object from environment variables prefixed ``LB_``
(see README's configuration table); this part is common to all of them::

    config = GameConfig.from_env()            # LB_GAME, LB_WINDOWS, LB_OPERATOR, ...
    config = GameConfig(game="arena", windows=("daily", "alltime"))
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .keys import Keys, check_name
from .submission import OPERATORS, Rules
from .windows import Window, window


@dataclass(frozen=True, slots=True)
class GameConfig:
    game: str = "arena"
    windows: tuple[str, ...] = ("daily", "weekly", "alltime")
    operator: str = "best"  # each board's default write operator
    window_operators: Mapping[str, str] = field(default_factory=dict)  # per-window override
    top_n: int = 10
    activity_maxlen: int = 10_000
    clock_skew_ms: int = 30_000
    idempotency_s: int = 48 * 3600

    def __post_init__(self) -> None:
        check_name("game", self.game)
        if not self.windows:
            raise ValueError("at least one window is required")
        for name in self.windows:
            window(name)
        for op in (self.operator, *self.window_operators.values()):
            if op not in OPERATORS:
                raise ValueError(f"operator must be one of {', '.join(OPERATORS)}, got {op!r}")
        for name in self.window_operators:
            if name not in self.windows:
                raise ValueError(f"operator given for window {name!r}, which is not configured")
        if not 1 <= self.top_n <= 100:
            raise ValueError("top_n must be 1..100")
        if self.activity_maxlen < 1 or self.clock_skew_ms < 0 or self.idempotency_s < 60:
            raise ValueError("activity_maxlen >= 1, clock_skew_ms >= 0, idempotency_s >= 60")
        # A submission may be as old as the idempotency window; its period's keys must still be
        # alive then, or the write would land in a key that expires at once.
        retentions = [w.retention_s for w in self.window_specs if w.retention_s is not None]
        if retentions and self.idempotency_s > min(retentions):
            raise ValueError(f"idempotency_s must not exceed the shortest retention ({min(retentions)} s)")

    @property
    def keys(self) -> Keys:
        return Keys(self.game)

    @property
    def window_specs(self) -> tuple[Window, ...]:
        return tuple(window(name) for name in self.windows)

    def operator_for(self, window_name: str) -> str:
        return self.window_operators.get(window_name, self.operator)

    def rules(self) -> Rules:
        return Rules(
            max_points=min(w.max_points for w in self.window_specs),
            clock_skew_ms=self.clock_skew_ms,
            max_age_ms=self.idempotency_s * 1000,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GameConfig:
        env = os.environ if env is None else env
        kwargs: dict[str, object] = {}
        if "LB_GAME" in env:
            kwargs["game"] = env["LB_GAME"]
        if "LB_WINDOWS" in env:
            kwargs["windows"] = tuple(w.strip() for w in env["LB_WINDOWS"].split(",") if w.strip())
        if "LB_OPERATOR" in env:
            kwargs["operator"] = env["LB_OPERATOR"]
        if "LB_WINDOW_OPERATORS" in env:  # e.g. "alltime=incr,daily=best"
            pairs = (p.split("=", 1) for p in env["LB_WINDOW_OPERATORS"].split(",") if p.strip())
            kwargs["window_operators"] = {k.strip(): v.strip() for k, v in pairs}
        for name, var in (
            ("top_n", "LB_TOP_N"),
            ("activity_maxlen", "LB_ACTIVITY_MAXLEN"),
            ("clock_skew_ms", "LB_CLOCK_SKEW_MS"),
            ("idempotency_s", "LB_IDEMPOTENCY_S"),
        ):
            if var in env:
                kwargs[name] = int(env[var])
        return cls(**kwargs)  # type: ignore[arg-type]
