"""The scorer: consumes the submissions queue in batches (one FCALL each), publishes each board's
top N once per tick when it changed, and awards badges from the activity stream.

Run a replica with ``python -m scorer``; see docs/operations.md.
"""

from .badges import BadgeWorker, awards
from .consumer import Consumer
from .publisher import Due, Publisher, due_boards
from .service import Scorer
from .settings import ScorerSettings
from .stats import Stats, stats_line

__all__ = [
    "BadgeWorker",
    "Consumer",
    "Due",
    "Publisher",
    "Scorer",
    "ScorerSettings",
    "Stats",
    "awards",
    "due_boards",
    "stats_line",
]
