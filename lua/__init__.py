"""The function library: one file per concept, assembled in the order parts.txt names into one
``FUNCTION LOAD`` (leaderboard/assembly.py). Installed as the package ``leaderboard.lua``
(pyproject.toml maps it to this directory) so ``importlib.resources`` finds the files in a wheel
and in an editable install alike: ``leaderboard.library.library_code()`` reads them."""
