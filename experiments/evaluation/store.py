"""The tournament's results store: one SQLite row per finished episode, never lost, never doubled.

SQLite from the standard library: one file, no server, safe against a killed writer. The
database runs in WAL mode and every episode is its own committed transaction, written
the moment the episode's result reaches the driver, so a kill loses at most the episodes
still being played. ``synchronous=NORMAL`` is durable against a killed process (what the
rerun has to survive); only a power cut could drop the last commits, which a rerun plays
again.

The unique key is the episode's identity: ``(seat, scenario, scenario_hash, background,
background_hash, player, player_hash, seed)``. Inserting a row that is already there is
ignored (``INSERT OR IGNORE``), so a rerun or a duplicate delivery can never double it, and
a rerun asks :meth:`ResultStore.existing` which keys are done and plays only the rest.

A changed scenario file, checkpoint or background definition has a new hash: its old rows
stay (results are appended, never rewritten), and :meth:`ResultStore.changed` lists the
names stored only under other hashes than the roster's, which the tournament refuses to
mix unless ``--allow-changed``; once the new version has rows, it is accepted.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from commons_arena.errors import format_validation_error
from commons_arena.files import check_target, make_folder
from commons_arena.inputs import InputError, loads_json
from commons_arena.scenario import MAX_RETURN

T = TypeVar("T")

KEY = ("seat", "scenario", "scenario_hash", "background", "background_hash", "player", "player_hash", "seed")

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS episodes (
    id              INTEGER PRIMARY KEY,
    seat            TEXT    NOT NULL,
    scenario        TEXT    NOT NULL,
    scenario_hash   TEXT    NOT NULL,
    background      TEXT    NOT NULL,
    background_hash TEXT    NOT NULL,
    player          TEXT    NOT NULL,   -- an entrant or an anchor
    player_hash     TEXT    NOT NULL,
    policy          TEXT    NOT NULL,   -- the player's policy name (and parameters) as JSON
    seed            INTEGER NOT NULL,
    focal_return    REAL    NOT NULL,   -- mean return over the focal seat's agents
    episode         TEXT    NOT NULL,   -- JSON: every agent's infos["episode"] (reward terms, statistics)
    wall_seconds    REAL    NOT NULL,
    finished_at     TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    UNIQUE ({", ".join(KEY)})
);
"""


@dataclass(frozen=True)
class EpisodeKey:
    seat: str
    scenario: str
    scenario_hash: str
    background: str
    background_hash: str
    player: str
    player_hash: str
    seed: int

    def as_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, k) for k in KEY)


class ChangedError(ValueError):
    """The store holds results for a name whose content (hash) has changed since."""


