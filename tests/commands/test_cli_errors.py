"""The command line answers bad input with one line on stderr and exit code 2, before doing
any work, and never overwrites a file without --force."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from commands.cli import main
from commons_arena.enums import ALLOCATOR
from commons_arena.errors import one_line
from tests.conftest import TINY, toml_dumps


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # drop what fixtures printed
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(capsys, *argv: str, match: str) -> str:
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("commons-arena: error: "), err
    assert match in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def fitting_checkpoint(tmp_path) -> Path:
    from tests.policies.test_checkpoint_format import save_agent  # imports torch and RLlib: only the tests that need it

    return save_agent(tmp_path / "ckpt", "standard", ALLOCATOR, codec="relative")


@pytest.fixture
def bad_scenario(tmp_path) -> Path:
    path = tmp_path / "nan_weights.toml"
    path.write_text(toml_dumps({**TINY, "rewards": {"allocator": {"spend": float("nan")}}}))
    return path


@pytest.mark.slow
@pytest.mark.rllib
def test_bad_input_cases_are_one_line_each(capsys, tmp_path, fitting_checkpoint, bad_scenario, monkeypatch):
    monkeypatch.chdir(tmp_path)  # defaults such as results/evaluation land here, if anywhere
    recording = tmp_path / "run.jsonl"
    recording.write_text("not json\n")
    not_objects = tmp_path / "list.jsonl"
    not_objects.write_text("[1, 2]\n")
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"type": "header", "x": "caf\xe9"}\n')
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "evaluation.csv").write_text("x")
    cases = [
        (["play", "--seed", "-1"], "--seed must be a finite number in [0, "),
        (["play", "--scenario", "no_such"], "no scenario named 'no_such'"),
        (["play", "--scenario", str(bad_scenario)], f"invalid scenario {bad_scenario}"),
        (["play", "--population", str(tmp_path / "missing.toml")], "missing.toml"),
        (["evaluate", "--seeds", "0"], "--seeds must be a finite number in [1, 100000]"),
        (["evaluate", "--seeds", "abc"], "Error parsing --seeds"),
        (["evaluate", "--no-such-option"], "Unrecognized options: --no-such-option"),
        (["replay"], "Missing from commons-arena replay"),
        (["evaluate", "--seeds", "-3"], "--seeds must be a finite number in [1, 100000]"),
        (["evaluate", "--first-seed", "-1"], "--first-seed must be a finite number in [0, "),
        (["evaluate", "--allocators", "nosuch"], "unknown policy 'nosuch'"),
        (["evaluate", "--allocators", "truthful"], "'truthful' is a team policy, not an allocator"),
        (["evaluate", "--allocators", f"learned:{tmp_path / 'nothing'}"], "not a commons_arena policy checkpoint"),
        (["evaluate", "--scenarios", "standard", "market_baseline", "--allocators", f"learned:{fitting_checkpoint}"],
         "does not fit agent 'allocator' of scenario 'market_baseline'"),
        (["evaluate", "--out", str(taken)], "already holds files; pass --force"),
        (["tournament", "--seeds", "0"], "--seeds must be a finite number in [1, 100000]"),
        (["train", "--minutes", "-1"], "--minutes must be a positive number"),
        (["train", "--minutes", "nan"], "--minutes must be a positive number"),
        (["train", "--iterations", "0"], "--iterations must be at least 1"),
        (["train", "--hidden", "0"], "--hidden needs"),
        (["train", "--gae-lambda", "1.5"], "--gae-lambda must be in [0, 1]"),
        (["train", "--vf-clip", "0"], "--vf-clip must be > 0"),
        (["train", "--run-name", "../x"], "--run-name must be a plain folder name"),
        (["train", "--resume", str(tmp_path)], "nothing to resume"),
        (["train", "--scenario", "no_such"], "no scenario named"),
        (["replay", str(tmp_path / "missing.jsonl")], "recording not found"),
        (["replay", str(recording), "-o", str(recording)], "is also the input"),
        (["replay", str(recording), "-o", str(recording), "--force"], "is also the input"),
        (["replay", str(recording)], str(recording)),  # not a recording: the reader's complaint, one line
        (["replay", str(not_objects)], "expected a JSON object"),
        (["replay", str(latin1)], "not UTF-8 text"),
        (["convert-checkpoint", str(fitting_checkpoint)], "--i-trust-this-checkpoint"),
        (["convert-checkpoint", str(fitting_checkpoint), "--i-trust-this-checkpoint"], "already in the data-only format"),
        (["compare-checkpoint", str(tmp_path / "nothing")], "not a commons_arena policy checkpoint"),
        (["compare-checkpoint", str(fitting_checkpoint), "--seeds", "1"], "--seeds must be at least 2"),
        (["compare-checkpoint", str(fitting_checkpoint), "--scenarios", "standard", "--out", str(taken)],
         "already holds files; pass --force"),
        (["need-gap", "--train", "0"], "--seeds must be a finite number in [1, 100000]"),
        (["need-gap", "--scenarios", "no_such"], "no scenario named 'no_such'"),
        (["need-gap", "--out", str(recording)], "already exists; pass --force"),
        (["corrections", str(fitting_checkpoint), "--first-seed", "-1"], "--first-seed must be a finite number"),
        (["fixed-codes", "--seat", "broker"], "--seat must be a team seat"),
        (["fixed-codes", "--allocator", "truthful"], "'truthful' is a team policy, not an allocator"),
        (["broker-pricing", "fixed_price", "--codes", "3,4,0"], "--codes '3,4,0': give margin,slope,crisis_levels"),
        (["broker-pricing", "proportional"], "proportional"),
        (["seed-report", str(tmp_path / "missing")], "is not a folder"),
        (["seed-report", str(taken), "--compare-seeds", "-1"], "--compare-seeds must be a finite number"),
    ]
    for argv, match in cases:
        assert_one_line_error(capsys, *argv, match=match)
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()  # refused before any work


@pytest.mark.slow
@pytest.mark.rllib
def test_checkpoint_not_fitting_one_scenario_is_refused_before_anything_runs(capsys, tmp_path, fitting_checkpoint):
    out = tmp_path / "eval"
    assert_one_line_error(capsys, "evaluate", "--scenarios", "standard", "market_baseline", "--seeds", "1",
                          "--allocators", f"learned:{fitting_checkpoint}", "--out", str(out),
                          match="market_baseline")
    assert not out.exists()


def test_outputs_are_not_overwritten_without_force(capsys, tmp_path, write_scenario):
    scenario = write_scenario(TINY)
    record = tmp_path / "run.jsonl"
    base = ["play", "--scenario", str(scenario), "--quiet", "--record", str(record)]
    assert run_cli(capsys, *base)[0] == 0
    first = record.read_bytes()
    assert_one_line_error(capsys, *base, "--seed", "1", match="already exists; pass --force")
    assert record.read_bytes() == first
    assert run_cli(capsys, *base, "--seed", "1", "--force")[0] == 0
    assert record.read_bytes() != first
    page = record.with_suffix(".html")
    assert run_cli(capsys, "replay", str(record))[0] == 0 and page.is_file()  # default: beside the recording
    assert_one_line_error(capsys, "replay", str(record), match=f"{page} already exists")
    assert run_cli(capsys, "replay", str(record), "--force")[0] == 0
    out = tmp_path / "eval"
    argv = ["evaluate", "--scenarios", str(scenario), "--allocators", "edf", "--seeds", "1", "--no-misreport",
            "--out", str(out)]
    assert run_cli(capsys, *argv)[0] == 0
    assert_one_line_error(capsys, *argv, match="already holds files")
    assert run_cli(capsys, *argv, "--force")[0] == 0


def test_debug_shows_the_traceback(capsys):
    code, _, err = run_cli(capsys, "evaluate", "--seeds", "0", "--debug")
    assert code == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("commons-arena: error:")


def test_multi_line_reports_become_one_line():
    assert one_line(ValueError("invalid scenario x:\n  a: bad\n  b: worse")) == "invalid scenario x: a: bad; b: worse"
    assert one_line(ValueError("")) == "ValueError"


@pytest.mark.slow
def test_the_installed_command_exits_2_with_one_line_and_no_traceback(tmp_path):
    """The real entry point, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    script = "from commands.cli import main; main()"
    for argv in (["evaluate", "--seeds", "-3"],):
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert done.stdout == ""


