"""One typed loader for every process's settings: field → variable → parse → check.

Settings are frozen dataclasses whose fields are declared with ``setting()``; the same
declaration gives the loader, the checks, ``--help`` and README's configuration table::

    @dataclass(frozen=True, slots=True)
    class ExampleSettings:
        port: int = setting("LB_EX_PORT", 8000, "listen port; 0 = any free one", check=at_least(0))

        def __post_init__(self) -> None:
            validate(self)

    s = load(ExampleSettings)              # from os.environ
    s = ExampleSettings(port=0)            # tests: everything by keyword, checked the same way
    print(describe(ExampleSettings))       # the variables with their defaults, for --help

One set of rules for every process:

- booleans: ``1 true yes on`` and ``0 false no off`` (any case); anything else is refused;
- lists: comma-separated, blanks ignored;
- a numeric limit of ``0`` means "off" / "no cap" wherever a field's help says so; the limits that
  keep one client from hurting the others (frame size, subscriptions, rate, write buffer, backlog)
  have no "off", and their check refuses ``0``;
- a value that does not parse, or fails its field's check, raises ``SettingsError`` naming the
  variable, and the entry points turn that into one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from redis.connection import parse_url

T = TypeVar("T")
Check = Callable[[Any], str | None]  # returns what is wrong, or None

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class SettingsError(ValueError):
    """A variable that does not parse or is out of range; the message names the variable."""


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def parse_list(raw: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in raw.split(",") if v.strip())


def parse_pairs(raw: str) -> dict[str, str]:
    """``"alltime=incr,daily=best"`` -> ``{"alltime": "incr", "daily": "best"}``."""
    out = {}
    for part in parse_list(raw):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"expected name=value pairs, got {part!r}")
        out[key.strip()] = value.strip()
    return out


def parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError("expected a whole number") from None


def parse_float(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ValueError("expected a number") from None


# parsers by the field's annotation (these modules use postponed annotations: types are strings)
_PARSERS: dict[str, Callable[[str], Any]] = {
    "int": parse_int,
    "float": parse_float,
    "bool": parse_bool,
    "str": str.strip,
    "Path": lambda raw: Path(raw.strip()),
    "tuple[str, ...]": parse_list,
}


def setting(
    var: str,
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    shown: str | None = None,
    parse: Callable[[str], Any] | None = None,
    check: Check | None = None,
    secret: bool = False,
) -> Any:
    """A settings field read from ``var``. ``factory`` for a default computed per instance (then
    ``shown`` is what ``--help`` prints for it); ``parse`` where the annotation's parser does not
    fit; ``check`` is run on every instance, loaded or built by keyword; a ``secret``'s value is
    never repeated in an error."""
    meta = {"var": var, "help": help, "parse": parse, "check": check, "shown": shown, "secret": secret}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def nested(cls: type[Any]) -> Any:
    """A field holding another settings object (e.g. ``GameConfig``), loaded from the same env."""
    return dataclasses.field(default_factory=cls, metadata={"nested": cls})


def log_level() -> Any:
    return setting(
        "LB_LOG_LEVEL",
        "INFO",
        "log level: DEBUG, INFO, WARNING, ERROR",
        parse=lambda r: r.strip().upper(),
        check=one_of(*LOG_LEVELS),
    )


# --- checks: each returns what is wrong with a value, or None


def at_least(low: float) -> Check:
    return lambda v: None if v >= low else f"must be >= {low:g}"


def above(low: float) -> Check:
    return lambda v: None if v > low else f"must be > {low:g}"


def between(low: float, high: float) -> Check:
    return lambda v: None if low <= v <= high else f"must be {low:g}..{high:g}"


def one_of(*choices: str) -> Check:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def validate(obj: Any) -> None:
    """Run every field's check; call from ``__post_init__``. Raises ``SettingsError``."""
    for f in dataclasses.fields(obj):
        check = f.metadata.get("check")
        if check is not None and (problem := check(getattr(obj, f.name))) is not None:
            got = "" if f.metadata["secret"] else f", got {getattr(obj, f.name)!r}"
            raise SettingsError(f"{f.metadata['var']} ({f.name}) {problem}{got}")


