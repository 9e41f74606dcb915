"""``python -m api``: one HTTP API process on uvicorn (uvloop, httptools). Stateless, like a
gateway: run as many as the load asks for. SIGTERM/SIGINT: uvicorn finishes the requests under
way, then the process ends by that signal (uvicorn re-raises it)."""

from __future__ import annotations

import logging
import sys

import orjson
import uvicorn

from leaderboard.settings import argument_parser, load_or_exit

from .routes import openapi
from .server import application
from .settings import ApiSettings


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser("python -m api", __doc__ or "", ApiSettings)
    parser.add_argument("--openapi", action="store_true", help="print the OpenAPI document and exit")
    if parser.parse_args(argv).openapi:
        print(orjson.dumps(openapi(), option=orjson.OPT_INDENT_2).decode())
        return 0
    settings = load_or_exit(ApiSettings)
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    uvicorn.run(
        application(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level=settings.log_level.lower(),
        access_log=False,
        server_header=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
