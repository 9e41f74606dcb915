"""``python -m scorer rebuild``: restore a game's boards from the durable score log into a Redis
that lost them (a failover that dropped writes, a wiped volume, a FLUSHALL).

What comes back: every board of every window period that has not expired, each member with its
exact packed score; the distinct-player counts (the same HyperLogLog registers: they depend only
on the set of players added); display names in the profiles; the idempotency memory (every id
whose seen-bucket would still be alive); the activity feed of the replayed part; the top-N
versions, so the publisher publishes every restored board. From the journaled actions
(``durable/fold.py``): the ban tombstones, what bans and corrections did to the boards,
profiles (name, avatar, country), tournaments with their entrants and boards, the close markers
and finals of closed periods, badges, and the board definitions; the defined boards' entries
from their slips (``durable/records.Slip``). Not the close events' stream (``lb:{g}:closed``): its
consumers (rewards) already took them, and the restored markers keep the publisher from closing
those periods again.

How, in the order the submissions were applied (the log's ``applied, idx, seq``):

1. all but the newest part — the folded board rows, then the raw rows — is folded in Python
   (``durable/fold.py``, the function's rules) and written as final states: one ZADD per member
   instead of one call per submission, so a rebuild is not bounded by Redis's speed at running
   ``lb_submit``; the ids still inside the idempotency horizon are added to their seen buckets;
   then each board's rank companions (histogram, distinct points) are computed from its members.
   The fold is per player, so the players are cut into parts and each part is read and folded
   by a worker process of its own (``workers``, two by default: parts.py);
2. the newest ``replay`` submissions (default: as many as the activity feed keeps) go through
   ``lb_submit`` itself, in batches, with their original timestamps, on top of that state: the
   same rules, and the activity feed comes back as it was; their announcements go to a channel
   nobody listens to (history is not news). Any of them timestamped outside the horizon (which
   ``lb_submit`` would refuse as too old) is folded instead;
3. the journaled actions are folded with step 1, in the same order (an ``ActionFolder``): the
   actions cannot be replayed through their functions (that would journal them again), so every
   submission applied before the newest ban, unban, correction or name change is folded, and
   step 2 replays only later ones. What the actions left beyond boards and names (and the
   actions whose order does not matter to the boards: tournaments, entrants, closes, badges,
   avatars, countries) is written as final state with the folded state;
4. before that state, the defined boards' slips go through ``lb_submit``, in the order applied,
   each call at a moment that gives its slips the periods and outcomes they had (writes.py's
   ``slip_calls``), under the definition of their time, with the bans, the corrections of
   defined boards (``lb_correct``, not journaled again) and the definitions' changes in
   their places: a defined board's rules are the function library's alone, so they are
   replayed, not folded.

A rebuild refuses a Redis that already holds data of the game unless ``force`` (then it writes
over it: folded states replace members, replayed ids already seen are duplicates). Run it with the
scorers stopped: a submission applied meanwhile could be overwritten by an older folded state.

Modules: restore.py the course of a rebuild, parts.py the fold in worker processes, writes.py
what it writes to Redis, report.py what it tells the operator.
"""

from .report import Progress, Restored
from .restore import RebuildRefused, existing_keys, rebuild

__all__ = ["Progress", "RebuildRefused", "Restored", "existing_keys", "rebuild"]