class ResultStore:
    """An open results database (``with ResultStore(path) as store: ...``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        make_folder(self.path.parent)
        check_target(self.path, "the results store")  # SQLite owns the file: never through a link, never an input
        self.conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)  # explicit transactions
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.executescript(SCHEMA)
        except sqlite3.DatabaseError as err:  # SQLite's own words name no file ("file is not a database")
            self.conn.close()
            raise ValueError(f"results store {self.path}: {err}; choose another database (--db) or --out") from None

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    # ------------------------------------------------------------------ writing
    def append(self, key: EpisodeKey, policy: str, focal_return: float, episode: Mapping[str, Any] | str,
               wall_seconds: float) -> bool:
        """Store one finished episode in its own transaction; False if that episode was already stored.

        ``episode`` is every agent's ``infos["episode"]``, or that already as JSON. A return that is not a finite
        number within :data:`MAX_RETURN` is refused (SQLite would store NaN as NULL and the row would be dropped)."""
        if not (math.isfinite(float(focal_return)) and abs(float(focal_return)) <= MAX_RETURN):
            raise ValueError(f"episode {key.as_tuple()!r:.200}: its return {focal_return!r} is not a finite number "
                             f"within {MAX_RETURN:g}; nothing stored")
        if not isinstance(episode, str):
            episode = json.dumps(episode, sort_keys=True)
        cursor = self.conn.execute(
            f"INSERT OR IGNORE INTO episodes ({', '.join(KEY)}, policy, focal_return, episode, wall_seconds) "
            f"VALUES ({', '.join('?' * (len(KEY) + 4))})",
            (*key.as_tuple(), policy, float(focal_return), episode, float(wall_seconds)),
        )
        return cursor.rowcount == 1

    # ------------------------------------------------------------------ reading
    def existing(self, seat: str) -> set[tuple[Any, ...]]:
        """Keys (as tuples in ``KEY`` order) already stored for ``seat``."""
        rows = self.conn.execute(f"SELECT {', '.join(KEY)} FROM episodes WHERE seat = ?", (seat,))
        return {tuple(r) for r in rows}

    def changed(self, seat: str, column: str, current: Mapping[str, str]) -> dict[str, list[str]]:
        """Names (scenario / background / player) stored only under other hashes than ``current``'s:
        content that changed since its episodes were played (and was not accepted since)."""
        if column not in ("scenario", "background", "player"):
            raise ValueError(f"unknown column {column!r}")
        rows = self.conn.execute(
            f"SELECT DISTINCT {column}, {column}_hash FROM episodes WHERE seat = ? ORDER BY 1, 2", (seat,))
        stored: dict[str, list[str]] = {}
        for name, digest in rows:
            if name in current:
                stored.setdefault(name, []).append(digest)
        return {name: hashes for name, hashes in stored.items() if current[name] not in hashes}

    def rows(self, keys: Iterable[EpisodeKey] | None = None) -> list[dict[str, Any]]:
        """Stored episodes as dicts (``episode`` parsed), all or only those of ``keys``, in key order."""
        self.conn.row_factory = sqlite3.Row
        try:
            wanted = None if keys is None else {k.as_tuple() for k in keys}
            seats = sorted({k[0] for k in wanted}) if wanted is not None else None
            where = "" if seats is None else f"WHERE seat IN ({', '.join('?' * len(seats))}) "
            cursor = self.conn.execute(f"SELECT * FROM episodes {where}ORDER BY {', '.join(KEY)}", seats or ())
            out = []
            for row in cursor:
                item = dict(row)
                if wanted is not None and tuple(item[k] for k in KEY) not in wanted:
                    continue
                out.append(_checked_row(item, self.path))
            return out
        finally:
            self.conn.row_factory = None

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0])


_Text = Annotated[str, Strict(), Field(min_length=1, max_length=4_096)]
# A stored figure as a table or a verdict reads it back (a return, a gain, welfare, a CI, an episode's statistic):
# finite and no larger than a scenario can pay (a forged NaN or inf would drop a row from a table, or flip a
# verdict, silently); an int stays an int (a count). The one definition: every record model uses it.
StoredNumber = (Annotated[int, Strict(), Field(ge=-(2**63), le=2**63 - 1)]  # as SQLite holds one
                | Annotated[float, Field(ge=-MAX_RETURN, le=MAX_RETURN, allow_inf_nan=False)])
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # a mixture's weight


class StoredRow(BaseModel):
    """One ``episodes`` row as the tables use it: SQLite's column types are advisory, so a row another program wrote
    (or a damaged file) is checked here, by the one reader, before any figure is computed from it."""

    model_config = ConfigDict(extra="forbid")
    id: Annotated[int, Strict(), Field(ge=0)]
    seat: _Text
    scenario: _Text
    scenario_hash: _Text
    background: _Text
    background_hash: _Text
    player: _Text
    player_hash: _Text
    policy: Annotated[str, Strict(), Field(max_length=1_000_000)]
    seed: Annotated[int, Strict(), Field(ge=0, le=2**63 - 1)]
    focal_return: StoredNumber
    episode: dict[str, dict[str, StoredNumber]]
    wall_seconds: Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)] | Annotated[int, Strict(), Field(ge=0)]
    finished_at: Annotated[str, Strict(), Field(max_length=64)]


MAX_EPISODE_JSON = 4 * 2**20  # one row's ``episode`` column (every agent's totals: a few kB)


def _checked_row(item: dict[str, Any], path: Path) -> dict[str, Any]:
    where = f"results store {path}: row {item.get('id')!r:.20}"
    text = item.get("episode")
    if not isinstance(text, str) or len(text) > MAX_EPISODE_JSON:
        raise ValueError(f"{where}: episode must be JSON text of at most {MAX_EPISODE_JSON} characters")
    try:
        item["episode"] = loads_json(text, f"{where}: episode", allow_nan=True)  # depth-limited (Python wrote NaN)
        StoredRow.model_validate(item)
    except InputError as err:
        raise ValueError(str(err)) from None
    except ValidationError as err:
        raise ValueError(f"{where}: not a row this program stores: {format_validation_error(err)}") from None
    return item


def by_seed(rows: Iterable[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], T]
            ) -> dict[tuple[str, str, str], dict[int, T]]:
    """Stored rows (:meth:`ResultStore.rows`) as per-seed series: (scenario, background, player)
    -> seed -> ``value(row)`` (e.g. the focal return, or one seat's return read from the episode)."""
    out: dict[tuple[str, str, str], dict[int, T]] = {}
    for row in rows:
        out.setdefault((row["scenario"], row["background"], row["player"]), {})[int(row["seed"])] = value(row)
    return out


__all__ = ["KEY", "ChangedError", "EpisodeKey", "ResultStore", "StoredRow", "by_seed"]
