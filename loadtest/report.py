"""Load-test reports: a terminal table, a JSON file with every figure and the settings, and a
self-contained HTML page (it opens with no network access): inline SVG charts of the run's time
series and, where matplotlib is installed, inline PNG charts of its headline figures drawn as the
benchmarks' are (loadtest/charts.py): latency percentiles, gateway CPU per delivery, memory per
connection, one bar per phase that measured them.

The files are made to be shared (mode 0644): every URL in them is written redacted (a Redis
URL's password, in its user part or its query), whichever row, figure or setting holds it."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from leaderboard.settings import redacted
from loadtest import charts
from loadtest.charts import Panel, number

W, H, PAD = 560, 220, 56


def table(rows: Sequence[tuple[str, Any]]) -> str:
    """Two aligned columns for the terminal."""
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k.ljust(width)}  {_fmt(v)}" for k, v in rows)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _scale(values: Sequence[float], lo: float | None = None) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    low = min(finite, default=0.0) if lo is None else lo
    high = max(finite, default=1.0)
    return low, high if high > low else low + 1


def line_chart(title: str, points: Sequence[tuple[float, float]], x_label: str, y_label: str) -> str:
    """An SVG line chart of (x, y) points."""
    if not points:
        return f"<figure><figcaption>{html.escape(title)}: no data</figcaption></figure>"
    x0, x1 = _scale([p[0] for p in points], 0.0)
    y0, y1 = _scale([p[1] for p in points], 0.0)

    def xy(x: float, y: float) -> str:
        return f"{PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD):.1f},{H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD):.1f}"

    path = " ".join(xy(x, y) for x, y in points)
    line = f'<polyline fill="none" stroke="#2f7cf6" stroke-width="2" points="{path}"/>'
    return _figure(title, line, x0, x1, y0, y1, x_label, y_label)


def bar_chart(title: str, values: Sequence[float], x_label: str, y_label: str) -> str:
    """An SVG bar chart, one bar per value (e.g. per second)."""
    if not values:
        return f"<figure><figcaption>{html.escape(title)}: no data</figcaption></figure>"
    y0, y1 = _scale(values, 0.0)
    bw = (W - 2 * PAD) / len(values)
    bars = "".join(
        f'<rect x="{PAD + i * bw:.1f}" y="{H - PAD - v / y1 * (H - 2 * PAD):.1f}" width="{max(bw - 1, 0.5):.1f}" '
        f'height="{v / y1 * (H - 2 * PAD):.1f}" fill="#2f7cf6"/>'
        for i, v in enumerate(values)
    )
    return _figure(title, bars, 0, len(values), y0, y1, x_label, y_label)


def _figure(title: str, body: str, x0: float, x1: float, y0: float, y1: float, xl: str, yl: str) -> str:
    axes = (
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="currentColor"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="currentColor"/>'
        f'<text x="{PAD}" y="{H - PAD + 15}" font-size="11">{_fmt(x0)}</text>'
        f'<text x="{W - PAD}" y="{H - PAD + 15}" font-size="11" text-anchor="end">{_fmt(x1)}</text>'
        f'<text x="{W / 2}" y="{H - 5}" font-size="12" text-anchor="middle">{html.escape(xl)}</text>'
        f'<text x="{PAD - 4}" y="{PAD}" font-size="11" text-anchor="end">{_fmt(y1)}</text>'
        f'<text x="{PAD - 4}" y="{H - PAD}" font-size="11" text-anchor="end">{_fmt(y0)}</text>'
        f'<text x="12" y="{H / 2}" font-size="12" transform="rotate(-90 12 {H / 2})" text-anchor="middle">'
        f"{html.escape(yl)}</text>"
    )
    return (
        f'<figure><figcaption>{html.escape(title)}</figcaption><svg viewBox="0 0 {W} {H}" width="100%" '
        f'role="img" aria-label="{html.escape(title)}">{axes}{body}</svg></figure>'
    )


PERCENTILES = ("p50", "p90", "p99")


def figure_charts(result: Mapping[str, Any]) -> list[str]:
    """The run's headline figures as inline PNG charts, one bar per phase (gateway, naive,
    direct, ...) that measured them; a note instead when matplotlib is not installed."""
    phases = {name: f for name, f in result.get("figures", {}).items() if isinstance(f, Mapping) and "latency_ms" in f}
    if not phases:
        return []
    if not charts.available():
        note = "Charts of the latency percentiles, CPU and memory per connection need matplotlib"
        return [f"<p><em>{note} (pip install matplotlib).</em></p>"]
    names = list(phases)

    def percentiles(key: str) -> dict[str, list[float]]:
        return {q: [number((f.get(key) or {}).get(q)) for f in phases.values()] for q in PERCENTILES}

    def per_phase(key: str) -> dict[str, list[float]]:
        return {key: [number(f.get(key)) for f in phases.values()]}

    drawn = [
        (
            "Snapshot latency",
            [
                Panel("publish → arrival (kernel receive time)", names, percentiles("latency_ms"), "ms"),
                Panel("spread: first to last socket, per snapshot", names, percentiles("spread_ms"), "ms"),
            ],
        ),
        (
            "Gateway CPU per delivery",
            [
                Panel(
                    "gateway processes' CPU",
                    names,
                    per_phase("gateway_cpu_ms_per_1k_deliveries"),
                    "CPU ms per 1,000 deliveries",
                    decimals=1,
                ),
            ],
        ),
        (
            "Memory per connection",
            [
                Panel(
                    "gateway processes' RSS",
                    names,
                    per_phase("gateway_rss_kb_per_conn"),
                    "KB per connection",
                    decimals=1,
                ),
            ],
        ),
    ]
    caption = [str(result.get("command", ""))]
    out = []
    for title, panels in drawn:
        if not any(math.isfinite(v) for panel in panels for values in panel.series.values() for v in values):
            continue  # nothing measured (a run against --url knows no gateway process)
        uri = charts.data_uri(charts.png(title, panels, caption))
        out.append(f'<figure><img src="{uri}" alt="{html.escape(title)}" width="100%"></figure>')
    return out


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def shareable(value: Any) -> Any:
    """``value`` with every URL in every string (nested in dicts, lists and tuples) redacted."""
    if isinstance(value, str):
        return _URL.sub(lambda m: redacted(m.group()), value)
    if isinstance(value, Mapping):
        return {k: shareable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(shareable(v) for v in value)
    return value


def write(path_stem: Path, result: Mapping[str, Any], rows: Sequence[tuple[str, Any]], charts: Sequence[str]) -> None:
    """Write ``<stem>.json`` (every figure and the settings) and ``<stem>.html``, every URL in
    them redacted."""
    result, rows = shareable(result), shareable(list(rows))
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    path_stem.with_suffix(".json").write_bytes(
        orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    )
    body_rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows)
    settings = html.escape(orjson.dumps(result.get("settings", {}), option=orjson.OPT_INDENT_2).decode())
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Load test: {html.escape(str(result.get("mode", "")))}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:46rem;margin:auto;padding:1rem}}
th{{text-align:left;padding-right:1rem}}td{{font-variant-numeric:tabular-nums}}figure{{margin:1.5rem 0}}
figcaption{{font-weight:bold}}svg{{color:#555}}</style></head><body>
<h1>Load test: {html.escape(str(result.get("mode", "")))}</h1>
<table>{body_rows}</table>{"".join(figure_charts(result))}{"".join(charts)}
<h2>Settings</h2><pre>{settings}</pre></body></html>"""
    path_stem.with_suffix(".html").write_text(page, encoding="utf-8")
