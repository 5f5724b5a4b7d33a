"""Golden playthroughs: re-play a recording and say whether the game still plays it the same.

A recording (:mod:`commons_arena.recording`) holds each episode's seed and every action
played. :func:`verify_recording` resets a fresh env with that seed, plays the recorded
actions through the same :class:`~commons_arena.recording.RecordEpisode` wrapper, and
compares the lines it writes with the recorded ones: header (the state at reset), every
tick (outcome, rewards, reward terms, public and hidden state after the tick, and the
observations when they were recorded) and the summary. The first difference is reported
with its episode, tick and key path.

A recording is refused (:class:`RecordingRefused`) when it cannot be a fair test: the
scenario's content hash or the env version differ from the recording's (the rules or the
numbers changed on purpose: regenerate the recording), or an episode has no seed.

    commons-arena verify tests/golden/standard.jsonl
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.arena import ArenaEnv
from commons_arena.recording import FORMAT, FORMAT_VERSION, RecordEpisode, read_recording
from commons_arena.scenario import ScenarioConfig, ScenarioError, load_scenario
from commons_arena.spaces import action_layout
from commons_arena.version import ENV_NAME

# Keys of a header that say who wrote the file, not what was played.
NOT_COMPARED = frozenset({"package_version"})


class RecordingRefused(ValueError):
    """The recording cannot be re-played as a test (another scenario content, env version, no seed)."""


@dataclass(frozen=True)
class Difference:
    episode: int
    tick: int | None  # None: the episode's header (reset) or summary
    where: str  # key path, e.g. "outcome.granted[1]"
    recorded: Any
    replayed: Any

    def __str__(self) -> str:
        at = f"episode {self.episode}, " + (f"tick {self.tick}" if self.tick is not None else "header/summary")
        return f"{at}: {self.where} was {self.recorded!r} when recorded, {self.replayed!r} now"


@dataclass(frozen=True)
class Verification:
    path: Path
    episodes: int
    ticks: int
    difference: Difference | None  # the first one; None when everything matched

    @property
    def ok(self) -> bool:
        return self.difference is None


def recorded_actions(config: ScenarioConfig, named: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """A tick line's ``actions`` (named parts per agent) back as flat action vectors."""
    if not isinstance(named, Mapping):
        raise RecordingRefused(f"recorded actions must be an object of agents, got {type(named).__name__}")
    unknown = [a for a in named if a not in config.agents]
    missing_agents = [a for a in config.agents if a not in named]
    if unknown or missing_agents:  # a tick line names every agent's action (an agent the env no longer has acts too)
        raise RecordingRefused(f"recorded actions name agents {sorted(map(str, named))[:10]}; the scenario's agents "
                               f"are {list(config.agents)}")
    actions = {}
    for agent, parts in named.items():
        layout = action_layout(config, agent)
        if not isinstance(parts, Mapping):
            raise RecordingRefused(f"recorded action of {agent!r} must be an object of parts")
        missing = [f.name for f in layout.fields if f.name not in parts]
        extra = [k for k in parts if k not in {f.name for f in layout.fields}]
        if missing or extra:
            raise RecordingRefused(f"recorded action of {agent!r} has parts {sorted(map(str, parts))[:10]}; an "
                                   f"action has {[f.name for f in layout.fields]}")
        flat = []
        for f in layout.fields:
            values = _integers(parts[f.name])
            if values is None or len(values) != f.size:
                raise RecordingRefused(f"recorded action of {agent!r}: {f.name} must be {f.size} integer(s) (not "
                                       f"true/false, 1.5 or \"1\"), got {parts[f.name]!r:.60}")
            flat += values
        try:
            actions[agent] = np.asarray(flat, dtype=np.int64)
        except OverflowError as err:  # a number no action holds: cannot be checked
            raise RecordingRefused(f"recorded action of {agent!r} is not integers of the action's shape: {err}") from None
    return actions


