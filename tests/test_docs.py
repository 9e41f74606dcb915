"""The documents' relative links resolve: every link of README.md and docs/*.md to a file names one
that exists, and every #anchor names a heading of its target (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# [text](target) and ![alt](target), the target up to a space (a title may follow) or ")"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)[^)]*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")

# Charts `python -m bench.plots` draws from bench/results/: a checkout without that module (a
# branch older than the charts) cannot hold them; everywhere else they are checked like any file.
DRAWN = {"docs/figures/throughput.png", "docs/figures/cpu_per_delivery.png"}


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_slugs_are_githubs() -> None:
    assert slug("Local fleet (`./dev run`)") == "local-fleet-dev-run"
    assert slug("Scorer — `python -m bench.scorer`") == "scorer--python--m-benchscorer"
    assert slug("Behind HAProxy: 40,000 sockets") == "behind-haproxy-40000-sockets"
    assert slug("Own-rank reads — `python -m bench.rank_reads`") == "own-rank-reads--python--m-benchrank_reads"


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    found = links(doc)
    broken = []
    for target in found:
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        name = str(dest.relative_to(ROOT)) if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            if not (name in DRAWN and not (ROOT / "bench" / "plots.py").exists()):
                broken.append(f"{target}: no file {name}")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {name}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)