def test_tyro_reports_reduce_to_their_first_sentence():
    from commands.cli import _usage_message

    boxed = "╭─ Value error ──╮\n│ Error parsing --seeds: bad │\n│ ─────── │\n│ Argument helptext: │\n╰────╯\n"
    plain = " Value error   \n ------------ \n  Error parsing --seeds: bad  \n  ---------\n  Argument helptext:\n"
    missing = "╭─ Required options ─╮\n│ Missing from x replay: │\n│     PATH │\n╰──╯\n"
    assert _usage_message(boxed) == _usage_message(plain) == "Error parsing --seeds: bad"
    assert _usage_message(missing) == "Missing from x replay: PATH"


@pytest.mark.parametrize(("argv", "match"), [
    (("--seat-otherwise", "truthfull"), "--seat-otherwise: unknown policy 'truthfull'"),
    (("--seat-otherwise", "planner"), "--seat-otherwise: policy 'planner' plays the allocator role"),
    (("--train.background", "roster.toml"), "--seat-otherwise and --train.background both choose round 2's background"),
])
def test_the_arms_race_names_a_bad_seat_otherwise(capsys, tmp_path, argv, match):
    assert_one_line_error(capsys, "arms-race", *argv, "--out", str(tmp_path / "race"), match=match)


@pytest.mark.parametrize("command", ["exploit", "arms-race"])
def test_paired_comparisons_need_two_seeds_and_a_valid_first_seed(capsys, tmp_path, command):
    out = ("--out", str(tmp_path / command))
    assert_one_line_error(capsys, command, "--seeds", "1", *out, match="--seeds must be at least 2 (a paired CI)")
    assert_one_line_error(capsys, command, "--first-seed", "-1", *out, match="--first-seed")


@pytest.mark.parametrize(("argv", "match"), [
    (("--rounds", "0"), "--rounds must be in [1, 1000], got 0"),
    (("--teacher-share", "2"), "--teacher-share must be in [0, 1]"),
    (("--split", "nosuch"), "no split named 'nosuch'"),
    (("--split", "broad-heldout", "--limit", "1"), "distil must not read held-out scenarios"),
])
def test_distil_names_a_bad_setting_before_playing(capsys, tmp_path, argv, match):
    assert_one_line_error(capsys, "distil", *argv, "--out", str(tmp_path / "d"), match=match)
    assert not (tmp_path / "d").exists()


def test_distil_does_not_overwrite_a_folder_without_force(capsys, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "distil.json").write_text("{}")
    assert_one_line_error(capsys, "distil", "--out", str(tmp_path / "d"), match="pass --force to overwrite")
