"""The conformance runner: every scenario of ``scenarios/`` against a client, through its adapter.

One run starts one fleet and one scripted server (stage.py) and shares them among the scenarios;
each scenario starts a fresh adapter (adapter.py), plays its steps and reports pass or fail with
the reason. docs/clients.md ("Conformance") has the scenario table and the adapter contract::

    python -m clients.conformance.runner                      # every client of adapters.json
    python -m clients.conformance.runner --client python --scenario drain
    python -m clients.conformance.runner --command node my_adapter.mjs   # a client of your own

A scenario (``scenarios/<name>.json``)::

    {"about": "one line for the docs' table",
     "server": "fleet" | "scripted", "script": [...],   the scripted server's steps (scripted.py)
     "clients": n,                                      n instances at once, each through the steps
     "steps": [...],
     "across_clients": [{"saved": name, "max_at_least": x}]}   over what each instance saved

Steps (a scenario's ``steps``, in order)::

    {"cmd": {...}}                                 a command to the adapter ("$url": where to connect)
    {"fleet": "submit", "player": "$player", "points": "$rising"}
    {"fleet": "drain" | "kill", "gateway": "$gw"}  SIGTERM (1012 to its sockets) or SIGKILL
    {"fleet": "shed", "gateway": "$gw"}            1012 "rebalance" to its sockets; it stays up
    {"expect": pattern, "within": s, "since": mark, "save": {"name": "path"}, "mark": name, "anywhere": true}
    {"expect_none": pattern, "for": s, "anywhere": true}   none such (at all) in the next s seconds
    {"expect_handshakes": n | {"<=": n}, "within": s}
    {"in_order": pattern, "key": [paths], "field": path}   never decreasing, over every event so far

An ``expect`` takes the first event after the last one an ``expect`` took that matches
(``anywhere``: the first of all, where the contract leaves the order open), within ``within``
seconds of now, or of the moment ``since`` names (a ``mark`` of an earlier step: when its action
ran or its event arrived). ``$protocol`` is the protocol version the fleet speaks,
``$newer_protocol`` the next; a scripted server's ``script`` may use them too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from argparse import REMAINDER
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leaderboard.settings import argument_parser
from leaderboard.wire import PROTOCOL

from .adapter import Adapter, AdapterFailed, command_line
from .patterns import ScenarioError, describe, holds, lookup, matches, resolve
from .stage import Stage

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # adapters' command lines are relative to the repository's root
SCENARIOS = HERE / "scenarios"
ADAPTERS = HERE / "adapters.json"

PROTOCOLS = {"protocol": PROTOCOL, "newer_protocol": PROTOCOL + 1}

Scenario = dict[str, Any]
Step = dict[str, Any]


class Failed(Exception):
    """A client did not do what a step expects: the reason is the scenario's outcome."""


@dataclass(frozen=True, slots=True)
class Outcome:
    scenario: str
    client: str
    passed: bool
    reason: str
    seconds: float

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict} {self.client:8} {self.scenario:12} {self.seconds:5.1f} s" + (
            "" if self.passed else f"  {self.reason}"
        )


def scenarios(names: Sequence[str] = ()) -> list[Scenario]:
    """The scenarios (by file name order), or those named."""
    found = {p.stem: {"name": p.stem, **json.loads(p.read_text())} for p in sorted(SCENARIOS.glob("*.json"))}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ScenarioError(f"no scenario {', '.join(unknown)} (there are {', '.join(found)})")
    return [found[n] for n in names] if names else list(found.values())


def table() -> str:
    """The scenario table of docs/clients.md (a test holds the two equal)."""
    rows = ["| scenario | against | what a client must do |", "|---|---|---|"]
    for scenario in scenarios():
        server = scenario.get("server", "fleet")
        against = "the fleet" if server == "fleet" else "a scripted server"
        if scenario.get("clients", 1) > 1:
            against += f", {scenario['clients']} clients at once"
        rows.append(f"| `{scenario['name']}` | {against} | {scenario['about']} |")
    return "\n".join(rows) + "\n"


