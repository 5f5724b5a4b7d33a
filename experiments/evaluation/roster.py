"""Tournament rosters: who plays which seat, against whom, where, on which seeds.

A roster is a TOML file (or the same data as a dict)::

    name = "allocators vs team styles"
    seat = "allocator"            # allocator | broker | teams (every team) | team:<name> (or just <name>)
    scenarios = ["standard", "elevated", "my_scenarios/odd.toml"]
    seeds = { first = 5000, count = 20 }          # or a list: seeds = [1, 2, 3]

    [entrants]                    # display name = policy, or a table with policy + parameters
    edf = "edf"
    patient = { policy = "best_fit", pacing = 0.5 }
    ppo = "learned:runs/allocator_ppo-standard-s0/best"

    [backgrounds.default]         # empty: each scenario's own [population]
    [backgrounds.bluffers]        # a Population table (policies/population.py): roles / agents
    roles = { team = "greedy_bluffer" }
    [backgrounds.learned_teams]
    roles = { team = "learned:runs/teams/best" }
    agents = { broker = "fixed_price" }

    [anchors]                     # optional: the focal-seat policies that score 0 and 1
    low = "random"
    high = "oracle"

Every entrant plays the focal seat in every (scenario, background, seed) cell; the
background fills the other seats (and the focal seat's own defaults never leak in). The
normalised score puts each focal return between the ``low`` and ``high`` anchors, played
on the same cells. Defaults: the allocator seat is anchored by the ``random`` allocator
and the ``oracle`` (as in ``commons-arena evaluate``); other seats by uniformly random
actions in the focal seat (``random``) and, with no ``high`` anchor, by the best
entrant's mean return on that scenario x background.

Structure errors (unknown keys, wrong types) come from pydantic; meaning errors (unknown
policy, a policy of the wrong role, a team a scenario lacks, a checkpoint that does not
fit) are checked against every scenario before anything is played. Both say the file
and the key: ``roster r.toml: entrants.ppo: ...``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.errors import format_validation_error
from commons_arena.inputs import load_toml_file
from commons_arena.scenario import ScenarioConfig, ScenarioError, load_scenario, resolve_reference
from experiments.seeds import MAX_SEED
from policies.population import Entry, Population, PopulationError, check_entry
from policies.shipping import local_path

RANDOM_ANCHOR = "random"  # in a team or broker seat: uniformly random actions (no registered policy)
UNIFORM_RANDOM = "<uniform random actions>"
SEAT_TEAMS = "teams"


class RosterError(ValueError):
    """A roster file is malformed or names something that cannot play; the message names file and key."""


# --------------------------------------------------------------------------- structure (pydantic)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _some_background(backgrounds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if not backgrounds:
        raise ValueError("give at least one background (an empty [backgrounds.default] is the scenario's own)")
    return backgrounds


def default_backgrounds() -> dict[str, dict[str, Any]]:
    """No ``[backgrounds]``: one, ``default``, each scenario's own ``[population]``."""
    return {"default": {}}


# The [backgrounds.<name>] tables of a roster or a suite: each a population table (policies/population.py:
# roles / agents), named by its key; at least one. The one definition both formats use (backgrounds_of).
BackgroundTables = Annotated[dict[str, dict[str, Any]], AfterValidator(_some_background),
                             Field(default_factory=default_backgrounds)]


def backgrounds_of(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, Population]:
    """The populations of :data:`BackgroundTables` (a PopulationError names ``backgrounds.<name>`` and the key)."""
    try:
        return {name: Population.from_dict({**table, "name": name}, source=f"backgrounds.{name}")
                for name, table in tables.items()}
    except PopulationError as err:
        raise PopulationError(str(err).removeprefix("population ")) from None


class Anchors(_Strict):
    low: str | dict[str, Any] | None = None
    high: str | dict[str, Any] | None = None


