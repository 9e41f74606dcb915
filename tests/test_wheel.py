"""The package as a user installs it: a built wheel (not the source tree) runs a scorer, which loads
the function library it ships (the files of lua/, installed as the package leaderboard.lua), and a
gateway, which serves the page it ships."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from fleet.redis_server import free_port
from leaderboard import GameConfig, Leaderboard, connect
from leaderboard.assembly import MANIFEST, from_directory

from .conftest import MS
from .gw_helpers import http_get

ROOT = Path(__file__).resolve().parent.parent


def install_wheel(tmp: Path) -> Path:
    """Build the wheel and install it into a fresh virtualenv whose third-party packages come from
    this one (a .pth line: no download, and no path to the source tree); returns its python."""
    # from a copy: a build leaves build/ behind, whose stale files a later build would ship
    source = tmp / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".*", "var", "build", "*.egg-info", "__pycache__", "loadtest-reports"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", source],
        check=True, cwd=tmp, timeout=120,
    )  # fmt: skip
    [wheel] = (tmp / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:  # every file of the library at its package's place
        parts = [*(ROOT / "lua").glob("*.lua"), ROOT / "lua" / MANIFEST]
        assert len(parts) == len(from_directory(ROOT / "lua").parts) + 1
        for part in parts:
            assert archive.read(f"leaderboard/lua/{part.name}") == part.read_bytes(), part.name
    env_dir = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env_dir], check=True, timeout=60)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())  # fmt: skip
    # Only the dependencies' directory: its editable-install hook (a .pth of its own) is not run
    # from there, so `leaderboard` can come from nowhere but the wheel.
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, wheel],
                   check=True, timeout=120)  # fmt: skip
    where = subprocess.check_output([python, "-c", "import leaderboard, gateway; print(leaderboard.__file__)"],
                                    cwd=tmp, text=True)  # fmt: skip
    assert str(ROOT) not in where and str(env_dir) in where  # the wheel's copy, not the tree
    shipped = subprocess.check_output(
        [python, "-c", "from leaderboard.library import library_code; print(library_code(), end='')"],
        cwd=tmp,
        text=True,
        timeout=60,
    )
    assert shipped == from_directory(ROOT / "lua").text
    return python


def test_every_package_of_the_tree_is_listed() -> None:
    """pyproject.toml lists its packages (a search cannot name leaderboard.lua, which lives in
    lua/): a package added to the tree and not to the list would be missing from the wheel."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"leaderboard.lua": "lua", "gateway.jsclient": "clients/js/src"}
    tops = [d for d in ROOT.iterdir() if (d / "__init__.py").is_file() and d.name not in ("lua", "tests")]
    # a directory package-dir maps is its package under that name (clients/js/src: gateway.jsclient)
    renamed = {".".join(Path(where).parts): name for name, where in setuptools["package-dir"].items()}
    dotted = (".".join(i.parent.relative_to(ROOT).parts) for d in tops for i in d.rglob("__init__.py"))
    found = {"leaderboard.lua", *(renamed.get(name, name) for name in dotted)}
    assert set(setuptools["packages"]) >= found


@pytest.mark.slow
async def test_the_installed_wheel_runs_a_scorer_and_a_gateway(tmp_path: Path, redis_url: str) -> None:
    python = install_wheel(tmp_path)

    r = connect(redis_url)
    await r.function_delete("leaderboard")  # the scorer must load the library from the wheel
    env = {"PATH": os.environ["PATH"], "LB_REDIS_URL": redis_url, "LB_GAME": "wheel", "LB_LOG_LEVEL": "WARNING",
           "LB_SCORER_METRICS_PORT": "0"}  # fmt: skip
    try:
        for args in (("--burst",), ("submit", "--player", "mia", "--points", "70"), ("--burst",)):
            proc = await asyncio.create_subprocess_exec(python, "-m", "scorer", *args, cwd=tmp_path, env=env)
            assert await asyncio.wait_for(proc.wait(), 30) == 0, args
            # the first scorer loaded the library the wheel ships
            assert "leaderboard" in str(await r.function_list())
        [entry] = (await Leaderboard(r, GameConfig(game="wheel")).top("alltime")).entries
        assert (entry.player, entry.score) == ("mia", 70)

        port = free_port()
        gateway = await asyncio.create_subprocess_exec(
            python, "-m", "gateway", cwd=tmp_path, env={**env, "LB_GW_PORT": str(port)}
        )
        try:
            async with asyncio.timeout(20_000 * MS):
                while True:
                    try:
                        if (await http_get(port, "/readyz"))[0] == 200:
                            break
                    except OSError:
                        pass  # not listening yet
                    await asyncio.sleep(0.05)
            for path, source in (("/", "gateway/static/index.html"), ("/client.js", "clients/js/src/client.js")):
                status, _, body = await http_get(port, path)
                assert status == 200 and body == (ROOT / source).read_bytes()
        finally:
            gateway.terminate()
            await asyncio.wait_for(gateway.wait(), 20)
    finally:
        await r.aclose()