def adapters() -> dict[str, list[str]]:
    """adapters.json: each client's adapter command line (relative to the repository's root)."""
    loaded: dict[str, list[str]] = json.loads(ADAPTERS.read_text())
    return loaded


class Play:
    """One scenario played by one client instance."""

    def __init__(self, stage: Stage, scenario: Scenario, adapter: Adapter, names: dict[str, Any]) -> None:
        self.stage, self.scenario, self.adapter = stage, scenario, adapter
        self.names = names  # what "$name" stands for: the run's values and what steps saved
        self.marks: dict[str, float] = {"start": time.monotonic()}
        self.cursor = 0  # events before it were taken by an expect
        self.baseline = 0  # connections to the fleet when the scenario began

    async def run(self) -> None:
        self.baseline = self.stage.connections
        for number, step in enumerate(self.scenario["steps"], 1):
            try:
                await self.step(step)
            except Failed as exc:
                raise Failed(f"step {number} ({_what(step)}): {exc}") from None

    async def step(self, step: Step) -> None:
        if "cmd" in step:
            self.adapter.send(resolve(step["cmd"], self.names))
        elif "fleet" in step:
            await self.fleet(step)
        elif "expect" in step:
            await self.expect(step)
        elif "expect_none" in step:
            await self.expect_none(step["expect_none"], float(step["for"]), anywhere=bool(step.get("anywhere")))
        elif "expect_handshakes" in step:
            await self.expect_handshakes(resolve(step["expect_handshakes"], self.names), float(step.get("within", 0)))
        elif "in_order" in step:
            self.in_order(step)
        else:
            raise ScenarioError(f"a step of {self.scenario['name']} does nothing the runner knows: {step}")
        if "mark" in step and "expect" not in step:
            self.marks[step["mark"]] = time.monotonic()

    async def fleet(self, step: Step) -> None:
        action = step["fleet"]
        if action == "submit":
            await self.stage.submit(resolve(step["player"], self.names), resolve(step["points"], self.names))
        elif action in ("drain", "kill"):
            self.stage.stop_gateway(str(resolve(step["gateway"], self.names)), kill=action == "kill")
        elif action == "shed":
            await self.stage.shed(str(resolve(step["gateway"], self.names)))
        else:
            raise ScenarioError(f"no fleet action {action!r}: submit, drain, kill or shed")

    async def expect(self, step: Step) -> None:
        pattern = resolve(step["expect"], self.names)
        since = self.marks[step["since"]] if "since" in step else time.monotonic()
        deadline = since + float(step["within"])
        found: list[int] = []
        first = 0 if step.get("anywhere") else self.cursor  # events whose order the contract leaves open

        def seen() -> bool:
            events = self.adapter.events
            found[:] = [i for i in range(first, len(events)) if matches(events[i].event, pattern)][:1]
            return bool(found)

        try:
            await self.adapter.wait_until(seen, deadline - time.monotonic())
        except TimeoutError:
            raise Failed(f"none within {step['within']} s; after it came: {self._recent()}") from None
        received = self.adapter.events[found[0]]
        if received.at > deadline:
            raise Failed(f"came {received.at - since:.2f} s after, not within {step['within']} s")
        self.cursor = max(self.cursor, found[0] + 1)
        for name, path in step.get("save", {}).items():
            self.names[name] = lookup(received.event, path)
        if "mark" in step:
            self.marks[step["mark"]] = received.at

    async def expect_none(self, pattern: dict[str, Any], seconds: float, *, anywhere: bool) -> None:
        pattern = resolve(pattern, self.names)
        first = 0 if anywhere else self.cursor

        def seen() -> bool:
            return any(matches(r.event, pattern) for r in self.adapter.events[first:])

        try:
            await self.adapter.wait_until(seen, seconds)
        except TimeoutError:
            return
        raise Failed(f"it came: {self._recent()}")

    async def expect_handshakes(self, want: Any, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            count = self.handshakes()
            if holds(count, want):
                return
            if time.monotonic() >= deadline:
                raise Failed(f"the server counted {count} connections")
            await asyncio.sleep(0.05)

    def handshakes(self) -> int:
        """Connections the client opened since the scenario began (the scripted server's count
        starts at each scenario)."""
        if self.scenario.get("server", "fleet") == "scripted":
            return self.stage.scripted.handshakes
        return self.stage.connections - self.baseline

    def in_order(self, step: Step) -> None:
        pattern = resolve(step["in_order"], self.names)
        last: dict[str, Any] = {}
        for received in self.adapter.events:
            if not matches(received.event, pattern):
                continue
            key = repr([lookup(received.event, path) for path in step["key"]])
            value = lookup(received.event, step["field"])
            if key in last and not value >= last[key]:
                raise Failed(f"{step['field']} {value} after {last[key]} ({key})")
            last[key] = value

    def _recent(self, count: int = 6) -> str:
        events = [r.event for r in self.adapter.events[self.cursor :]][-count:]
        return "; ".join(_short(e) for e in events) or "nothing"


class Suite:
    """Scenarios played on one stage, one after another::

        suite = Suite(stage)
        outcome = await suite.play(scenario, command, "python")
        problems = await suite.close()   # adapters that did not exit 0

    The next scenario's adapter is started while a scenario plays (an interpreter's start is
    most of a short scenario's time, and an idle adapter does nothing until ``start``); each
    adapter's exit is awaited while the next one plays."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self._spares: dict[tuple[str, ...], asyncio.Task[Adapter]] = {}
        self._exits: list[asyncio.Task[str | None]] = []

    async def play(self, scenario: Scenario, command: Sequence[str], client: str) -> Outcome:
        """One scenario against one client (``clients`` instances at once where it says so)."""
        stage = self.stage
        started = time.monotonic()
        server = scenario.get("server", "fleet")
        if server == "fleet":
            await stage.restore()
        else:
            stage.scripted.play(resolve(scenario["script"], PROTOCOLS))
        count = int(scenario.get("clients", 1))
        results = await asyncio.gather(*(self._one(scenario, command, n) for n in range(count)), return_exceptions=True)
        if server == "fleet":
            stage.restore_soon()  # a gateway the scenario stopped comes back while the next one plays
        reason = ""
        try:
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            _across(scenario, [r for r in results if isinstance(r, dict)])
        except (Failed, AdapterFailed) as exc:
            reason = str(exc)
        except OSError as exc:  # the adapter's program is missing, or not executable
            reason = f"the adapter did not start: {exc}"
        return Outcome(scenario["name"], client, not reason, reason, time.monotonic() - started)

    async def close(self) -> list[str]:
        """Stop the spare adapters; why any adapter's exit broke the contract (each must exit 0
        once stopped)."""
        for spare in self._spares.values():
            with contextlib.suppress(Exception):
                adapter = await spare
                await adapter.close()
                self._exits.append(asyncio.create_task(_exit(adapter)))
        self._spares.clear()
        return [problem for problem in await asyncio.gather(*self._exits) if problem is not None]

    async def _adapter(self, command: Sequence[str]) -> Adapter:
        """A started adapter (the spare, if one is ready), and the next spare on its way."""
        key = tuple(command)
        spare = self._spares.pop(key, None)
        self._spares[key] = asyncio.create_task(self._start(command))
        return await spare if spare is not None else await self._start(command)

    async def _start(self, command: Sequence[str]) -> Adapter:
        adapter = Adapter(command, ROOT)
        try:
            return await adapter.__aenter__()
        except BaseException:
            await adapter.close()
            self._exits.append(asyncio.create_task(_exit(adapter)))
            raise

    async def _one(self, scenario: Scenario, command: Sequence[str], n: int) -> dict[str, Any]:
        stage = self.stage
        server = scenario.get("server", "fleet")
        player = stage.player(f"{scenario['name']}{n}")
        names: dict[str, Any] = {
            "url": stage.url if server == "fleet" else stage.scripted.url,
            "player": player,
            "token": stage.token(player),
            "forged_token": stage.token(player, forged=True),
            "rising": stage.rising,
            "rival": stage.player(f"{scenario['name']}{n}-rival"),  # other players of the scenario's own
            "other": stage.player(f"{scenario['name']}{n}-other"),
            **PROTOCOLS,
        }
        adapter = await (self._adapter(command) if n == 0 else self._start(command))
        played = Play(stage, scenario, adapter, names)
        try:
            await played.run()
        finally:
            await adapter.close()
            self._exits.append(asyncio.create_task(_exit(adapter)))
        if not any(r.event.get("event") == "stopped" for r in adapter.events):
            raise Failed("told to stop, the adapter did not say stopped")
        return played.names


async def _exit(adapter: Adapter) -> str | None:
    """Why the adapter's exit broke the contract (it must exit 0 once stopped), or None."""
    code = await adapter.exited()
    return None if code == 0 else f"{' '.join(adapter.command)} exited with {code}: {adapter.stderr[-500:]!r}"


