"""OpenEnv's entry point for commons_arena: ``uv run server`` (or ``python -m server.app``).

``app`` is the server's ASGI app (``openenv.yaml``: ``app: server.app:app``) with the defaults of
``commons-arena serve``; :func:`main` is that command, so every flag it takes works here too
(``server --port 8000 --host 0.0.0.0 --scenario crisis``). Nothing here differs from the
repository's own server (serving/app.py).
"""

from __future__ import annotations

import sys

from serving.app import create_app

app = create_app()


def main() -> None:
    """``commons-arena serve`` with this process's arguments."""
    from commands.cli import main as cli

    cli(["serve", *sys.argv[1:]])


if __name__ == "__main__":
    main()
