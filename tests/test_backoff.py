"""Reconnect backoff: bounds, growth, reset, and spread across many clients."""

from __future__ import annotations

import random

from client.backoff import DRAINING, OVERLOADED, Backoff


def test_delays_stay_within_a_growing_cap() -> None:
    b = Backoff(rng=random.Random(1))
    caps = []
    for _ in range(12):
        cap = b.cap
        delay = b.next_delay()
        assert 0 <= delay <= cap
        caps.append(cap)
    assert caps[:7] == [0.5, 1, 2, 4, 8, 16, 20] and set(caps[6:]) == {20}


def test_a_stable_connection_resets_the_cap_and_a_short_one_does_not() -> None:
    b = Backoff(rng=random.Random(2))
    for _ in range(5):
        b.next_delay()
    b.connected_for(3)
    assert b.cap == 16
    b.connected_for(10)
    assert b.cap == 0.5


def test_server_hints() -> None:
    b = Backoff(rng=random.Random(3))
    drains = [b.next_delay(close_code=DRAINING) for _ in range(200)]
    assert max(drains) <= 1.0 and b.attempt == 0  # a drain is no failure: the cap does not grow
    overloaded = [Backoff(rng=random.Random(i)).next_delay(close_code=OVERLOADED) for i in range(200)]
    assert max(overloaded) <= 5.0 and max(overloaded) > 2.0  # the cap jumps to the floor
    assert Backoff(rng=random.Random(4)).next_delay(retry_after=7) >= 7


def test_a_thousand_clients_first_delays_are_spread_not_clustered() -> None:
    delays = [Backoff(rng=random.Random(i)).next_delay() for i in range(1000)]
    buckets = [0] * 10  # 50 ms buckets over the 0.5 s cap
    for d in delays:
        buckets[min(9, int(d / 0.05))] += 1
    assert all(60 <= n <= 140 for n in buckets), buckets  # ~100 each: uniform, no spike
    assert len({round(d, 6) for d in delays}) > 990
