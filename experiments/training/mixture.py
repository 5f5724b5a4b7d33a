"""A weighted mixture of backgrounds: ``train --mixture FILE`` plays one of them per training episode.

``--mix-background`` with ``--mix-share`` replaces ``--background`` by one other roster in a share of
the episodes; a mixture file names several, each with a weight (e.g. the PSRO loop's meta-game
mixture over frozen best responses, beside the scenario's own population)::

    # mixture.toml
    [backgrounds.own]               # no roster: each scenario's own population
    weight = 0.5
    [backgrounds.r1-robotics]
    roster = "r1-robotics.toml"     # a roster file (relative to this file); learned: entries allowed
    weight = 0.3
    [backgrounds.r1-search]
    roster = "r1-search.toml"
    weight = 0.2

Each training episode draws entry ``i`` with probability ``weight_i / sum(weights)``: one uniform
number from the env's seed generator (the one every episode seed comes from, so the draws flow from
the run's seed) against the cumulative weights, :func:`draw` (the single ``--mix-background`` is the
same rule with one threshold, ``--mix-share``, so its trajectories are those it always had).
Held-out evaluations keep playing ``--background``. Refused in one line: a weight that is not a
finite number >= 0, weights summing to 0, no entry, an unknown key, a roster that does not fit a
scenario the run plays.

Light (the CLI imports it through ``config_file``): pydantic and the population, no Ray or torch.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from commons_arena.errors import format_validation_error
from commons_arena.files import toml_text
from commons_arena.inputs import load_toml_file, read_bytes
from commons_arena.scenario import ScenarioConfig
from policies.population import Population, draw, thresholds


class MixtureError(ValueError):
    """A mixture file that cannot be used; the message names the entry to fix."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight: float
    roster: str | None = None


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backgrounds: dict[str, _Entry]


@dataclass(frozen=True)
class Mixture:
    """The entries of a mixture file: names, rosters (None: each scenario's own population), weights."""

    names: tuple[str, ...]
    rosters: tuple[Path | None, ...]
    weights: tuple[float, ...]

    @property
    def probabilities(self) -> np.ndarray:
        w = np.asarray(self.weights, dtype=float)
        return w / w.sum()

    @property
    def thresholds(self) -> list[float]:
        return thresholds(self.weights)

    def populations(self, config: ScenarioConfig) -> list[Population]:
        """Every entry's background on ``config`` (checked against it)."""
        out = []
        for name, roster in zip(self.names, self.rosters, strict=True):
            try:
                out.append(Population.default(config) if roster is None else Population.from_toml(roster, config))
            except ValueError as err:
                raise MixtureError(f"mixture entry {name!r}: {err}") from None
        return out

    def describe(self) -> str:
        return ", ".join(f"{n} {p:.0%}" for n, p in zip(self.names, self.probabilities, strict=True))


def mixture_from_dict(data: dict, base: Path | None = None, source: str = "<dict>") -> Mixture:
    """A mixture from a file's contents (roster paths relative to ``base``), checked."""
    try:
        model = _File.model_validate(data)
    except ValidationError as err:
        raise MixtureError(f"invalid mixture {source}: {format_validation_error(err)}") from None
    if not model.backgrounds:
        raise MixtureError(f"invalid mixture {source}: backgrounds: name at least one entry")
    for name, entry in model.backgrounds.items():
        if not (math.isfinite(entry.weight) and entry.weight >= 0):
            raise MixtureError(f"invalid mixture {source}: backgrounds.{name}.weight must be a finite number >= 0, "
                               f"got {entry.weight}")
    total = sum(e.weight for e in model.backgrounds.values())
    if not (math.isfinite(total) and total > 0):
        raise MixtureError(f"invalid mixture {source}: the weights must sum to more than 0, got {total}")
    rosters = tuple(None if e.roster is None else beside(e.roster, base) for e in model.backgrounds.values())
    return Mixture(tuple(model.backgrounds), rosters, tuple(float(e.weight) for e in model.backgrounds.values()))


def beside(roster: str, base: Path | None) -> Path:
    """A roster path as written, relative to ``base`` (the mixture file's folder) unless absolute."""
    path = Path(roster)
    return path if path.is_absolute() or base is None else base / path


def load_mixture(path: str | Path, configs: Sequence[ScenarioConfig] = ()) -> Mixture:
    """Read a mixture file; with ``configs``, every roster is checked against every one of them."""
    path = Path(path)
    mixture = mixture_from_dict(load_toml_file(path, "mixture", MixtureError), path.parent, str(path))
    for config in configs:
        mixture.populations(config)
    return mixture


def mixture_hash(path: Path) -> str:
    """The sha256 of the mixture file and of every roster it names, in order (a changed roster changes it)."""
    digest = hashlib.sha256(read_bytes(path, "mixture file"))
    for roster in load_mixture(path).rosters:
        if roster is not None:
            digest.update(read_bytes(roster, "roster"))
    return digest.hexdigest()


def mixture_text(entries: Sequence[tuple[str, str | None, float]]) -> str:
    """A mixture file's text from (name, roster path or None, weight) entries."""
    backgrounds = {name: {"weight": float(weight), **({"roster": str(roster)} if roster is not None else {})}
                   for name, roster, weight in entries}
    return toml_text({"backgrounds": backgrounds},
                     header=["a weighted mixture of backgrounds: one drawn per training episode (experiments/training/mixture.py)"])


__all__ = ["Mixture", "MixtureError", "draw", "thresholds", "load_mixture", "mixture_from_dict", "mixture_hash", "mixture_text"]
