"""The installs are reproducible: requirements.lock pins every package the project needs, each
with its hashes; the virtualenv the suite runs in holds exactly those versions (``./dev`` installs
the lock with ``--no-deps --require-hashes``, nothing resolved on the machine); and README's table
of the versions the suite passed with is the lock's."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"

# name==version, then the markers (if any) and one or more --hash lines (backslash continued)
PIN = re.compile(
    r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)(?:\s*;\s*([^\\]+?))?\s*\\\n((?:\s+--hash=sha256:[0-9a-f]{64}.*\n)+)", re.M
)


def locked() -> list[tuple[str, str, str | None]]:
    """(package, version, environment marker or None) per requirement of the lock's text: a
    package may appear twice, each pin under its marker (numpy for Python 3.11, another for 3.12+)."""
    text = LOCK.read_text()
    pins: list[tuple[str, str, str | None]] = [
        (canonicalize_name(m[1]), m[2], m[3].strip() if m[3] else None) for m in PIN.finditer(text)
    ]
    # Every requirement line of the lock was read as a hashed pin: none without a hash, none loose.
    requirement_lines = [line for line in text.splitlines() if line and not line[0].isspace() and line[0] != "#"]
    assert len(requirement_lines) == len(pins), "every line of requirements.lock is name==version with its hashes"
    return pins


def here() -> dict[str, str]:
    """Package -> the version the lock pins for this interpreter and platform."""
    return {name: version for name, version, marker in locked() if marker is None or Marker(marker).evaluate()}


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]]


def test_the_lock_pins_every_declared_dependency_within_its_range() -> None:
    pins = here()
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is declared in pyproject.toml but not locked: ./dev lock"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {requirement}"


def test_the_virtualenv_holds_exactly_the_lock() -> None:
    """What the suite runs with is what a fresh machine installs: each locked package that applies
    here is installed at its locked version."""
    wrong = {}
    for name, version in here().items():
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
    pins = here()
    assert {name: pins[canonicalize_name(name)] for name in named} == named
