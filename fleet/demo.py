"""Demo game-server traffic: a rated ladder that stays live for as long as it runs.

Why a ladder (every result is sent with ``op="set"``): with ``best`` a personal best only ever goes
up and points are bounded per window, so any endless stream of best-score writes settles — the top
10 freezes once the luckiest results are in (the old demo stopped publishing within five minutes).
A rating moves both ways, so the board stays a race on every window, indefinitely:

- each player has a potential; a rating follows it with noise, match after match;
- new players keep arriving, start low and learn (their strength rises towards their potential),
  so some of them climb into the top 10 over their first few dozen matches;
- the players near the top play the most (they grind), so nobody stays frozen at a lucky peak;
- players have a home region and a favourite mode, so every region and mode board moves too.

``Ladder.next(now_ms)`` is pure given its seed: the tests run an hour of it in a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random

from leaderboard import GameConfig, Submission, connect, now_ms
from leaderboard.errors import BacklogFull
from leaderboard.queue import Queue

FIRST = ("Mia", "Leo", "Ava", "Noah", "Zoe", "Kai", "Ivy", "Max", "Ada", "Eli", "Sam", "Lea", "Oli", "Nia")
LAST = ("Storm", "Quill", "Vega", "Frost", "Nova", "Pike", "Rook", "Blaze", "Moss", "Wren", "Flint", "Onyx")
REGIONS = ("eu", "na", "asia")
MODES = ("solo", "duo")

log = logging.getLogger("fleet.demo")

# The first players are player0 .. player<START-1>: the gateways' demo tokens (LB_GW_DEMO_PLAYERS)
# name one of them, so the page's own rank is there from the first seconds.
START_PLAYERS = 3000
MAX_PLAYERS = 50_000  # beyond it an arrival takes a retired player's slot: memory stays bounded
ROOKIE_RATING = 1000.0
LEARN_MATCHES = 15.0  # a rookie reaches ~63 % of the way to their potential after this many matches
PULL = 0.25  # how far one match moves the rating towards the player's current strength
NOISE = 15.0  # one match's luck, in rating points: more, and the top 10 turns over every second
MAX_RATING = 9999  # far below every window's points ceiling (docs/data-model.md)
# Who plays the next match: an arrival, a grinder near the top, a rookie of the last few
# arrivals, or anyone at all.
P_ARRIVE, P_TOP, P_ROOKIE = 0.01, 0.2, 0.2
TOP_SET = 100  # the "grinders": the highest ratings this ladder has handed out, kept current
ROOKIES = 32  # at most this many rookies play their first evening at once (others drop by) ...
ROOKIE_MATCHES = 50  # ... of this many matches
P_PRODIGY = 0.04  # arrivals with top-10 potential: without them no newcomer would ever get there


def display_name(index: int) -> str:
    """A distinct, readable name per player: "Mia Storm", then "Mia Storm 2", ..."""
    first, rest = FIRST[index % len(FIRST)], index // len(FIRST)
    last, round_ = LAST[(5 * rest + index) % len(LAST)], rest // len(LAST)  # mixed, still one-to-one
    return f"{first} {last}" + (f" {round_ + 1}" if round_ else "")


class Ladder:
    """The demo's players and their ratings; ``next()`` is the next match result to submit."""

    def __init__(self, seed: int | None = None, *, players: int = START_PLAYERS, max_players: int = MAX_PLAYERS):
        if not 1 <= players <= max_players:
            raise ValueError("need 1 <= players <= max_players")
        self._rnd = random.Random(seed)
        self._run = f"{self._rnd.getrandbits(48):012x}"  # ids stay unique across demo restarts
        self._serial = 0
        self._max = max_players
        self._ids: list[int] = []  # slot -> player number (player<N>)
        self._potential: list[float] = []
        self._rating: list[float] = []
        self._matches: list[int] = []
        self._top: dict[int, float] = {}  # slot -> rating, the TOP_SET highest handed out
        self._rookies: list[int] = []
        self._next_id = 0
        for _ in range(players):  # established players: already at their level
            slot = self._arrive()
            self._matches[slot] = 10 * int(LEARN_MATCHES)
            self._rating[slot] = self._potential[slot] + self._rnd.gauss(0, NOISE)
            self._note_top(slot)
        self._rookies.clear()
        # The regulars all play first (one match each, in random order), so every demo token's
        # player is on the boards within the first START_PLAYERS submissions.
        self._roll_call = list(range(players))
        self._rnd.shuffle(self._roll_call)

    @property
    def players(self) -> int:
        """Players who ever joined (retired ones included)."""
        return self._next_id

    def next(self, now_ms: int) -> Submission:
        """Play one match and return its result: the player's new rating, sent with ``op="set"``."""
        rnd = self._rnd
        u = rnd.random()
        if self._roll_call:
            slot = self._roll_call.pop()
        elif u < P_ARRIVE:
            slot = self._arrive()
        elif u < P_ARRIVE + P_TOP and self._top:
            slot = rnd.choice(list(self._top))
        elif u < P_ARRIVE + P_TOP + P_ROOKIE and self._rookies:
            slot = rnd.choice(self._rookies)
        else:
            slot = rnd.randrange(len(self._ids))
        self._matches[slot] += 1
        learnt = 1 - math.exp(-self._matches[slot] / LEARN_MATCHES)
        strength = ROOKIE_RATING + (self._potential[slot] - ROOKIE_RATING) * learnt
        rating = self._rating[slot]
        rating += PULL * (strength - rating) + rnd.gauss(0, NOISE)
        self._rating[slot] = rating = min(max(rating, 0.0), MAX_RATING)
        self._note_top(slot)
        if self._matches[slot] == ROOKIE_MATCHES and slot in self._rookies:
            self._rookies.remove(slot)
        number = self._ids[slot]
        self._serial += 1
        mode = MODES[(number // len(REGIONS)) % len(MODES)]
        if rnd.random() < 0.3:  # now and then the other mode
            mode = MODES[1 - MODES.index(mode)]
        return Submission(
            id=f"demo-{self._run}-{self._serial}",
            player=f"player{number}",
            points=round(rating),
            ts_ms=now_ms,
            op="set",
            name=display_name(number),
            region=REGIONS[number % len(REGIONS)],
            mode=mode,
        )

    def _arrive(self) -> int:
        rnd = self._rnd
        number, self._next_id = self._next_id, self._next_id + 1
        mean, spread = (2500, 150) if rnd.random() < P_PRODIGY else (1500, 350)
        potential = min(max(rnd.gauss(mean, spread), 100.0), MAX_RATING - 4 * NOISE)
        if len(self._ids) < self._max:
            slot = len(self._ids)
            self._ids.append(number)
            self._potential.append(potential)
            self._rating.append(ROOKIE_RATING)
            self._matches.append(0)
        else:  # a random player retires; their last rating stays on the boards
            slot = rnd.randrange(len(self._ids))
            self._top.pop(slot, None)
            if slot in self._rookies:
                self._rookies.remove(slot)
            self._ids[slot], self._potential[slot] = number, potential
            self._rating[slot], self._matches[slot] = ROOKIE_RATING, 0
        if len(self._rookies) < ROOKIES:
            self._rookies.append(slot)
        return slot

    def _note_top(self, slot: int) -> None:
        rating = self._rating[slot]
        top = self._top
        if slot in top or len(top) < TOP_SET:
            top[slot] = rating
            return
        low = min(top, key=top.__getitem__)
        if rating > top[low]:
            del top[low]
            top[slot] = rating


async def traffic(
    url: str, config: GameConfig, rate: float, *, stop: asyncio.Event | None = None, seed: int | None = None
) -> None:
    """File demo submissions into the queue, as game servers would, ten batches a second, until
    ``stop`` is set (then it returns within a tick; None: until cancelled).

    Stopped by an event, not by cancelling the task: on Python 3.11 a cancel that arrives as
    redis-py's write completes (its ``asyncio.wait_for`` under ``socket_timeout``) is swallowed,
    and a cancelled demo then ran on for ever while Ctrl-C waited for it."""
    stop = stop or asyncio.Event()
    redis = connect(url)
    queue = Queue(redis, config)
    ladder = Ladder(seed)
    per_tick = max(1, round(rate / 10))
    loop = asyncio.get_running_loop()
    try:
        next_tick = loop.time()
        while not stop.is_set():
            now = now_ms()
            try:
                await queue.submit_many([ladder.next(now) for _ in range(per_tick)])
            except BacklogFull:
                log.warning("demo traffic: backlog full, skipping a tick")
            # A fixed schedule, not "sleep 0.1 after each batch": the rate holds however long a batch takes.
            next_tick = max(next_tick + 0.1, loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), next_tick - loop.time())
    finally:
        await redis.aclose()
