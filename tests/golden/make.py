"""Write the golden recording of every shipped scenario: ``tests/golden/<scenario>.jsonl``.

Test-data scenarios (``tests/data/scenarios/*.toml``: not shipped, pinning rules no shipped
scenario reaches, such as a hard carbon cap's cut) get one too; :func:`scenario_source`
names the file to play for them.

One whole episode per scenario from ``reset(seed=0)``, every agent acting uniformly at
random from a generator seeded apart from the env (random play reaches every repair rule,
escalations and audits). ``commons-arena verify`` re-plays them; ``tests/commons_arena/test_golden.py``
runs it on each. Regenerate only with a deliberate change of the rules, and bump the env
version with it (docs/rules.md, "Golden playthroughs")::

    python -m tests.golden.make
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import commons_arena
from commons_arena.recording import RecordEpisode

HERE = Path(__file__).resolve().parent
SEED = 0
TEST_SCENARIOS = HERE.parent / "data" / "scenarios"


def test_scenarios() -> list[str]:
    """Names of the test-data scenarios (file stem = scenario name)."""
    return sorted(path.stem for path in TEST_SCENARIOS.glob("*.toml"))


def golden_scenarios() -> list[str]:
    """Every scenario with a golden recording: the shipped ones, then the test-data ones."""
    return [*commons_arena.list_scenarios(), *test_scenarios()]


def scenario_source(scenario: str) -> str:
    """What to load ``scenario`` from: a test-data scenario's file path, else the shipped name."""
    path = TEST_SCENARIOS / f"{scenario}.toml"
    return str(path) if path.is_file() else scenario


def golden_path(scenario: str) -> Path:
    return HERE / f"{scenario}.jsonl"


def record(scenario: str, path: Path, seed: int = SEED) -> Path:
    env = RecordEpisode(commons_arena.parallel_env(scenario_source(scenario)), path)
    rng = np.random.default_rng(seed + 10_000)
    env.reset(seed=seed)
    while env.agents:
        env.step({agent: rng.integers(0, env.action_space(agent).nvec) for agent in env.agents})
    env.close()
    return path


if __name__ == "__main__":
    for name in golden_scenarios():
        print(f"wrote {record(name, golden_path(name))}")
