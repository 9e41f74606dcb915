"""The one-command local fleet (``python -m fleet``) and the processes it and the tests run:
supervisor.py (the fleet, started and stopped in order), restarts.py, addresses.py, claims.py,
children.py, redis_server.py, cluster.py, postgres_server.py, haproxy.py, rollout.py,
rebalance.py, demo.py."""
