"""A non-editable install (the wheel) loads every named scenario; the wheel is built offline."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import commons_arena

pytestmark = pytest.mark.slow  # builds and installs the wheel

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_every_scenario_and_loads_them(tmp_path):
    # built offline by the build backend installed with the dev extra: no package index, no isolated build env
    assert importlib.util.find_spec("hatchling") is not None, "the wheel is built by hatchling: install the dev extra"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True,
    )
    (wheel,) = (tmp_path / "dist").glob("commons_arena-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(Path(n).stem for n in names if Path(n).parent == Path("commons_arena/scenarios") and n.endswith(".toml"))
    assert shipped == commons_arena.list_scenarios()
    assets = {*(f"experiments/viewing/assets/replay.{ext}" for ext in ("html", "js")), "serving/assets/replay.css"}
    assert assets <= set(names), "the replay page's asset files are package data (its style sheet: the server's)"
    # the benchmark's suites are package data: `commons-arena benchmark --suite NAME` works from a wheel
    assert {f"experiments/suites/{n}.toml" for n in ("heldout-allocator", "tiers", "team-search", "broker")} <= set(names)
    assert "experiments/evaluation/reference_returns.json" in names  # their anchors' returns: a cold benchmark plays none
    # the play page's files ship beside the server that serves them
    assert {f"serving/assets/play.{ext}" for ext in ("html", "css", "js")} <= set(names)
    # the front door: the console script is the command line's package, shipped beside the others
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "commons-arena = commands.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    assert {"commands/cli.py", "serving/app.py", "policies/focal.py", "experiments/training/train.py"} <= set(names)
    # unpacked on its own (no checkout beside it), the package finds and validates them all
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    script = "import json, commons_arena as c; print(json.dumps({n: c.load_scenario(n).content_hash for n in c.list_scenarios()}))"
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, check=True, capture_output=True, text=True)
    hashes = json.loads(out.stdout)
    page = "from experiments.viewing.replay import render_page; print(len(render_page([], 'x')))"
    assert int(subprocess.run([sys.executable, "-c", page], cwd=tmp_path, env=env, check=True, capture_output=True,
                              text=True).stdout) > 5000
    assert hashes == {n: commons_arena.load_scenario(n).content_hash for n in commons_arena.list_scenarios()}
    # the families and their splits ship beside the scenarios, and a split regenerates there hash for hash
    assert {"commons_arena/scenarios/families/broad.toml", "commons_arena/scenarios/splits/broad-heldout.toml",
            "commons_arena/scenarios/splits/broad-train.toml"} <= set(names)
    split = ("import commons_arena.family as f; print(f.list_families(), f.list_splits(), "
             "len(f.load_split('broad-train')), len(f.load_split('broad-heldout')), len(f.heldout_hashes()))")
    assert subprocess.run([sys.executable, "-c", split], cwd=tmp_path, env=env, check=True, capture_output=True,
                          text=True).stdout.split() == ["('broad',)", "('broad-heldout',", "'broad-train')", "200", "64", "64"]
    # the universal checkpoint is package data: learned:universal plays from any folder (the path form needs a checkout)
    assert {"policies/checkpoints/universal/arena_policy.json",
            "policies/checkpoints/universal/arena_policy.safetensors"} <= set(names)
    play = ("import commons_arena as c; from policies.focal import run_episode; from policies.population import "
            "Population; cfg = c.load_scenario('standard'); e = run_episode(c.parallel_env(cfg), "
            "Population.default(cfg).with_agent('allocator', 'learned:universal'), seed=3); "
            "print(round(e['allocator']['return'], 6))")
    elsewhere = subprocess.run([sys.executable, "-c", play], cwd=tmp_path, env=env, check=True, capture_output=True,
                               text=True).stdout
    from policies.focal import run_episode
    from policies.population import Population

    cfg = commons_arena.load_scenario("standard")
    here = run_episode(commons_arena.parallel_env(cfg),
                       Population.default(cfg).with_agent("allocator", f"learned:{ROOT / 'checkpoints/universal'}"), seed=3)
    assert float(elsewhere) == round(here["allocator"]["return"], 6)  # the shipped copy is the checkout's checkpoint
    listed = subprocess.run([sys.executable, "-m", "commands", "scenarios"], cwd=tmp_path, env=env, check=True,
                            capture_output=True, text=True).stdout
    assert [line.split()[0] for line in listed.splitlines() if line[:1].strip()] == commons_arena.list_scenarios()
    assert str(target) in subprocess.run(
        [sys.executable, "-c", "import commons_arena; print(commons_arena.__file__)"],
        cwd=tmp_path, env=env, check=True, capture_output=True, text=True,
    ).stdout
