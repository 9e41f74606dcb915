"""Typed Python wrappers of the function library (lua/, assembled by assembly.py): one method per
registered function, replies as the dataclasses of results.py, ``ERR <code>`` replies as the
exception tree of errors.py (``errors.from_reply``). They take a ``redis.asyncio.Redis`` made
by ``connect()`` (str replies; undecodable bytes kept so one never poisons a whole batch)::

    lb = Leaderboard(await connect(url), GameConfig(game="arena"))
    await lb.load()
    [result] = await lb.submit_batch([Submission("m-1", "mia", 120, now_ms).fields()])
    top = await lb.top("weekly")          # top.period, top.entries

===============  ==================================  ==============================
function         wrapper                             used by
===============  ==================================  ==============================
lb_submit        ``submit_batch``                    scorer consumer
lb_enqueue       ``enqueue``                         queue.Queue (submit API)
lb_ack           ``ack_command``                     scorer consumer, journal worker
lb_status        ``status``                          gateways (status request), ``python -m scorer status``
lb_lease         ``lease``                           scorer publisher
lb_publish       ``publish``                         scorer publisher
lb_forget        ``forget``                          scorer stream workers
lb_top           ``top``                             publisher, gateways
lb_around        ``around``                          gateways
lb_ranks         ``ranks``, ``rank``                 gateways (requests, own rank)
lb_close         ``close``                           scorer publisher (closed periods, every board)
lb_tournament    ``create_tournament``               operators (API, ``python -m scorer``)
lb_join          ``join``                            operators, game servers
lb_ban           ``ban``                             moderation.Moderation, the rebuild (replay)
lb_unban         ``unban``                           moderation.Moderation
lb_correct       ``correct``, ``replay_correct``     moderation.Moderation, the rebuild (replay)
lb_profile       ``profile``                         moderation.Moderation
lb_rank_rebuild  ``rebuild_rank_index``              operators, once per board after an upgrade
lb_board_put     ``create_board``, ``update_board``  operators (``python -m scorer board``, server role)
lb_board_delete  ``delete_board``                    operators
lb_board_purge   ``purge_board``                     the scorer (leaderboard/purge.py)
===============  ==================================  ==============================

Reads rank in the window's rank mode (``GameConfig.rank_mode_for``, leaderboard/ranking.py).

Reads take ``period``: None or ``"current"``, ``"previous"``, or a label such as ``"2026-W48"``
(see ``Window.resolve``). A tournament is read as its window ``t-<id>``::

    last_week = await lb.rank("mia", "weekly", period="previous")
    await lb.create_tournament("spring", start_ms, end_ms)
    await lb.join("spring", ["mia", "leo"])
    top = await lb.top("t-spring")

The boards a moderation or profile call touches are found by moderation.py (``Moderation`` is
the high-level call operators use); these wrappers take them as given.

The wrappers are grouped as the library's files are, each group a part of ``Leaderboard``:
submit.py (submit, queue, publish), reads.py, periods.py (close, tournaments), definitions.py
and moderation.py, on calls.py (one call, its errors). Around the wrappers, each in its module
of leaderboard/: the transport (``connect``, ``execute_packed``) in transport.py, the library's
code and its loading again on a node that lost it (every wrapper's call goes through
``with_library``) in loading.py, the batch layout of ``lb_submit`` in batch.py, the reads by
plain commands (``size``, ``stats``, ``feed``, ``finals``) in reads.py, the tournament registry
(``lb.tournaments``: ``get``, ``all``, ``entered``) in tournaments.py, and the board
definitions (``lb.boards``: ``refresh``, ``get``, ``all``) in definitions.py.
"""

from __future__ import annotations

from ..config import GameConfig
from ..definitions import Definitions
from ..loading import library_code as library_code  # re-exported: where its callers import it from
from ..tournaments import Tournaments
from ..transport import RedisClient
from .definitions import DefinitionCalls
from .moderation import ModerationCalls
from .periods import PeriodCalls
from .submit import SubmitCalls


class Leaderboard(SubmitCalls, ModerationCalls, PeriodCalls, DefinitionCalls):
    """One game's boards, reached through the function library (and the plain reads of
    reads.py); ``tournaments`` is the game's tournament registry (tournaments.py). Its wrappers
    are grouped as the library's files are: submit.py, reads.py, periods.py, definitions.py,
    moderation.py (each a part of this class), on calls.py."""

    def __init__(self, redis: RedisClient, config: GameConfig) -> None:
        self.redis = redis
        self.keys = config.keys
        self.tournaments = Tournaments(redis, self.keys)
        self.boards = Definitions(redis, config)
        # lb_enqueue's body buckets by (hour, idempotency_s): ~50 key names, the same all hour
        self._buckets: tuple[tuple[int, int], list[str]] = ((-1, -1), [])