class RosterModel(_Strict):
    name: str = ""
    seat: str = ALLOCATOR
    scenarios: list[str] = Field(min_length=1)
    seeds: list[int]
    entrants: dict[str, Any] = Field(min_length=1)
    backgrounds: BackgroundTables
    anchors: Anchors = Anchors()

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, value: Any) -> list[int]:
        """``[1, 2, 3]`` or ``{ first = 1000, count = 20 }``: distinct seeds >= 0."""
        def is_int(x: Any) -> bool:
            return isinstance(x, int) and not isinstance(x, bool)

        if isinstance(value, dict):
            if set(value) != {"first", "count"} or not all(is_int(v) for v in value.values()):
                raise ValueError(f"a seed range is {{ first = <seed>, count = <how many> }} with integers, got {value!r}")
            if value["count"] < 1 or value["count"] > 1_000_000:
                raise ValueError(f"count must be 1 .. 1000000, got {value['count']}")
            if not 0 <= value["first"] <= MAX_SEED - value["count"] + 1:
                raise ValueError(f"first must be in [0, 2**63 - count], got {value['first']}")
            value = list(range(value["first"], value["first"] + value["count"]))
        if not isinstance(value, list) or not all(is_int(s) for s in value):
            raise ValueError(f"expected a list of integer seeds, e.g. [1, 2, 3], or {{ first = 1000, count = 20 }}; got {value!r}")
        if not value:
            raise ValueError("give at least one seed")
        if any(s < 0 for s in value):
            raise ValueError("seeds must be >= 0")
        if any(s > MAX_SEED for s in value):  # checked before any episode: a results row stores it (SQLite)
            raise ValueError(f"seeds must be at most 2**63 - 1 = {MAX_SEED}")
        if len(set(value)) != len(value):
            raise ValueError("seeds repeat; each seed is one cell")
        return value

    @field_validator("entrants", mode="before")
    @classmethod
    def _entrants(cls, value: Any) -> dict[str, Any]:
        """A table ``name = policy`` (or ``name = { policy = ..., <param> = ... }``), or a list of policy names."""
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise ValueError("a list of entrants holds policy names; use a table [entrants] for parameters")
            if len(set(value)) != len(value):
                raise ValueError("a policy is listed twice")
            return {v: v for v in value}
        if not isinstance(value, dict):
            raise ValueError(f"expected a table name = policy, or a list of policy names; got {value!r}")
        return value


# --------------------------------------------------------------------------- meaning


@dataclass(frozen=True)
class Player:
    """One policy for the focal seat: an entrant or an anchor."""

    name: str
    entry: Entry
    anchor: str = ""  # "low" / "high" for the anchors, "" otherwise
    entrant: bool = True  # False for an anchor that is not also an entrant

    @property
    def uniform_random(self) -> bool:
        return self.entry.policy == UNIFORM_RANDOM


@dataclass(frozen=True)
class Roster:
    """A validated roster: every name resolved, every scenario loaded, every checkpoint hashed."""

    name: str
    seat: str
    scenarios: tuple[ScenarioConfig, ...]
    scenario_names: tuple[str, ...]  # as written in the roster (a name or a path)
    seeds: tuple[int, ...]
    players: tuple[Player, ...]  # entrants then anchors
    backgrounds: Mapping[str, Population]
    source: str = "<dict>"

    @property
    def entrants(self) -> tuple[Player, ...]:
        return tuple(p for p in self.players if p.entrant)

    def anchor(self, which: str) -> Player | None:
        return next((p for p in self.players if p.anchor == which), None)

    def focal_agents(self, config: ScenarioConfig) -> tuple[str, ...]:
        return focal_agents(self.seat, config)

    @cached_property
    def player_hashes(self) -> dict[str, str]:
        return {p.name: entry_hash(p.entry) for p in self.players}

    @cached_property
    def background_hashes(self) -> dict[str, str]:
        return {name: population_hash(pop) for name, pop in self.backgrounds.items()}

    @property
    def episodes(self) -> int:
        return len(self.players) * len(self.scenarios) * len(self.backgrounds) * len(self.seeds)


def seat_role(seat: str) -> str:
    return seat if seat in (ALLOCATOR, BROKER) else "team"