def load(cls: type[T], env: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build ``cls`` from the variables present in ``env`` (default: the process environment);
    absent ones keep their defaults, ``overrides`` win over both."""
    env = os.environ if env is None else env
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in overrides:
            continue
        if "nested" in f.metadata:
            kwargs[f.name] = load(f.metadata["nested"], env)
            continue
        var = f.metadata.get("var")
        if var is None or var not in env:
            continue
        raw = env[var]
        parse = f.metadata["parse"] or _PARSERS.get(str(f.type))
        if parse is None:
            raise TypeError(f"{cls.__name__}.{f.name}: no parser for {f.type}")
        try:
            kwargs[f.name] = parse(raw)
        except ValueError as exc:
            shown = "(secret)" if f.metadata["secret"] else repr(raw)
            raise SettingsError(f"{var}={shown}: {exc}") from None
    try:
        return cls(**kwargs, **overrides)
    except SettingsError:
        raise
    except ValueError as exc:  # a check across fields (__post_init__)
        raise SettingsError(str(exc)) from None


def variables(cls: type[Any]) -> list[tuple[str, str, str]]:
    """``(variable, default as shown, help)`` for every variable ``cls`` reads, nested ones first."""
    rows: list[tuple[str, str, str]] = []
    for f in dataclasses.fields(cls):
        if "nested" in f.metadata:
            rows.extend(variables(f.metadata["nested"]))
        elif "var" in f.metadata:
            rows.append((f.metadata["var"], _shown(f), f.metadata["help"]))
    return rows


def _shown(f: dataclasses.Field[Any]) -> str:
    if f.metadata.get("shown") is not None:
        return str(f.metadata["shown"])
    value = f.default
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "(none)"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "(none)"
    if value == "":
        return "(none)"
    return str(value)


def _unique(*classes: type[Any]) -> list[tuple[str, str, str]]:
    """``variables()`` of several classes, each variable once (the first class to read it says it)."""
    seen: dict[str, tuple[str, str, str]] = {}
    for cls in classes:
        for row in variables(cls):
            seen.setdefault(row[0], row)
    return list(seen.values())


def describe(*classes: type[Any], only: Collection[str] | None = None) -> str:
    """The environment variables of ``classes`` (or just those named in ``only``), for the epilog
    of ``--help``."""
    rows = [row for row in _unique(*classes) if only is None or row[0] in only]
    lines = [f"  {var} [{default}]\n      {text}" for var, default, text in rows]
    return "\n".join(["environment variables (default in brackets):", *lines])


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Options with their defaults (where the help does not say it already), a URL's password
    hidden (a default may come from ``LB_REDIS_URL``); the description and the variables' epilog
    as written."""

    def _expand_help(self, action: argparse.Action) -> str:
        if isinstance(action.default, str) and "://" in action.default:
            action = copy.copy(action)
            action.default = redacted(action.default)
        return super()._expand_help(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        # "is", not "in": a default of 0 or 0.0 equals False and must still be shown
        default = action.default
        shown = not any(default is v for v in (None, False, argparse.SUPPRESS)) and default not in ("", [])
        if shown and "default" not in text:
            text += " (default: %(default)s)"
        return text


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose subcommands refuse what they do not know themselves, with their own
    usage: argparse hands a subcommand's unknown arguments back to the top parser, whose error shows
    the top-level usage (``python -m scorer [-h] …``) for a typo in ``python -m scorer submit``. A
    subcommand's parser is made of the same class (``add_subparsers``), so nested ones too."""

    def __init__(self, *args: Any, subcommand: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommand = subcommand

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", functools.partial(type(self), subcommand=True))
        return super().add_subparsers(**kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if self.subcommand and extras:
            # everything after a subcommand's name is its own (argparse gives it all the rest)
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def argument_parser(prog: str, description: str, *settings: type[Any]) -> ArgumentParser:
    """An argument parser whose ``--help`` lists the options with their defaults and, below them,
    every ``LB_`` variable the process reads."""
    return ArgumentParser(
        prog=prog,
        description=plain(description),
        epilog=describe(*settings) if settings else None,
        formatter_class=HelpFormatter,
    )


def plain(text: str) -> str:
    """Docstring text for a terminal: without reStructuredText's literal markup."""
    return text.replace("``", "")


def redacted(url: str) -> str:
    """``url`` with every password hidden: in the user part of each node (a cluster URL may name
    several: ``redis+cluster://:pw@h1:p1,h2:p2``) and in the query (``unix://…?password=``): for
    logs and messages (credentials are never logged)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not even a URL: it may still hold a secret
        return "(unparsable URL)"
    netloc = ",".join(_redacted_node(node) for node in parts.netloc.split(","))
    query = "&".join("password=***" if p.startswith("password=") else p for p in parts.query.split("&"))
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    # by hand, not urlunsplit: that drops the empty host of unix:///path
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )


def _redacted_node(node: str) -> str:
    user, at, address = node.rpartition("@")
    if not at or ":" not in user:
        return node
    return f"{user.partition(':')[0]}:***@{address}"


def cluster_seeds(url: str) -> list[str] | None:
    """The seed nodes of a cluster URL, each as a plain node URL sharing the credentials, path and
    query; None for a URL that is not a cluster's. ``redis+cluster://:pw@h1:7000,h2:7001/0`` ->
    ``["redis://:pw@h1:7000/0", "redis://:pw@h2:7001/0"]``: any one that answers tells the client
    the whole cluster, so naming several keeps a node that is down from being the one way in."""
    scheme, sep, rest = url.partition("://")
    if scheme.lower() not in ("redis+cluster", "rediss+cluster"):
        return None
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    netloc, tail = rest[:cut], rest[cut:]
    user, at, hosts = netloc.rpartition("@")
    plain = scheme[: -len("+cluster")]
    return [f"{plain}{sep}{user}{at}{host.strip()}{tail}" for host in hosts.split(",")]


def redis_url_problem(url: str) -> str | None:
    """What is wrong with a Redis URL, checked as the client will read it (None: nothing)."""
    seeds = cluster_seeds(url)
    if seeds is not None and "@" in url.partition("://")[2].rpartition("@")[0]:
        return f"names credentials per node: give them once, before the first node; got {redacted(url)!r}"
    for node in seeds or [url]:
        try:
            parsed = parse_url(node)  # type: ignore[no-untyped-call]
        except ValueError as exc:
            return (
                "is not a Redis URL (redis://, rediss://, unix://, or redis+cluster://host:port[,host:port...] "
                f"for a cluster): {exc}; got {redacted(url)!r}"
            )
        if seeds is not None and not parsed.get("host"):
            return f"names a cluster node without a host; got {redacted(url)!r}"
    return None


def redis_url_arg(text: str) -> str:
    """``type=`` of a ``--redis-url`` option: a malformed URL is a usage error, not a traceback."""
    if (problem := redis_url_problem(text)) is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def redis_url(
    default: str = DEFAULT_REDIS_URL, help: str = "Redis to use (./dev run prints the one it started)"
) -> Any:
    """The ``LB_REDIS_URL`` field; ``""`` as default means "none given" and is accepted as such.
    Marked secret: the check shows the value redacted instead."""
    return setting(
        "LB_REDIS_URL",
        default,
        help,
        check=lambda v: None if v == default == "" else redis_url_problem(v),
        secret=True,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class RedisPool:
    """How many connections a Redis client keeps per node, and how long a call waits for one when
    all are busy. Bounded on purpose: a burst of calls (a catch-up, a tick with many boards due, a
    failover's retries) queues here for a moment instead of opening connections without end or
    failing at once; what still finds no connection after ``wait`` is refused ``unavailable``
    (``leaderboard.errors.Unavailable``), which every caller treats as Redis unavailable."""

    size: int = setting(
        "LB_REDIS_POOL_SIZE",
        64,
        "connections a Redis client keeps at most per node (a gateway has two; the scorer adds one per "
        "blocking stream reader); a call finding all busy waits LB_REDIS_POOL_WAIT",
        check=at_least(1),
    )
    wait: float = setting(
        "LB_REDIS_POOL_WAIT",
        1.0,
        "seconds a call waits for a free pooled connection before it is refused `unavailable`",
        check=above(0),
    )

    def __post_init__(self) -> None:
        validate(self)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaReads:
    """Whether a process's player-facing reads (own-rank pushes, top, around, ranks) may be served
    by the replicas of the master that owns a game, and how stale such a read may be
    (leaderboard/replicas.py). Writes, the scorer and reads that must see their own writes always
    go to the master."""

    enabled: bool = setting(
        "LB_READ_REPLICAS",
        False,
        "serve own-rank pushes and top/around/ranks reads from the master's replicas (found in its "
        "INFO replication; on Redis Cluster with READONLY) while they are within LB_REPLICA_MAX_LAG_MS",
    )
    max_lag_ms: int = setting(
        "LB_REPLICA_MAX_LAG_MS",
        500,
        "the staleness a replica read may have at most, in ms: past it (a replica behind the "
        "master's replication offset for longer, or not answering its checks) reads go to the master",
        check=at_least(1),
    )
    check_ms: int = setting(
        "LB_REPLICA_CHECK_MS",
        100,
        "how often each process compares the replicas' replication offsets with their master's, in ms "
        "(off the read path; must be below LB_REPLICA_MAX_LAG_MS)",
        check=at_least(10),
    )
    timeout_ms: int = setting(
        "LB_REPLICA_TIMEOUT_MS",
        250,
        "a replica that has not answered a read (or a check) within this many ms is left for the "
        "master at once, the read retried there, until a check finds it answering and current again",
        check=at_least(1),
    )

    def __post_init__(self) -> None:
        validate(self)
        if self.check_ms >= self.max_lag_ms:
            raise SettingsError(
                f"LB_REPLICA_CHECK_MS ({self.check_ms}) must be below LB_REPLICA_MAX_LAG_MS ({self.max_lag_ms}): "
                "a replica is known current only for LB_REPLICA_MAX_LAG_MS after a check"
            )


def unreachable(url: str, exc: BaseException, *, env: bool = True) -> str:
    """One line for a command that could not reach Redis: the URL it tried, and how to change it
    (``env``: the command also reads ``LB_REDIS_URL``)."""
    how = "--redis-url URL or `export LB_REDIS_URL=URL`" if env else "--redis-url URL"
    return (
        f"cannot reach Redis at {redacted(url)} ({exc}); point to another with {how} "
        "(./dev run writes its embedded Redis's URL to var/fleet.env)"
    )


def load_or_exit(cls: type[T], **overrides: Any) -> T:
    """``load()`` for an entry point: a bad variable is one line on stderr and exit status 2."""
    try:
        return load(cls, **overrides)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def markdown_table(*classes: type[Any]) -> str:
    """README's configuration table, from the same declarations."""
    rows = [f"| `{var}` | `{default}` | {text} |" for var, default, text in _unique(*classes)]
    return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])
