"""Recording (JSONL) → one self-contained HTML replay page.

    commons-arena replay RUN.jsonl [-o replay.html] [--episode N] [--force]   # default: RUN.html

The page needs no server and no network: styles, script and the episodes (as JSON) are
inline, and every panel is drawn by the page itself on ``<canvas>`` elements or as DOM
built from text. The page's markup, style and script are package files
(``experiments/viewing/assets/replay.{html,js}`` and the style sheet it shares with the server's
play page, ``serving/assets/replay.css``) filled in by :func:`render_page`.
Recordings travel between people, so nothing in one is ever treated as markup: every value
is written with ``textContent``/text nodes, and the page's Content-Security-Policy lets only
its own script run.
A tick slider (also arrow keys, and a play button) moves through the episode; panels:

* GPUs per team and tier: declared (for this tick) vs true need (hidden) vs granted;
* jobs of every team (hidden): one chip per job, coloured by status, filled by progress;
* broker: GPUs sold per tier (bars) and the offer's unit price (lines);
* budget left and carbon used against the cap;
* cumulative reward per agent;
* the tick's log: shocks, repairs, actions, stances, credibility, reward terms.

Shocks are shaded on the time panels. Hidden truth is marked with a "hidden" badge.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import os
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from commons_arena.files import make_folder, write_file
from commons_arena.recording import jsonable, read_recording
from serving.page_assets import SHARED_STYLE, shared_asset_text


def write_replay(jsonl_path: str | os.PathLike[str], html_path: str | os.PathLike[str],
                 episode: int | None = None) -> Path:
    """Write the replay page of the recording ``jsonl_path`` to ``html_path``.

    ``episode`` picks one episode (index in the file); ``None`` keeps them all, with an
    episode selector in the page. Returns the path written."""
    episodes = read_recording(jsonl_path)
    if episode is not None:
        if not -len(episodes) <= episode < len(episodes):
            raise ValueError(f"{jsonl_path}: episode {episode} out of range; the file has {len(episodes)}")
        episodes = [episodes[episode]]
    title = f"commons_arena replay: {episodes[0]['header'].get('scenario', '?')} ({Path(jsonl_path).name})"
    page = render_page(episodes, title=title, source=Path(jsonl_path).name)
    out = Path(html_path)
    make_folder(out.parent)
    write_file(out, page)
    return out


def render_page(episodes: Sequence[dict[str, Any]], title: str, source: str = "") -> str:
    """The page: the asset files with the title, the page's own style and script, and the data.

    The recording enters in two places only, both inert: the title, HTML-escaped, and the
    data, as JSON in a ``<script type="application/json">`` with everything that could end
    the element escaped. The script then writes every value as text (see ``assets/replay.js``)
    and a Content-Security-Policy lets only that script (by its hash) run at all."""
    data = {"source": source, "episodes": [jsonable(e) for e in episodes]}
    # JSON inside <script>: escape what could end the element or confuse the HTML parser.
    blob = (
        json.dumps(data, separators=(",", ":"), allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
    script = _asset("replay.js")
    values = {
        "TITLE": html.escape(title),
        "STYLE": _asset("replay.css"),
        "SCRIPT": script,
        "SCRIPT_HASH": "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii"),
        "DATA": blob,
    }
    # one pass: a placeholder-like string inside a value is never substituted again
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _asset("replay.html"))


_PLACEHOLDER = re.compile(r"%%([A-Z_]+)%%")


@functools.cache
def _asset(name: str) -> str:
    """A file of ``experiments/viewing/assets`` (package data: shipped in the wheel), or the style
    sheet the server's play page shares (``serving/page_assets.py``)."""
    text = (shared_asset_text(name) if name == SHARED_STYLE
            else resources.files("experiments.viewing").joinpath("assets", name).read_text(encoding="utf-8"))
    if name.endswith((".js", ".css")) and re.search(r"</(script|style)", text, re.I):
        raise ValueError(f"asset {name} contains a closing tag and cannot be inlined")
    return text
