"""``python -m loadtest chaos``: the reliability run (docs/reliability.md).

One module per fault family: scorer_kills, redis_faults, gateway_kill, readers, properties;
model.py is the independent expectation, verdicts.py the promises, markdown.py the report,
rig.py the shared I/O shell, run.py the command."""

from .run import add_arguments, main

__all__ = ["add_arguments", "main"]
