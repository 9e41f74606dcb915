"""The HTTP API: the leaderboard over plain HTTP for game servers and web pages (docs/http-api.md)."""
