"""Read budgets: how much Redis time one player, or one spectator address, may take (pure: no I/O).

The gateway and the HTTP API draw from the same kind of budget. What a request costs *Redis*
varies a hundredfold (a ``ranks`` of 100 players against a ``ping``), and a hostile client can
open sockets, reconnect or send requests from many connections, so reads are budgeted apart from
any per-socket frame rate (the gateway's ``LB_GW_RATE`` / ``LB_GW_BURST``):

- each request costs units, about one per row or player Redis reads for it (``cost()``);
  bench/read_costs.py measures what a unit costs Redis, for docs/security.md;
- a budget is a token bucket of ``rate`` units/s, holding at most ``burst`` (the gateway's
  ``LB_GW_READ_*``, the API's ``LB_API_READ_*``), kept per player (the token's subject) or, for
  spectators, per address — never per connection: a player's sockets or requests draw from one
  budget, and a reconnect finds the budget it left;
- game servers (``role=server``) are trusted and have none.

The table is bounded: a budget untouched long enough to be full again is the same as a new one
and is forgotten, and beyond ``size`` entries the least recently used goes first.

::

    budgets = Budgets(rate=50.0, burst=300, size=50_000)
    if not budgets.take("p:mia", cost(request), time.monotonic()):
        ...  # rate_limited
"""

from __future__ import annotations

from collections import OrderedDict

from leaderboard import protocol as p

# A closed period's finals hold a top N per scope (LB_CLOSED_TOP_N, 100 by default); one period
# costs like a tenth of its rows: it is one list element Redis copies, not rows it looks up.
FINALS_PERIOD_UNITS = 10

_FREE = (p.Ping, p.Hello, p.Unsubscribe)  # answered without Redis


def cost(req: p.Request) -> int:
    """Units a request costs: the rows or players Redis reads for it, at least 1 when it reads."""
    if isinstance(req, _FREE):
        return 0
    if isinstance(req, p.Top):
        return req.n
    if isinstance(req, p.Around):
        return 2 * req.k + 1
    if isinstance(req, p.Ranks):
        return len(req.players)
    if isinstance(req, p.Finals):
        return req.n * FINALS_PERIOD_UNITS
    return 1


# The dearest request protocol.py admits: a budget must hold at least this much, or that request
# could never pass.
MAX_COST = max(p.MAX_TOP, 2 * p.MAX_AROUND + 1, p.MAX_FRIENDS, p.MAX_FINALS * FINALS_PERIOD_UNITS)


class Budgets:
    def __init__(self, rate: float, burst: int, size: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.size = size
        # key -> (units left, when), the least recently used first (an OrderedDict: a plain
        # dict emptied from the front makes each look at its first entry slower)
        self._left: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._left)

    def left(self, key: str, now: float) -> float:
        """Units ``key`` may spend now."""
        held = self._left.get(key)
        if held is None:
            return self.burst
        units, at = held
        return min(self.burst, units + (now - at) * self.rate)

    def take(self, key: str, units: int, now: float) -> bool:
        """Spend ``units`` of ``key``'s budget; False (nothing spent) when it holds fewer."""
        if units <= 0:
            return True
        left = self.left(key, now)
        allowed = left >= units
        self._left[key] = (left - units if allowed else left, now)
        self._left.move_to_end(key)
        self._expire(now)
        return allowed

    def _expire(self, now: float) -> None:
        # From the least recently used: a full budget is forgotten (a new one is the same), and
        # beyond the bound the oldest goes even if not full. Two at most: each take adds at most
        # one entry, so the table still shrinks to what is in use, at a constant cost per take.
        for _ in range(2):
            if not self._left:
                return
            key, (units, at) = next(iter(self._left.items()))
            if len(self._left) > self.size or units + (now - at) * self.rate >= self.burst:
                del self._left[key]
            else:
                return
