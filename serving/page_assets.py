"""Page files shared by the server's play page and the replay page (``commons-arena replay``).

They live in ``serving/assets/`` (package data, shipped in the wheel): the lowest layer both
pages may use, so the replay page (:mod:`experiments.viewing.replay`) imports this module
instead of the server reading a file of ``experiments/`` by path. Light: no FastAPI.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHARED_STYLE = "replay.css"  # the replay page's style sheet, which the play page reuses


def shared_asset_path(name: str) -> Path:
    """The file ``name`` of ``serving/assets``."""
    return Path(str(resources.files("serving").joinpath("assets", name)))


def shared_asset_text(name: str) -> str:
    return shared_asset_path(name).read_text(encoding="utf-8")


__all__ = ["SHARED_STYLE", "shared_asset_path", "shared_asset_text"]
