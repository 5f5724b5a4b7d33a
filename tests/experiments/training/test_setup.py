"""A training run parses each scenario file once (experiments/training/setup.py): ``resolve`` reads them, and
everything after it (the run's record, observation scales, references, a resume's hash check) receives the
parsed configs. No RLlib: the run is set up as ``train`` sets it up, up to the first iteration."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import commons_arena.scenario
from experiments.training.args import TrainArgs
from experiments.training.runs import RECORD, open_run, run_args
from experiments.training.setup import measure, resolve


def set_up(args: TrainArgs):
    """What ``experiments.training.train.train`` does before RLlib starts."""
    setup = resolve(run_args(args))
    run, args, _ = open_run(setup.args, setup.stages)
    return run, measure(replace(setup, args=args), run)


def test_a_run_reads_each_scenario_file_once(tmp_path, monkeypatch, tiny, write_scenario):
    scenario = write_scenario(tiny, "tiny.toml")
    background = tmp_path / "background.toml"
    background.write_text('[roles]\nteam = "truthful"\n')
    reads: Counter[str] = Counter()
    read_toml = commons_arena.scenario.read_toml  # load_scenario's one way to a scenario file

    def counting(path, *rest, **named):
        if Path(path).parent.name != "splits":  # a family split's list of hashes (cached), not a scenario
            reads[str(path)] += 1
        return read_toml(path, *rest, **named)

    monkeypatch.setattr(commons_arena.scenario, "read_toml", counting)
    args = TrainArgs(scenario=str(scenario), background=background, out=tmp_path / "runs", eval_seeds=2, iterations=1)
    run, setup = set_up(args)
    assert reads == {str(scenario): 1}
    assert setup.stages[0].name == "tiny" and setup.references["tiny"] and setup.scales
    assert (run / RECORD).is_file()

    reads.clear()  # a resumed session: its record's hashes are checked on the configs resolve parsed
    set_up(TrainArgs(resume=run, iterations=2))
    assert reads == {str(scenario): 1}
