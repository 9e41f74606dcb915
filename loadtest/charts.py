"""Bar charts of measured figures as PNG bytes: one drawing code for the benchmarks' charts
(``python -m bench.plots``) and the load test's HTML report.

A chart is described by plain data (:class:`Panel`: categories, one or more series of values, a
unit) and drawn by :func:`png` with matplotlib's Agg backend, without pyplot (no global figure
state). The bytes depend only on the data and matplotlib's version: no timestamp or software
name is written into the file, so drawing the same figures twice gives the same bytes.

matplotlib is a development dependency, not the product's: :func:`available` says whether it is
installed, and callers without it say that their charts need it.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# One colour per series, the same order everywhere: this project's measure first, then baselines.
COLOURS = ("#2f7cf6", "#f28e2b", "#8c8c8c", "#59a14f", "#b07aa1", "#e15759")


@dataclass(frozen=True)
class Panel:
    """One set of axes: a bar per category and series (grouped when several series).

    ``series`` maps a series' name to one value per category; ``nan`` (not measured) draws no
    bar. ``shares``, when given, is a part of each value of the first series (e.g. its user-space
    share of the CPU), drawn darker inside its bar.
    """

    title: str
    categories: Sequence[str]
    series: Mapping[str, Sequence[float]]
    unit: str
    shares: Sequence[float] | None = None
    share_label: str = ""
    decimals: int = 0
    notes: Sequence[str] = field(default_factory=tuple)


def number(value: object) -> float:
    """A recorded figure as a float: ``nan`` where it was not measured (null, infinite, absent)."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else math.nan


def available() -> bool:
    """Whether matplotlib is installed (the charts are drawn only then)."""
    return importlib.util.find_spec("matplotlib") is not None


def png(title: str, panels: Sequence[Panel], caption: Sequence[str]) -> bytes:
    """The panels side by side under ``title``, ``caption`` lines (command, commit) in small print
    below; PNG bytes without a timestamp."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # a panel's width follows its bars: a one-bar panel beside a three-bar one stays narrow
    widths = [max(2, len(panel.categories)) for panel in panels]
    inches = max(7.2, 1.4 * sum(widths) + 1.6)  # wide enough for the small print
    fig = Figure(figsize=(inches, 4.4), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False, gridspec_kw={"width_ratios": widths})[0]
    for ax, panel, width in zip(axes, panels, widths, strict=True):
        _draw(ax, panel, title_chars=int(12 * (inches - 1.2) * width / sum(widths)))
    fig.suptitle(title, fontsize=12, fontweight="bold")
    # the small print: about 22 characters of 6.5 pt to the inch
    lines = [line for text in caption for line in _wrap(text, int(22 * inches), " · ").split("\n")]
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=6.5, color="#555555", va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.04 + 0.025 * len(lines), 1, 0.95))
    out = io.BytesIO()
    # no "Software" (matplotlib's version) and no date: the bytes depend on the figures only
    fig.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()


def data_uri(image: bytes) -> str:
    """A PNG as a ``data:`` URI, for a page that must open with no other file."""
    return "data:image/png;base64," + base64.b64encode(image).decode("ascii")


def _draw(ax: Axes, panel: Panel, *, title_chars: int) -> None:
    count = len(panel.series)
    width = 0.8 / max(count, 1)
    top = max((v for values in panel.series.values() for v in values if math.isfinite(v)), default=1.0)
    for i, (name, values) in enumerate(panel.series.items()):
        xs = [c + (i - (count - 1) / 2) * width for c in range(len(panel.categories))]
        ys = [v if math.isfinite(v) else 0.0 for v in values]
        bars = ax.bar(
            xs,
            ys,
            width * 0.92,
            label=name if count > 1 or panel.shares is not None else None,
            color=COLOURS[i % len(COLOURS)],
        )
        for bar, value in zip(bars, values, strict=True):
            text = f"{value:,.{panel.decimals}f}" if math.isfinite(value) else "not measured"
            ax.annotate(
                text,
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7 if count > 2 else 8,
            )
        if i == 0 and panel.shares is not None:
            shares = [s if math.isfinite(s) else 0.0 for s in panel.shares]
            ax.bar(xs, shares, width * 0.92, color="#1b4f9c", label=panel.share_label)
    slots = max(2, len(panel.categories))
    ax.set_title(_wrap(panel.title, title_chars), fontsize=9.5)
    ax.set_xlim(
        -0.5 - (slots - len(panel.categories)) / 2, len(panel.categories) - 0.5 + (slots - len(panel.categories)) / 2
    )
    ax.set_ylabel(panel.unit, fontsize=8.5)
    ax.set_xticks(range(len(panel.categories)), [_wrap(c) for c in panel.categories], fontsize=8)
    ax.set_ylim(0, top * 1.18)
    ax.tick_params(axis="y", labelsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    if count > 1 or panel.shares is not None:
        ax.legend(fontsize=7.5, frameon=False)
    for k, note in enumerate(panel.notes):
        ax.text(0.02, 0.97 - 0.06 * k, note, transform=ax.transAxes, fontsize=7, va="top", color="#444444")


def _wrap(text: str, width: int = 16, sep: str = " ") -> str:
    """``text`` on lines of about ``width`` characters, broken at ``sep``."""
    lines: list[str] = []
    for word in text.split(sep):
        if lines and len(lines[-1]) + len(sep) + len(word) <= width:
            lines[-1] += sep + word
        else:
            lines.append(word)
    return "\n".join(lines)