def _across(scenario: Scenario, results: list[dict[str, Any]]) -> None:
    """The scenario's checks over every client instance's saved values (``across_clients``)."""
    for check in scenario.get("across_clients", []):
        values = [r.get(check["saved"]) for r in results]
        numbers = [v for v in values if isinstance(v, int | float)]
        if len(numbers) < len(values) or max(numbers) < float(check["max_at_least"]):
            raise Failed(
                f"{check['saved']} over {len(values)} clients: {values}; the greatest must be "
                f"at least {check['max_at_least']} ({check.get('why', '')})"
            )


def _what(step: Step) -> str:
    for kind in ("expect", "expect_none", "in_order"):
        if kind in step:
            return f"{kind} {describe(step[kind])}"
    if "cmd" in step:
        return f"cmd {step['cmd'].get('cmd')}"
    if "fleet" in step:
        return f"fleet {step['fleet']}"
    return f"expect_handshakes {step.get('expect_handshakes')}"


def _short(event: dict[str, Any]) -> str:
    text = json.dumps(event, separators=(",", ":"))
    return text if len(text) <= 160 else text[:157] + "..."


async def run(clients: dict[str, list[str]], names: Sequence[str] = ()) -> list[Outcome]:
    """Every scenario (or those named) against every client given, on one stage."""
    chosen = scenarios(names)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="lb-conformance-") as tmp:
        async with Stage(Path(tmp)) as stage:
            suite = Suite(stage)
            try:
                for client, template in clients.items():
                    for scenario in chosen:
                        outcome = await suite.play(scenario, command_line(template), client)
                        print(outcome.line(), flush=True)
                        outcomes.append(outcome)
            finally:
                problems = await suite.close()
    for problem in problems:
        print(f"FAIL adapter exit: {problem}", flush=True)
        outcomes.append(Outcome("exit", "adapter", False, problem, 0.0))
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser("python -m clients.conformance.runner", __doc__.split("\n\n")[0])
    parser.add_argument("--client", action="append", default=[], help="a client of adapters.json (default: all)")
    parser.add_argument("--scenario", action="append", default=[], help="a scenario's name (default: all)")
    parser.add_argument("--command", nargs=REMAINDER, help="an adapter's command line: a client of your own")
    parser.add_argument("--table", action="store_true", help="print the scenario table (docs/clients.md) and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(table(), end="")
        return 0
    known = adapters()
    if args.command:
        clients = {"custom": list(args.command)}
    else:
        missing = [c for c in args.client if c not in known]
        if missing:
            parser.error(f"no client {', '.join(missing)} in {ADAPTERS.relative_to(ROOT)} ({', '.join(known)})")
        clients = {c: known[c] for c in args.client or known}
    outcomes = asyncio.run(run(clients, args.scenario))
    failed = [o for o in outcomes if not o.passed]
    print(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
