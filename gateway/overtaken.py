"""``overtaken``: a player told who passed them, on which board, and their new rank — by a friend
on the list their app sent (``watch``), or out of a board's top N.

No Redis read of its own. Friends' standings ride in the own-rank reads (ranks.py): a round reads
each board's subscribed players as before, plus those of the board's watched friends that nobody
here reads already, spread over the round's reads of that board (``extras``), so the players
list grows and the number of reads does not. A read adds at most ``LB_GW_FRIENDS_PER_READ``
friends: more watched friends than a round has room for are read in turn over the next rounds,
their passes told that much later. Leaving a top N is seen in the snapshots the hub
already parses (``on_snapshot``).

The work per round follows what moved, not sockets × friends. Each board keeps every watched
player's last standing and its order key (``seen``, smaller is better: the board's keys in their
directions). Only a player whose key changed is looked at: moving up, against the watchers that
have it as a friend (one index lookup: ``_watchers``); moving down, against its own friends.
Keys, unlike ranks, change only when that player's own score does, so standings read a moment
apart (in different chunks of a round) still compare right. A tie is not a pass.

An event found waits on its connection (``Watch.pending``) until the player's next rank read of
that board: it then goes out with their rank push, carrying the rank that read found, if the
passer is still ahead (or the player still out of the top N), and if the connection has not had
``LB_GW_OVERTAKEN_PER_MINUTE`` of them within the minute (the rest are counted, not sent).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from leaderboard import Leaderboard, Standing, wire
from leaderboard.boards import DEFAULT_ID, LiveBoard, order_key
from leaderboard.keys import defined_of
from leaderboard.messages import PassedBy

from .client import Client
from .frames import text_frame
from .metrics import Metrics
from .watch import Watch

OrderKey = tuple[int, ...]
FRIEND: PassedBy = "friend"
TOP: PassedBy = "top"


@dataclass(slots=True)
class _Seen:
    """A board's watched players in one period: player -> (order key, or None when unranked;
    its last standing)."""

    period: str
    players: dict[str, tuple[OrderKey | None, Standing]] = field(default_factory=dict)


@dataclass(slots=True)
class _Top:
    """A board's last snapshot: its period, its rows by player and its N."""

    period: str
    rows: dict[str, Mapping[str, Any]]
    n: int