def focal_agents(seat: str, config: ScenarioConfig) -> tuple[str, ...]:
    """The agent ids of ``config`` that the focal seat covers."""
    if seat in (ALLOCATOR, BROKER):
        return (seat,)
    if seat == SEAT_TEAMS:
        return config.team_names
    team = seat.removeprefix("team:")
    if team not in config.team_names:
        raise RosterError(f"seat: scenario {config.name!r} has no team {team!r}; its teams are {list(config.team_names)}")
    return (team,)


def parse_seat(seat: str) -> str:
    """A focal seat as written (``allocator``, ``broker``, ``teams``, ``team:<name>`` or just ``<name>``) in its
    one spelling: a team's name becomes ``team:<name>``."""
    return seat if seat in (ALLOCATOR, BROKER, SEAT_TEAMS) or seat.startswith("team:") else f"team:{seat}"


def _entry(value: Any, where: str, role: str) -> Entry:
    if value == RANDOM_ANCHOR and role != ALLOCATOR:
        return Entry(UNIFORM_RANDOM)
    entry = Entry.parse(value, where)
    check_entry(entry, where, role)  # the focal seat's role
    return entry


def _players(model: RosterModel, role: str) -> list[Player]:
    players = [Player(name, _entry(value, f"entrants.{name}", role)) for name, value in model.entrants.items()]
    defaults = {"low": RANDOM_ANCHOR, "high": "oracle" if role == ALLOCATOR else None}
    anchors: dict[str, Entry] = {}
    for which in ("low", "high"):
        value = getattr(model.anchors, which) or defaults[which]
        if value is None:
            continue
        entry = _entry(value, f"anchors.{which}", role)
        if anchors.get("low") == entry:  # every score would be 0/0
            raise PopulationError(f"anchors: low and high are the same policy ({entry.policy}); a score puts a "
                                  "return between two different anchors")
        anchors[which] = entry
        name = value if isinstance(value, str) else f"{which}_anchor"
        same = next((p for p in players if p.entry == entry), None)
        if same is not None:  # an entrant doubles as the anchor: played once
            players[players.index(same)] = Player(same.name, same.entry, which)
        elif any(p.name == name for p in players):
            raise PopulationError(f"anchors.{which}: name {name!r} is taken by an entrant with another policy")
        else:
            players.append(Player(name, entry, which, entrant=False))
    return players


def roster_from_dict(data: Mapping[str, Any], source: str = "<dict>", base: Path | None = None,
                     parsed: Sequence[ScenarioConfig] = ()) -> Roster:
    """Validate ``data`` (the parsed TOML); relative scenario paths resolve against ``base``. ``parsed``: the
    roster's scenarios already parsed, in its order (a training run's own: not read again, and a scenario
    file is played as it was parsed, not looked up by its name)."""
    try:
        model = RosterModel.model_validate(dict(data))
    except ValidationError as err:
        raise RosterError(f"roster {source}: {format_validation_error(err)}") from None
    seat = parse_seat(model.seat)
    role = seat_role(seat)
    try:
        players = _players(model, role)
        backgrounds = backgrounds_of(model.backgrounds)
    except PopulationError as err:
        raise RosterError(f"roster {source}: {str(err).removeprefix('population ')}") from None
    if parsed and [c.name for c in parsed] != model.scenarios:
        raise RosterError(f"roster {source}: scenarios {model.scenarios} are not the parsed ones "
                          f"{[c.name for c in parsed]}")
    scenarios = list(parsed)
    for i, name in enumerate(model.scenarios if not parsed else ()):
        try:
            scenarios.append(load_scenario(resolve_reference(name, base)))
        except ScenarioError as err:
            raise RosterError(f"roster {source}: scenarios[{i}]: {err}") from None
    roster = Roster(model.name, seat, tuple(scenarios), tuple(model.scenarios), tuple(model.seeds), tuple(players),
                    backgrounds, source)
    check_roster(roster)
    return roster


def load_roster(path: str | Path) -> Roster:
    path = Path(path)
    return roster_from_dict(load_toml_file(path, "roster", RosterError), source=str(path), base=path.parent)