def _integers(value: Any) -> list[int] | None:
    """An action part as written (an integer, or nested lists of them), flattened; None if any entry is not an int."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        out: list[int] = []
        for item in value:
            inner = _integers(item)
            if inner is None:
                return None
            out += inner
        return out
    return None


def first_difference(recorded: Any, replayed: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The first key path (depth first, in recorded order) where two JSON values differ."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in [*recorded, *(k for k in replayed if k not in recorded)]:
            path = f"{where}.{key}" if where else str(key)
            if key not in recorded or key not in replayed:
                return path, recorded.get(key, "<absent>"), replayed.get(key, "<absent>")
            found = first_difference(recorded[key], replayed[key], path)
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(recorded) != len(replayed):
            return f"{where} (length)", len(recorded), len(replayed)
        return None
    # JSON keeps every float bit (shortest repr round-trips), so equality is exact
    same = recorded == replayed and type(recorded) is type(replayed)
    return None if same else (where, recorded, replayed)


def _check_header(header: Mapping[str, Any], config: ScenarioConfig, where: str) -> None:
    if header.get("format") != FORMAT:
        raise RecordingRefused(f"{where}: not a commons_arena recording (format {header.get('format')!r:.60})")
    if type(header.get("format_version")) is not int or header.get("format_version") != FORMAT_VERSION:  # 1.0, true
        raise RecordingRefused(f"{where}: recording format_version {header.get('format_version')!r:.60}; this "
                               f"version reads format_version {FORMAT_VERSION}")
    seed = header.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64):
        raise RecordingRefused(f"{where}: the seed must be an integer in [0, 2**64), got {seed!r:.60}")
    if header.get("env") != ENV_NAME:
        raise RecordingRefused(
            f"{where}: recorded with env {header.get('env')!r}, this is {ENV_NAME!r}; the rules changed on purpose "
            "since, so regenerate the recording (docs/rules.md, 'Golden playthroughs')"
        )
    if header.get("scenario_hash") != config.content_hash:
        raise RecordingRefused(
            f"{where}: scenario {header.get('scenario')!r} has content hash {config.content_hash} now, the recording "
            f"was made with {header.get('scenario_hash')}; the scenario changed, so regenerate the recording"
        )
    if header.get("seed") is None:
        raise RecordingRefused(f"{where}: the episode was recorded without a seed, so it cannot be re-played")


def verify_recording(path: str | os.PathLike[str], scenario: str | Path | None = None) -> Verification:
    """Re-play every episode of the recording at ``path``; report the first difference.

    ``scenario``: a scenario name or TOML path to play (default: the recorded scenario's
    name among the shipped ones). Raises :class:`RecordingRefused` (see the module docstring)."""
    path = Path(path)
    episodes = read_recording(path)
    first = episodes[0]["header"]
    try:
        config = load_scenario(scenario if scenario is not None else str(first.get("scenario", "")))
    except ScenarioError as err:
        raise RecordingRefused(f"{path}: {err} (pass the scenario file the recording was made with)") from None
    for n, episode in enumerate(episodes):
        _check_header(episode["header"], config, f"{path} episode {n}")
        if episode["summary"] is None:  # the writer always ends an episode with one (complete: false if cut short)
            raise RecordingRefused(f"{path} episode {n}: ends before its summary line: the file was cut, so it "
                                   "cannot be checked; verify the whole recording")
    observations = "observations" in first
    with tempfile.TemporaryDirectory(prefix="commons_arena_verify_") as tmp:
        replay_path = Path(tmp) / "replay.jsonl"
        env = RecordEpisode(ArenaEnv(config), replay_path, include_observations=observations)
        for episode in episodes:
            env.reset(seed=episode["header"]["seed"])
            for line in episode["ticks"]:
                if not env.agents:
                    break  # the replay ended earlier than the recording: the comparison says where
                env.step(recorded_actions(config, line.get("actions", {})))
        env.close()
        replayed = read_recording(replay_path)
    ticks = sum(len(e["ticks"]) for e in episodes)
    difference = _compare(episodes, replayed)
    return Verification(path=path, episodes=len(episodes), ticks=ticks, difference=difference)


def _compare(recorded: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> Difference | None:
    for n, (mine, theirs) in enumerate(zip(recorded, replayed, strict=True)):
        header = {k: v for k, v in mine["header"].items() if k not in NOT_COMPARED}
        found = first_difference(header, {k: v for k, v in theirs["header"].items() if k not in NOT_COMPARED})
        if found:
            return Difference(n, None, f"header.{found[0]}", found[1], found[2])
        for i, line in enumerate(mine["ticks"]):
            if i >= len(theirs["ticks"]):
                return Difference(n, line.get("tick"), "tick", "played", "the episode had already ended")
            found = first_difference(line, theirs["ticks"][i])
            if found:
                return Difference(n, line.get("tick"), found[0], found[1], found[2])
        if len(theirs["ticks"]) > len(mine["ticks"]):
            return Difference(n, len(mine["ticks"]), "tick", "not played", "played")
        found = first_difference(mine["summary"], theirs["summary"], "summary")
        if found:
            return Difference(n, None, found[0], found[1], found[2])
    return None