class Overtaken:
    """One game's ``overtaken`` events (one per hub)."""

    def __init__(self, lb: Leaderboard, limit: int, per_read: int, metrics: Metrics) -> None:
        self._lb = lb
        self._limit = limit  # events per connection per minute; 0: none
        self._per_read = per_read  # friends added to one rank read at most
        self._cursor: dict[LiveBoard, int] = {}  # board -> where the next round's friends start
        self._metrics = metrics
        self._watchers: dict[str, set[Client]] = {}  # friend -> connections whose list names it
        self._own: dict[str, set[Client]] = {}  # player -> their connections that watch
        self._wanted: dict[LiveBoard, Counter[str]] = {}  # board -> friends of its watching subscribers
        self._seen: dict[LiveBoard, _Seen] = {}
        self._tops: dict[LiveBoard, _Top] = {}

    # ------------------------------------------------------------ who watches what

    def watch(self, client: Client, friends: Sequence[str], top: bool) -> None:
        """Replace the connection's watch (no friends and no top: none)."""
        self.forget(client)
        player = client.identity.player
        if player is None or not (friends or top):
            return
        client.watch = Watch(tuple(f for f in friends if f != player), top)
        self._own.setdefault(player, set()).add(client)
        for friend in client.watch.friends:
            self._watchers.setdefault(friend, set()).add(client)
        for key in client.boards:
            self.joined(client, key)

    def forget(self, client: Client) -> None:
        """The connection's watch ends (a new identity, a new list, the connection gone)."""
        w = client.watch
        if w is None:
            return
        for key in client.boards:
            self.left(client, key)
        for friend in w.friends:
            _discard(self._watchers, friend, client)
        _discard(self._own, client.identity.player or "", client)
        client.watch = None

    def joined(self, client: Client, key: LiveBoard) -> None:
        """A watching connection subscribed to ``key``: its friends are read there from now on."""
        if client.watch is not None and client.watch.friends:
            self._wanted.setdefault(key, Counter()).update(client.watch.friends)

    def left(self, client: Client, key: LiveBoard) -> None:
        w = client.watch
        if w is None:
            return
        w.pending.pop(key, None)
        wanted = self._wanted.get(key)
        if wanted is not None and w.friends:
            wanted.subtract(w.friends)
            for friend in w.friends:
                if wanted[friend] <= 0:
                    del wanted[friend]
            if not wanted:
                del self._wanted[key]
                self._seen.pop(key, None)
                self._cursor.pop(key, None)

    def released(self, key: LiveBoard) -> None:
        """The board's last subscriber here left."""
        self._tops.pop(key, None)
        self._seen.pop(key, None)

    # ------------------------------------------------------------ a round's reads

    def extras(self, chunks: Sequence[Sequence[Client]]) -> list[dict[LiveBoard, list[str]]]:
        """Per chunk of a round, per board: the watched friends its read of the board adds, those
        no chunk reads as a subscriber of it, split across the chunks that read the board.
        Also forgets the standings of players no longer watched or read."""
        plan: list[dict[LiveBoard, list[str]]] = [{} for _ in chunks]
        if not self._wanted:
            return plan
        read: dict[LiveBoard, set[str]] = {}
        where: dict[LiveBoard, list[int]] = {}
        for i, chunk in enumerate(chunks):
            for client in chunk:
                for key in client.boards:
                    if key in self._wanted:
                        read.setdefault(key, set()).add(client.identity.player or "")
                        if not where.get(key) or where[key][-1] != i:
                            where.setdefault(key, []).append(i)
        for key, wanted in self._wanted.items():
            mine = read.get(key, set())
            missing = [f for f in wanted if f not in mine]
            at = where.get(key)
            if missing and at:
                # At most ``per_read`` in one call: a read holds Redis for a bounded time, and
                # the event's Redis time stays within that share of the rank reads'. Friends
                # beyond a round's room are read in turn over the next rounds (a cursor).
                room = len(at) * self._per_read
                start = self._cursor.get(key, 0) % len(missing)
                if len(missing) > room:
                    missing = (missing[start:] + missing[:start])[:room]
                    self._cursor[key] = start + room
                step = -(-len(missing) // len(at))
                for j, i in enumerate(at):
                    if part := missing[j * step : (j + 1) * step]:
                        plan[i][key] = part
            seen = self._seen.get(key)
            if seen is not None:
                seen.players = {p: v for p, v in seen.players.items() if p in wanted or p in self._own}
        return plan

    def observe(self, key: LiveBoard, period: str, standings: Iterable[Standing]) -> None:
        """A read of ``key``: the standings whose order changed are checked for passes."""
        if key not in self._wanted or not self._limit:
            return
        order = self._order(key)
        if order is None:
            return
        seen = self._seen.get(key)
        if seen is None or seen.period != period:  # a new period starts everyone afresh
            seen = self._seen[key] = _Seen(period)
        players, wanted, own = seen.players, self._wanted[key], self._own
        for s in standings:
            if s.player not in wanted and s.player not in own:
                continue  # read for its own rank only: nobody's friend, watching nothing
            new = None if s.rank is None else order(s)
            before = players.get(s.player)
            players[s.player] = (new, s)
            if before is not None and before[0] != new:
                self._moved(key, players, s.player, before[0], new)

    def _moved(
        self,
        key: LiveBoard,
        players: dict[str, tuple[OrderKey | None, Standing]],
        who: str,
        old: OrderKey | None,
        new: OrderKey | None,
    ) -> None:
        if new is None:
            return  # off the board (banned, corrected away): passes nobody
        if old is None or new < old:  # up: the watchers it went past
            for client in self._watchers.get(who, ()):
                mine = players.get(client.identity.player or "")
                if key not in client.boards or client.watch is None or mine is None or mine[0] is None:
                    continue
                if new < mine[0] and (old is None or old >= mine[0]):
                    client.watch.queue(key, who, FRIEND)
        elif old is not None and new > old:  # down (a correction, a set): the friends now ahead
            for client in self._own.get(who, ()):
                if key not in client.boards or client.watch is None:
                    continue
                for friend in client.watch.friends:
                    theirs = players.get(friend)
                    if theirs is not None and theirs[0] is not None and old <= theirs[0] < new:
                        client.watch.queue(key, friend, FRIEND)

    def _order(self, key: LiveBoard) -> Callable[[Standing], OrderKey] | None:
        definition = self._lb.boards.get(defined_of(key[1]) or DEFAULT_ID)
        if definition is None:  # deleted a moment ago: its boards are not served
            return None
        return lambda s: order_key(definition, s.keys if s.keys is not None else (s.score or 0,))

    # ------------------------------------------------------------ snapshots

    def on_snapshot(self, key: LiveBoard, msg: Mapping[str, Any]) -> None:
        """A board's new snapshot: its watching players who were in the last one and are not now
        were pushed out of the top N by the lowest of those who came in."""
        entries, period = msg.get("entries"), msg.get("period")
        if not isinstance(entries, list) or not isinstance(period, str):
            return
        rows: dict[str, Mapping[str, Any]] = {
            e["player"]: e for e in entries if isinstance(e, dict) and isinstance(e.get("player"), str)
        }
        before = self._tops.get(key)
        self._tops[key] = _Top(period, rows, len(entries))
        if before is None or before.period != period or not self._own or not self._limit:
            return
        entered = [row for player, row in rows.items() if player not in before.rows]
        if not entered:
            return  # nobody came in: a removal, not a pass
        by = max(entered, key=lambda row: row.get("rank") or 0)
        for player in before.rows.keys() - rows.keys():
            for client in self._own.get(player, ()):
                if client.watch is not None and client.watch.top and key in client.boards:
                    client.watch.queue(key, by["player"], TOP, by, len(entries))

    # ------------------------------------------------------------ the events

    def take(self, client: Client, key: LiveBoard, standing: Standing, period: str) -> list[bytes]:
        """The events waiting for ``client`` on ``key``, now that its rank read found ``standing``:
        those still true, within the connection's minute's bound, as frames."""
        w = client.watch
        waiting = None if w is None else w.pending.pop(key, None)
        if w is None or not waiting or standing.rank is None:
            return []
        seen, top = self._seen.get(key), self._tops.get(key)
        order = self._order(key)
        frames = []
        now = time.monotonic()
        for by, (reason, row, n) in waiting.items():
            if reason == FRIEND:
                theirs = None if seen is None or seen.period != period else seen.players.get(by)
                if theirs is None or theirs[0] is None or order is None or not theirs[0] < order(standing):
                    continue  # no longer ahead: passed back, or a period ended
                s = theirs[1]
                named = None if top is None else top.rows.get(by, {}).get("name")
                row = {"player": by, "rank": s.rank, "score": s.score, "name": named, "keys": s.keys}
            elif row is None or standing.rank <= n:
                continue  # back in the top N already
            if not w.allow(now, self._limit):
                self._metrics.overtaken_limited.inc()
                continue
            frames.append(
                text_frame(
                    wire.overtaken(
                        board=key[1],
                        window=key[0],
                        period=period,
                        player=standing.player,
                        rank=standing.rank,
                        reason=reason,
                        by=row,
                    )
                )
            )
        self._metrics.overtaken.inc(len(frames))
        return frames


def _discard(index: dict[str, set[Client]], name: str, client: Client) -> None:
    members = index.get(name)
    if members is not None:
        members.discard(client)
        if not members:
            del index[name]
