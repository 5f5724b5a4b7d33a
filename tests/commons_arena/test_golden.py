"""Golden playthroughs: every shipped scenario's recorded episode re-plays bit for bit, and
``commons-arena verify`` says where a changed game first differs (tests/golden/make.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import commons_arena
from commands.cli import main
from commons_arena.verify import RecordingRefused, verify_recording
from tests.golden.make import golden_path, golden_scenarios, scenario_source

SCENARIOS = golden_scenarios()  # the shipped ones and tests/data/scenarios (a hard carbon cap)


@pytest.mark.parametrize("name", SCENARIOS)
def test_golden_playthrough_replays_identically(name: str) -> None:
    path = golden_path(name)
    assert path.is_file(), f"no golden recording for {name}: run python -m tests.golden.make"
    result = verify_recording(path, scenario_source(name))
    assert result.ok, str(result.difference)
    assert result.episodes == 1 and result.ticks >= 1


def _edit(src: Path, dst: Path, edit) -> Path:
    lines = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()]
    edit(lines)
    dst.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return dst


def test_a_changed_rule_is_reported_at_the_first_tick_it_shows(monkeypatch, capsys) -> None:
    from commons_arena import rewards

    real = rewards.BROKER_TERMS["profit"]  # the rubric reads its terms from this table when an env is built
    monkeypatch.setitem(rewards.BROKER_TERMS, "profit", lambda o: real(o) + 0.5)
    result = verify_recording(golden_path("standard"))
    assert not result.ok and result.difference is not None
    assert (result.difference.tick, result.difference.where) == (0, "rewards.broker")
    assert (result.difference.recorded, result.difference.replayed) == (0.0, 0.5)
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(golden_path("standard"))])
    assert exit_.value.code == 1
    assert "DIFFERS" in capsys.readouterr().out


def test_a_tampered_tick_is_reported_with_its_tick_and_key(tmp_path: Path, capsys) -> None:
    def edit(lines):
        tick = next(line for line in lines if line["type"] == "tick" and line["tick"] == 3)
        tick["rewards"]["allocator"] += 1.0

    path = _edit(golden_path("standard"), tmp_path / "tampered.jsonl", edit)
    result = verify_recording(path)
    assert result.difference is not None
    assert (result.difference.tick, result.difference.where) == (3, "rewards.allocator")
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(path)])
    assert exit_.value.code == 1
    assert "tick 3" in capsys.readouterr().out


def test_a_changed_scenario_or_env_version_is_refused(tmp_path: Path, capsys) -> None:
    def new_hash(lines):
        lines[0]["scenario_hash"] = "0123456789ab"

    def new_env(lines):
        lines[0]["env"] = "commons_arena_v99"

    for edit, words in ((new_hash, "content hash"), (new_env, "commons_arena_v99")):
        path = _edit(golden_path("standard"), tmp_path / "changed.jsonl", edit)
        with pytest.raises(RecordingRefused, match=words):
            verify_recording(path)
        with pytest.raises(SystemExit) as exit_:
            main(["verify", str(path)])
        assert exit_.value.code == 2
        assert words in capsys.readouterr().err


def test_verify_ok_on_the_command_line(capsys) -> None:
    main(["verify", str(golden_path("tight_capacity"))])
    assert capsys.readouterr().out.startswith("ok:")


def test_a_recording_with_observations_is_compared_on_them_too(tmp_path: Path) -> None:
    import numpy as np

    from commons_arena.recording import RecordEpisode

    path = tmp_path / "obs.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path, include_observations=True)
    rng = np.random.default_rng(1)
    env.reset(seed=4)
    for _ in range(3):  # abandoned after 3 ticks: the summary says incomplete, the replay agrees
        env.step({a: rng.integers(0, env.action_space(a).nvec) for a in env.agents})
    env.close()
    assert verify_recording(path).ok

    def edit(lines):
        lines[2]["observations"]["search"]["credibility"][0] = 0.5

    result = verify_recording(_edit(path, tmp_path / "obs2.jsonl", edit))
    assert result.difference is not None and result.difference.where == "observations.search.credibility[0]"


def test_a_missing_recording_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["verify", str(tmp_path / "nope.jsonl")])
    assert exit_.value.code == 2
    assert "nope.jsonl" in capsys.readouterr().err


# OpenBLAS picks its kernel per processor at run time (OPENBLAS_CORETYPE forces one). A
# BLAS dot product in the rules rounded differently on an AVX-512 kernel than on an AVX2
# one, so recordings made on one machine failed on another; commons_arena.numerics.dot
# keeps BLAS out of the rules. Both kernels run on any x86-64 that has AVX2 or emulates it.
@pytest.mark.slow  # subprocesses
@pytest.mark.parametrize("kernel", ["SkylakeX", "Haswell"])
def test_golden_playthroughs_replay_on_every_blas_kernel(kernel: str) -> None:
    import os
    import subprocess
    import sys

    script = (
        "import commons_arena\n"
        "from commons_arena.verify import verify_recording\n"
        "from tests.golden.make import golden_path\n"
        "bad = [str(r.difference) for r in (verify_recording(golden_path(n)) for n in commons_arena.list_scenarios()) if not r.ok]\n"
        "print('\\n'.join(bad) or 'ok')\n"
    )
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "ok", f"with OPENBLAS_CORETYPE={kernel}: {run.stdout}"


def test_the_hard_cap_golden_pins_the_hard_cap_cut(monkeypatch) -> None:
    """No shipped scenario has a hard carbon cap; tests/data/scenarios/hard_cap_cluster.toml does,
    its golden recording has hard-cap cuts, and a changed cut rule is reported where it first shows."""
    path = golden_path("hard_cap_cluster")
    ticks = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    cut = [t["tick"] for t in ticks if t["type"] == "tick" and t["outcome"]["repairs"]["grant_over_carbon_cap"]]
    assert cut, "the hard-cap golden no longer reaches the hard-cap cut"
    from commons_arena.batched import tick

    real = tick.cut_for_hard_cap

    def first_team_first(grants, power_kw, intensity, headroom_kg):  # the same count, from the other end
        fixed, n = real(grants[:, ::-1], power_kw, intensity, headroom_kg)
        return fixed[:, ::-1], n

    monkeypatch.setattr(tick, "cut_for_hard_cap", first_team_first)
    result = verify_recording(path, scenario_source("hard_cap_cluster"))
    assert not result.ok and result.difference is not None and result.difference.tick == cut[0]
