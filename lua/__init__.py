"""The function library (leaderboard.lua), installed as the package ``leaderboard.lua``
(pyproject.toml maps it to this directory) so ``importlib.resources`` finds it in a wheel and in
an editable install alike: ``leaderboard.library.library_code()`` reads it."""
