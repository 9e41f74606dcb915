"""The benchmarks behind docs/benchmarks.md, apart from the load-test tool users run
(``python -m loadtest``): each starts its own private processes, measures against a baseline in
the same run, prints the figures and records them in ``bench/results/<name>.json`` (bench/results.py:
with the command, the commit and the machine; ``--no-write`` records nothing).

- ``python -m bench.scorer``: sustained submissions/s end to end vs one call per submission.
- ``python -m bench.drain``: Redis time per submission of the scorer's path.
- ``python -m bench.windows``: past-period reads, close events and tournament submissions on
  1M-member boards, each against its everyday counterpart.
- ``python -m bench.ranks``: rank modes, percentiles and deep-rank error on 1M-member boards.
- ``python -m bench.gateway``: CPU per delivery, RSS per connection and fan-out spread at 10k sockets,
  against ``bench.naive_gateway`` (websockets.broadcast of every message); ``--boards 3``: one
  write per socket per tick against one write per message.
- ``python -m bench.conn_memory``: where an idle subscribed connection's bytes go (tracemalloc by
  allocation site, live objects by type).
- ``python -m bench.plots``: the headline charts, drawn from bench/results/ into docs/figures/.
"""
