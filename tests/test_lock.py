"""The installs are reproducible: requirements.lock pins every package the project needs, each
with its hashes; the virtualenv the suite runs in holds exactly those versions (``./dev`` installs
the lock with ``--no-deps --require-hashes``, nothing resolved on the machine); and README's table
of the versions the suite passed with is the lock's."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"

# name==version, then the markers (if any) and one or more --hash lines (backslash continued)
PIN = re.compile(
    r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)(?:\s*;\s*([^\\]+?))?\s*\\\n((?:\s+--hash=sha256:[0-9a-f]{64}.*\n)+)", re.M
)


def locked() -> dict[str, tuple[str, str | None]]:
    """Package -> (version, environment marker or None), from the lock's text."""
    text = LOCK.read_text()
    pins: dict[str, tuple[str, str | None]] = {
        canonicalize_name(m[1]): (m[2], m[3].strip() if m[3] else None) for m in PIN.finditer(text)
    }
    # Every requirement line of the lock was read as a hashed pin: none without a hash, none loose.
    requirement_lines = [line for line in text.splitlines() if line and not line[0].isspace() and line[0] != "#"]
    assert len(requirement_lines) == len(pins), "every line of requirements.lock is name==version with its hashes"
    return pins


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]]


def test_the_lock_pins_every_declared_dependency_within_its_range() -> None:
    pins = locked()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is declared in pyproject.toml but not locked: ./dev lock"
        assert requirement.specifier.contains(pins[name][0]), f"{name}=={pins[name][0]} is outside {requirement}"


def test_the_virtualenv_holds_exactly_the_lock() -> None:
    """What the suite runs with is what a fresh machine installs: each locked package that applies
    here is installed at its locked version."""
    from packaging.markers import Marker

    wrong = {}
    for name, (version, marker) in locked().items():
        if marker is not None and not Marker(marker).evaluate():
            continue
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if installed != version:
            wrong[name] = f"locked {version}, installed {installed}"
    assert not wrong, f"the virtualenv differs from requirements.lock (./dev install): {wrong}"


def test_readme_names_the_locked_versions() -> None:
    """README's "Dependencies" table says which versions the suite passed with: the lock's."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Dependencies\n", 1)[1].split("\n## ", 1)[0]
    named = dict(re.findall(r"^\| `([a-z0-9\-]+)` \| ([^ |]+) \|", section, re.M))
    assert len(named) >= 10, "README's Dependencies table lists the main packages"
    pins = locked()
    assert {name: pins[canonicalize_name(name)][0] for name in named} == named