def check_roster(roster: Roster) -> None:
    """Every player and background must be able to play every scenario: checked before any episode."""
    names = [c.name for c in roster.scenarios]
    if len(set(names)) != len(names):
        raise RosterError(f"roster {roster.source}: scenarios: two entries load scenario(s) with the same name {names}")
    for config in roster.scenarios:
        try:
            agents = focal_agents(roster.seat, config)
        except RosterError as err:
            raise RosterError(f"roster {roster.source}: {err}") from None
        for name, background in roster.backgrounds.items():
            where = f"backgrounds.{name}"
            try:
                resolved = background.resolve(config)
            except PopulationError as err:
                raise RosterError(f"roster {roster.source}: {where}: {err}") from None
            for agent, entry in resolved.items():
                if agent not in agents:  # the focal seat is the players'
                    _check_checkpoint(roster, entry, config, agent, where)
        for player in roster.players:
            where = f"entrants.{player.name}" if player.entrant else f"anchors.{player.anchor}"
            for agent in agents:
                _check_checkpoint(roster, player.entry, config, agent, where)


def _check_checkpoint(roster: Roster, entry: Entry, config: ScenarioConfig, agent: str, where: str) -> None:
    """A learned checkpoint must fit the spaces of ``agent`` of ``config``, the seat it will play."""
    if not entry.policy.startswith("learned:"):
        return
    from policies.learned import check_fits, read_sidecar
    from policies.policy_set import is_policy_set, member_for

    checkpoint = local_path(entry.policy.removeprefix("learned:"))  # learned:universal: the shipped one
    try:
        # a multi-seat run's checkpoint is a policy set: the member that would play this seat must fit
        member = member_for(checkpoint, config, agent) if is_policy_set(checkpoint) else checkpoint
        check_fits(read_sidecar(member), config, agent, member)
    except ValueError as err:
        raise RosterError(f"roster {roster.source}: {where}: {err}") from None


# --------------------------------------------------------------------------- identities


def checkpoint_hash(checkpoint: str | Path) -> str:
    """sha256 (first 16 hex) over the sidecars ``learned:`` reads (relative path + bytes).

    A sidecar records its weights' sha256 and loading checks it, so the sidecars identify
    what plays; RLlib's own files beside them (pickles, optimizer state) are not read, and
    each sidecar is capped at MAX_SIDECAR_BYTES: hashing costs milliseconds whatever the
    folder holds."""
    from policies.checkpoint_format import MAX_SIDECAR_BYTES, SIDECAR
    from policies.policy_set import SET_DIR

    root = Path(checkpoint)
    sidecars = [root / SIDECAR] if (root / SIDECAR).is_file() else sorted((root / SET_DIR).glob(f"*/{SIDECAR}"))
    digest = hashlib.sha256()
    for path in sidecars:
        if path.stat().st_size > MAX_SIDECAR_BYTES:
            raise RosterError(f"{path} is larger than {MAX_SIDECAR_BYTES // 2**20} MiB: not a policy sidecar")
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _entries_hash(entries: Sequence[tuple[str, Entry]]) -> str:
    parts = []
    for key, entry in entries:
        item: dict[str, Any] = {"key": key, "policy": entry.policy, "params": dict(entry.params)}
        if entry.policy.startswith("learned:"):
            item["checkpoint"] = checkpoint_hash(local_path(entry.policy.removeprefix("learned:")))
            item["policy"] = "learned"  # the path may move; the content is what counts
        parts.append(item)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def entry_hash(entry: Entry) -> str:
    """What a player *is*: its policy, parameters and (for a checkpoint) the checkpoint's content."""
    return _entries_hash([("", entry)])


def population_hash(population: Population) -> str:
    entries = [(f"roles.{k}", v) for k, v in population.roles.items()] + [
        (f"agents.{k}", v) for k, v in population.agents.items()]
    return _entries_hash(entries)  # type: ignore[arg-type]


__all__ = ["Player", "Roster", "RosterError", "focal_agents", "load_roster", "roster_from_dict"]
