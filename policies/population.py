"""Populations: which policy plays which agent (:mod:`policies.focal` plays them).

One name per idea: a *population* assigns seats to policies; a population file is one as TOML
(``play --population``, ``serve --population``, ``train --background``, which is the background of
the seats that do not learn); a roster's and a suite's ``[backgrounds.<name>]`` tables are
populations too (parsed by the same :meth:`Population.from_dict`). A *roster*
(``experiments/evaluation/roster.py``) is a tournament: entrants, scenarios, seeds and backgrounds.

A :class:`Population` is scenario-independent: it names policies per *role*
(``allocator``, ``team``, ``broker``) and/or per *agent id*, each optionally with
parameters. Resolved against a scenario, every agent gets, in order of precedence:

1. the population's entry for that agent id;
2. the population's entry for the agent's role (``team`` covers every team);
3. the scenario's own ``[population]`` table (its default background);
4. the fallback: a team plays its ``archetype`` from the scenario's team config, the
   broker ``demand_priced``, the allocator ``proportional``.

The same thing as a small TOML population file::

    name = "bluffers vs a fair allocator"      # optional
    [roles]
    team = "truthful"
    [agents]
    allocator = "max_min_fair"
    search = { policy = "greedy_bluffer", bluff = 3.0 }

and in Python::

    Population(roles={"team": "truthful"}, agents={"allocator": "max_min_fair"})
    Population.default(config)                 # the scenario's background, nothing overridden
    Population.from_toml("population.toml")    # .to_toml() writes it back

Unknown policies, policies of the wrong role, unknown roles and (by default) agent ids the
scenario does not have are errors that say what is known.
:func:`policies.focal.run_episode` plays one seeded episode of a population.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.arena import ArenaEnv
from commons_arena.files import toml_key, toml_value, write_file
from commons_arena.inputs import load_toml_file
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import role_of
from policies.base import Policy
from policies.registry import ROLES, available_policies, make_policy, policy_spec

FALLBACK = {"allocator": "proportional", "broker": "demand_priced"}  # teams: their archetype


class PopulationError(ValueError):
    """A population names an unknown policy, role or agent, or a policy of the wrong role."""


@dataclass(frozen=True)
class Entry:
    """One assignment: a registered policy name and its keyword parameters."""

    policy: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any, where: str) -> Entry:
        if isinstance(value, Entry):
            return value
        if isinstance(value, str) and value.lstrip().startswith("{"):  # a command line's inline TOML table
            try:
                value = tomllib.loads(f"entry = {value}")["entry"]
            except tomllib.TOMLDecodeError as err:
                raise PopulationError(f'{where}: {value!r} is not an inline TOML table like '
                                      f'{{policy = "learned:universal", gate = 0.6}}: {err}') from None
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, Mapping):
            data = dict(value)
            policy = data.pop("policy", None)
            if not isinstance(policy, str):
                raise PopulationError(f'{where}: a table entry needs policy = "<name>", got {dict(value)!r}')
            return cls(policy, data)
        raise PopulationError(f"{where}: expected a policy name or a table with 'policy', got {value!r}")

    def to_toml_value(self) -> Any:
        return self.policy if not self.params else {"policy": self.policy, **self.params}


def check_entry(entry: Entry, where: str, role: str | None = None) -> None:
    """``entry`` names a policy (of ``role``, when given) with parameters it accepts: the one rule for a
    seat's policy wherever one is assigned (a population, a tournament roster's entrants and anchors); the error names
    ``where``."""
    try:
        spec = policy_spec(entry.policy)
    except ValueError as err:
        if entry.policy.startswith("learned:"):  # a checkpoint problem: say which
            raise PopulationError(f"{where}: {err}") from None
        raise PopulationError(
            f"{where}: unknown policy {entry.policy!r}; known policies: {', '.join(available_policies())}"
        ) from None
    if role is not None and not spec.plays(role):
        raise PopulationError(
            f"{where}: policy {entry.policy!r} plays the {'/'.join(spec.roles)} role, not {role}; "
            f"{role} policies: {', '.join(available_policies(role))}"
        )
    unknown = set(entry.params) - set(spec.params)
    if unknown:
        raise PopulationError(
            f"{where}: policy {entry.policy!r} has no parameter(s) {sorted(unknown)}; it accepts {list(spec.params)}"
        )


@dataclass(frozen=True)
class Population:
    """Which policy plays which agent (see the module docstring)."""

    agents: Mapping[str, Entry | str | Mapping[str, Any]] = field(default_factory=dict)
    roles: Mapping[str, Entry | str | Mapping[str, Any]] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        roles = {role: Entry.parse(v, f"roles.{role}") for role, v in dict(self.roles).items()}
        for role, entry in roles.items():
            if role not in ROLES:
                raise PopulationError(f"roles: unknown role {role!r}; roles are {list(ROLES)}")
            check_entry(entry, f"roles.{role}", role)
        agents = {agent: Entry.parse(v, f"agents.{agent}") for agent, v in dict(self.agents).items()}
        for agent, entry in agents.items():
            check_entry(entry, f"agents.{agent}")
        object.__setattr__(self, "roles", roles)
        object.__setattr__(self, "agents", agents)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def default(cls, config: ScenarioConfig | str) -> Population:
        """The scenario's background population (its ``[population]`` table + fallbacks)."""
        config = load_scenario(config)
        return cls(agents=dict(config.population), name=f"{config.name} default")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> Population:
        unknown = set(data) - {"name", "agents", "roles"}
        if unknown:
            raise PopulationError(
                f"population {source}: unknown key(s) {sorted(unknown)}; expected name, roles, agents"
            )
        for key in ("agents", "roles"):
            if key in data and not isinstance(data[key], Mapping):
                raise PopulationError(f"population {source}: '{key}' must be a table")
        try:
            return cls(agents=data.get("agents", {}), roles=data.get("roles", {}), name=str(data.get("name", "")))
        except PopulationError as err:
            raise PopulationError(f"population {source}: {err}") from None

    @classmethod
    def from_toml(cls, path: str | Path, config: ScenarioConfig | str | None = None) -> Population:
        """Read a population file; with ``config``, also check it against that scenario."""
        path = Path(path)
        population = cls.from_dict(load_toml_file(path, "population", PopulationError), source=str(path))
        if config is not None:
            population.resolve(config)
        return population

    def with_agent(self, agent: str, policy: str, **params: Any) -> Population:
        """A copy in which ``agent`` plays ``policy``."""
        return Population(agents={**self.agents, agent: Entry(policy, params)}, roles=self.roles, name=self.name)

    def with_role(self, role: str, policy: str, **params: Any) -> Population:
        return Population(agents=self.agents, roles={**self.roles, role: Entry(policy, params)}, name=self.name)

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.roles:
            out["roles"] = {r: e.to_toml_value() for r, e in self.roles.items()}  # type: ignore[union-attr]
        if self.agents:
            out["agents"] = {a: e.to_toml_value() for a, e in self.agents.items()}  # type: ignore[union-attr]
        return out

    def to_toml(self, path: str | Path | None = None) -> str:
        """The population as TOML text (written to ``path`` when given)."""
        lines = []
        if self.name:
            lines.append(f"name = {toml_value(self.name)}")
        for table in ("roles", "agents"):
            entries = getattr(self, table)
            if entries:
                lines.append(f"\n[{table}]")
                lines += [f"{toml_key(key)} = {toml_value(e.to_toml_value())}" for key, e in entries.items()]
        text = "\n".join(lines).lstrip("\n") + "\n"
        if path is not None:
            write_file(path, text)
        return text

    # ------------------------------------------------------------------ use
    def resolve(self, config: ScenarioConfig | str, strict: bool = True) -> dict[str, Entry]:
        """Agent id → the entry that plays it in ``config`` (precedence in the module docstring).

        With ``strict`` (default), naming an agent the scenario does not have is an error;
        otherwise such entries are ignored (handy for one population over many scenarios).
        """
        config = load_scenario(config)
        extra = [a for a in self.agents if a not in config.agents]
        if extra and strict:
            raise PopulationError(
                f"population names agent(s) {extra} that scenario {config.name!r} does not have; "
                f"its agents are {list(config.agents)}"
            )
        archetypes = {t.name: t.archetype for t in config.teams}
        out: dict[str, Entry] = {}
        for agent in config.agents:
            role = role_of(config, agent)
            if agent in self.agents:
                entry, where = self.agents[agent], f"agents.{agent}"
            elif role in self.roles:
                entry, where = self.roles[role], f"roles.{role}"
            elif agent in config.population:
                entry, where = Entry(config.population[agent]), f"scenario {config.name!r} [population].{agent}"
            else:
                entry, where = Entry(archetypes[agent] if role == "team" else FALLBACK[role]), "fallback"
            check_entry(entry, where, role)  # type: ignore[arg-type]
            out[agent] = entry  # type: ignore[assignment]
        return out

    def build(
        self, config: ScenarioConfig | str, env: ArenaEnv | None = None, strict: bool = True
    ) -> dict[str, Policy]:
        """One policy per agent of ``config`` (``env`` is needed by privileged policies)."""
        config = load_scenario(config)
        return {
            agent: make_policy(entry.policy, config, agent, env=env, **dict(entry.params))
            for agent, entry in self.resolve(config, strict=strict).items()
        }

    def describe(self, config: ScenarioConfig | str) -> dict[str, str]:
        """Agent id → policy name, for reports."""
        return {agent: entry.policy for agent, entry in self.resolve(config, strict=False).items()}




def thresholds(weights: Sequence[float]) -> list[float]:
    """:func:`draw`'s boundaries for ``weights``: the cumulative probabilities without the last (1)."""
    w = np.asarray(weights, dtype=float)
    return [float(x) for x in np.cumsum(w / w.sum())[:-1]]


def draw(rng: np.random.Generator, thresholds: Sequence[float]) -> int:
    """The index drawn by one uniform number ``u`` of ``rng``: the number of thresholds ``<= u``
    (one threshold ``p``: 0 when ``u < p``, the ``--mix-share`` rule). Mixtures of populations are drawn so."""
    return int(np.searchsorted(thresholds, rng.random(), side="right"))


__all__ = ["Entry", "Population", "PopulationError", "check_entry", "draw", "thresholds"]
