"""Every file format a user hands over, fuzzed (issue 33): an experiment file, a roster, a
population, a scenario, a recording, a checkpoint sidecar and a run folder, each as generated
TOML/JSON (a valid file with values swapped, hostile structure, raw text): the reader returns
or raises one ``ValueError`` / ``OSError`` (what the command line prints as one line), never
another exception, a ``RecursionError`` or a hang. Few examples here (the fast loop); the
property is the same at any count.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commons_arena.errors import one_line

EXAMPLES = int(os.environ.get("COMMONS_ARENA_FUZZ_EXAMPLES", "30"))  # more for a long hunt; the fast loop: 30
FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                derandomize=EXAMPLES <= 30)
GOLDEN = Path(__file__).parents[1] / "golden" / "standard.jsonl"

LEAF = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True)
        | st.text(max_size=20) | st.sampled_from(["standard", "crisis", "edf", "allocator", "search", "broker",
                                                  "learned:/etc", "../../etc", "allocator_ppo", "PPO", "truthful"]))
KEYS = st.sampled_from(["name", "seat", "scenarios", "seeds", "entrants", "backgrounds", "anchors", "low", "high",
                        "roles", "agents", "team", "policy", "level", "bluff", "experiment", "seed", "iterations",
                        "hidden", "train", "first", "count", "agent", "format_version", "network", "history",
                        "score", "scenario", "iteration", "env_steps", "returns"]) | st.text(max_size=8)
VALUE = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
                     max_leaves=25)
DOCUMENT = st.dictionaries(KEYS, VALUE, max_size=6)
HOSTILE_TEXT = st.sampled_from(["[" * 3000, "a = " + "[" * 1200 + "]" * 1200, "{" * 5000, "\x00\xff", "",
                                '{"a":' * 2000 + "1" + "}" * 2000, "a = { b = " * 500])


def _toml_value(value: Any) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def toml_text(document: dict[str, Any]) -> str:
    """A TOML document of ``document``: scalars at the top, tables as [sections] (nested tables inline)."""
    top = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    tables = [f"[{json.dumps(k)}]\n" + "\n".join(f"{json.dumps(a)} = {_toml_value(b)}" for a, b in v.items())
              for k, v in document.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


TOML = DOCUMENT.map(toml_text) | HOSTILE_TEXT | st.text(max_size=200)
JSON_TEXT = VALUE.map(lambda v: json.dumps(v)) | DOCUMENT.map(lambda v: json.dumps(v)) | HOSTILE_TEXT


def holds(read, path: Path) -> None:
    """``read(path)`` returns, or raises a domain error with a message (never anything else)."""
    try:
        read(path)
    except (ValueError, OSError) as err:
        assert one_line(err), type(err)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass") if "\udc00" not in text else path.write_bytes(
        text.encode("utf-8", "surrogateescape"))
    return path


@pytest.mark.parametrize("fmt", ["experiment", "roster", "population", "scenario", "psro", "suite", "family",
                                 "mixture"])
def test_toml_files_answer_in_one_line(tmp_path, fmt):
    from commons_arena.family import load_family
    from commons_arena.scenario import load_scenario
    from experiments.evaluation.roster import load_roster
    from experiments.evaluation.suite import load_suite
    from experiments.studies.psro_file import load_psro
    from experiments.training.config_file import load_experiment
    from experiments.training.mixture import load_mixture
    from policies.population import Population

    read = {"experiment": load_experiment, "roster": load_roster, "population": Population.from_toml,
            "scenario": load_scenario, "psro": load_psro, "suite": load_suite, "family": load_family,
            "mixture": load_mixture}[fmt]

    @FAST
    @given(TOML)
    def fuzz(text):
        holds(read, _write(tmp_path, f"{fmt}.toml", text))

    fuzz()


@st.composite
def mutated_recording(draw) -> str:
    """The golden recording with one value somewhere replaced, a line dropped, or raw text."""
    records = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    how = draw(st.sampled_from(["value", "drop", "raw"]))
    if how == "raw":
        return draw(JSON_TEXT)
    if how == "drop":
        del records[draw(st.integers(0, len(records) - 1))]
    else:
        record = records[draw(st.integers(0, len(records) - 1))]
        path = []
        node: Any = record
        while isinstance(node, dict | list) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
            path.append(key)
            node = node[key]
        if path:
            parent = record
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = draw(VALUE)
    return "\n".join(json.dumps(r) for r in records) + "\n"


def test_recordings_answer_in_one_line(tmp_path):
    from commons_arena.verify import verify_recording

    @settings(max_examples=max(1, EXAMPLES // 2), deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=EXAMPLES <= 30)
    @given(mutated_recording())
    def fuzz(text):
        holds(verify_recording, _write(tmp_path, "rec.jsonl", text))

    fuzz()


def test_sidecars_answer_in_one_line(tmp_path):
    from policies.learned import read_sidecar

    @FAST
    @given(JSON_TEXT)
    def fuzz(text):
        _write(tmp_path, "arena_policy.json", text)
        holds(read_sidecar, tmp_path)

    fuzz()


@pytest.mark.parametrize("name", ["experiment.toml", "args.json", "history.json", "state.json", "final_scores.json"])
def test_run_folders_answer_in_one_line(tmp_path, name):
    from dataclasses import asdict

    from experiments.studies.seed_report import seed_runs
    from experiments.training.args import TrainArgs
    from experiments.training.config_file import experiment_text
    from experiments.training.runs import run_args

    run = tmp_path / "parent" / "s0"
    run.mkdir(parents=True)
    args = TrainArgs(experiment="seats_ppo")
    record = {"args.json": json.dumps(asdict(args), default=str)} if name == "args.json" \
        else {"experiment.toml": experiment_text(args)}  # an older run's record, or today's
    good = {**record, "history.json": json.dumps([{"iteration": 1, "scenario": "standard", "score": 0.5, "minutes": 1.0}])}

    @FAST
    @given(TOML if name.endswith(".toml") else JSON_TEXT)
    def fuzz(text):
        for other, content in good.items():
            (run / other).write_text(content)
        _write(run, name, text)
        holds(seed_runs, run.parent)
        holds(lambda folder: run_args(TrainArgs(resume=folder)), run)

    fuzz()


@pytest.mark.parametrize("name", ["metagame.json", "allocator.json", "discounting.json", "psro_settings.json"])
def test_psro_records_answer_in_one_line(tmp_path, name):
    """psro's step records (issue 44: five tracebacks came from them) read back by the one reader."""
    from experiments.studies.psro import GAME, LEARNED, check_folder, check_game, stored_step
    from experiments.studies.psro_file import psro_from_dict
    from tests.experiments.studies.test_psro import tiny_file

    cfg = psro_from_dict(tiny_file())
    model = {"metagame.json": ("game", GAME), "discounting.json": ("learned", LEARNED)}

    def read(path: Path) -> None:
        if name == "psro_settings.json":
            check_folder(path.parent, cfg)
        elif name == "allocator.json":
            from pydantic import TypeAdapter

            stored_step(path, {"k": 1}, "allocator", TypeAdapter(str))
        else:
            record_field, adapter = model[name]
            found = stored_step(path, {"k": 1}, record_field, adapter)
            if found is not None and name == "metagame.json":
                check_game(found, path)

    field = {"metagame.json": "game", "discounting.json": "learned", "allocator.json": "allocator"}.get(name, "x")

    @FAST
    @given(JSON_TEXT | VALUE.map(lambda v: json.dumps({"key": {"k": 1}, field: v})))
    def fuzz(text):
        holds(read, _write(tmp_path, name, text))

    fuzz()
