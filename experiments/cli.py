"""The ``commons-arena`` command line.

Each subcommand is a dataclass of arguments (one docstring per field, shown by ``--help``)
parsed by tyro; heavy imports (Ray, torch, matplotlib) happen inside the subcommand that
needs them, so ``commons-arena scenarios`` stays instant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

import commons_arena


@dataclass
class Scenarios:
    """List the shipped scenarios with their content hashes and descriptions."""

    json: bool = False
    """print JSON instead of a table"""

    def run(self) -> None:
        rows = []
        for name in commons_arena.list_scenarios():
            cfg = commons_arena.load_scenario(name)
            rows.append(
                {
                    "name": name,
                    "hash": cfg.content_hash,
                    "difficulty": cfg.difficulty or "-",
                    "teams": len(cfg.teams),
                    "ticks": cfg.max_ticks,
                    "description": " ".join(cfg.description.split()),
                }
            )
        if self.json:
            print(json.dumps(rows, indent=2))
            return
        for row in rows:
            print(f"{row['name']:<18} {row['hash']}  {row['difficulty']:<9} {row['teams']} teams, {row['ticks']} ticks")
            print(f"    {row['description']}")


@dataclass
class Play:
    """Play one episode and print each tick (ansi) and the final totals.

    Every agent acts uniformly at random unless ``--population`` names scripted policies
    (a roster TOML file, or ``default`` for the scenario's own background population).
    """

    scenario: str = "standard"
    """scenario name or path to a TOML file"""
    seed: int = 0
    """episode seed (all randomness flows from it)"""
    population: str | None = None
    """roster TOML, or 'default' for the scenario's population; omit for random actions"""
    quiet: bool = False
    """print only the final totals"""

    def run(self) -> dict[str, dict[str, float]]:
        env = commons_arena.parallel_env(scenario=self.scenario, render_mode=None if self.quiet else "human")
        print(f"scenario {env.config.name} (hash {env.config.content_hash}), seed {self.seed}")
        actors = self._actors(env)
        observations, _ = env.reset(seed=self.seed)
        infos: dict = {}
        while env.agents:
            actions = {agent: actors[agent](observations[agent]) for agent in env.agents}
            observations, _, _, _, infos = env.step(actions)
        summary = {agent: info["episode"] for agent, info in infos.items()}
        print("\nfinal totals")
        for agent, episode in summary.items():
            terms = ", ".join(f"{k.removeprefix('term/')} {v:+.1f}" for k, v in episode.items() if k.startswith("term/"))
            print(f"  {agent:<10} return {episode['return']:+8.2f}   ({terms})")
        stats = summary[env.possible_agents[0]]
        print(
            f"  jobs completed {stats['completed']:.0f}, missed {stats['missed']:.0f}; spend {stats['spend']:.1f}; "
            f"idle GPU-ticks {stats['idle_gpu_ticks']:.0f}; carbon {stats['carbon_kg']:.1f} kg; "
            f"fairness {stats['fairness']:.3f}"
        )
        return summary

    def _actors(self, env):
        if self.population is None:
            for i, agent in enumerate(env.possible_agents):
                env.action_space(agent).seed(self.seed + i)
            return {agent: (lambda obs, a=agent: env.action_space(a).sample()) for agent in env.possible_agents}
        from policies.population import Population

        population = (
            Population.default(env.config) if self.population == "default" else Population.from_toml(self.population, env.config)
        )
        policies = population.build(env.config, env=env)
        for i, agent in enumerate(env.possible_agents):
            policies[agent].reset(self.seed * 1000 + i)
        return {agent: policies[agent].act for agent in env.possible_agents}


Subcommand = Annotated[Scenarios, tyro.conf.subcommand("scenarios")] | Annotated[Play, tyro.conf.subcommand("play")]


def main(argv: list[str] | None = None) -> None:
    np.set_printoptions(precision=3, suppress=True)
    command = tyro.cli(Subcommand, args=argv, prog="commons-arena")  # type: ignore[arg-type]
    command.run()


if __name__ == "__main__":
    main()


__all__ = ["Path", "main"]
