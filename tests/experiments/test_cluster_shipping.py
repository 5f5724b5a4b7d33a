"""Clusters that do not share a disk: checkpoints travel as bytes (``policies.shipping``) and
the code through Ray's ``runtime_env`` (``experiments.cluster``).

The two-node test runs in its own process, on nodes started without this checkout on their
path, and deletes the checkpoint folder before the tasks and env runners that play it start.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from policies import shipping
from policies.learned import LearnedPolicy
from policies.registry import make_policy

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMONS_ARENA_CHECKPOINT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shipping, "_INSTALLED", {})
    return tmp_path / "cache"


@pytest.mark.slow
@pytest.mark.rllib
def test_a_packed_checkpoint_plays_where_its_folder_is_gone(tmp_path, cache):
    from tests.policies.test_checkpoint_format import save_agent  # imports torch and RLlib: only where used

    source = save_agent(tmp_path / "ckpt", "standard", ALLOCATOR, codec="relative")
    (source / "rllib_state.pkl").write_bytes(b"not sent")  # only the data-only files travel
    obs, _ = commons_arena.parallel_env("standard").reset(seed=3)
    before = make_policy(f"learned:{source}", "standard", ALLOCATOR).act(obs[ALLOCATOR])

    packed = shipping.pack_all(["edf", f"learned:{source}", f"learned:{source}"])
    assert [p.source for p in packed] == [str(source)]
    assert sorted(rel for rel, _ in packed[0].files) == ["arena_policy.json", "arena_policy.safetensors"]
    shutil.rmtree(source)
    with pytest.raises(ValueError):
        make_policy(f"learned:{source}", "standard", ALLOCATOR)

    where = shipping.install(packed)[str(source)]
    assert where == cache / packed[0].sha256 and sorted(p.name for p in where.iterdir()) == sorted(
        rel for rel, _ in packed[0].files)
    policy = make_policy(f"learned:{source}", "standard", ALLOCATOR)
    assert isinstance(policy, LearnedPolicy)
    assert np.array_equal(policy.act(obs[ALLOCATOR]), before)
    assert shipping.install(packed)[str(source)] == where  # once per node: the second install reuses it


@pytest.mark.slow
@pytest.mark.rllib
def test_damaged_bytes_are_refused(tmp_path, cache):
    from tests.policies.test_checkpoint_format import save_agent  # imports torch and RLlib: only where used

    packed = shipping.pack(str(save_agent(tmp_path / "ckpt", "standard", ALLOCATOR)))
    rel, data = packed.files[0]
    damaged = shipping.PackedCheckpoint(packed.source, ((rel, data[:-1] + b"x"), *packed.files[1:]), packed.sha256)
    with pytest.raises(shipping.ShippingError, match="do not match their SHA-256"):
        shipping.install([damaged])
    assert not cache.exists() or not any(cache.iterdir())


def test_a_folder_without_a_policy_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(shipping.ShippingError, match="no arena_policy.json"):
        shipping.pack(str(tmp_path / "empty"))
    with pytest.raises(shipping.ShippingError, match="not a folder"):
        shipping.pack(str(tmp_path / "missing"))


# The driver of the cluster test: its own process (the test session may hold a local Ray), this
# checkout on sys.path but not in PYTHONPATH, so the nodes it starts get the code only through
# the runtime_env. It prints one JSON line of what it saw.
CLUSTER_DRIVER = r"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import ray
from ray.cluster_utils import Cluster
from commons_arena.enums import ALLOCATOR
from experiments.cluster import start_ray
from experiments.evaluation import results, workers
from experiments.evaluation.roster import roster_from_dict
from experiments.training import algorithm, setup as run_setup
from experiments.training.args import TrainArgs
from experiments.training.callbacks import foreach_sampling_runner
from tests.policies.test_checkpoint_format import save_agent

out = {}
work = Path(tempfile.mkdtemp())
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
try:
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    start_ray(cluster.address)

    @ray.remote(num_cpus=1)
    def where_code_is():
        import policies.shipping
        return policies.shipping.__file__
    out["code"] = ray.get([where_code_is.remote() for _ in range(2)])

    # a tournament of a learned allocator whose folder is gone before the tasks start
    ckpt = save_agent(work / "alloc", "standard", ALLOCATOR, codec="relative")
    roster = roster_from_dict({"seat": ALLOCATOR, "scenarios": ["standard"], "seeds": [1, 2, 3, 4],
                               "entrants": ["edf", f"learned:{ckpt}"]}, source="test")
    groups = results.missing_groups(roster, set())
    local = [(i, r.seed, r.focal_return, r.episode) for i, r in workers.run_in_process(groups)]
    packed = workers.pack_all

    def pack_then_delete(names):  # the driver packs; the folder is gone before any task starts
        shipped = packed(names)
        shutil.rmtree(ckpt)
        return shipped

    workers.pack_all = pack_then_delete
    remote = [(i, r.seed, r.focal_return, r.episode) for i, r in workers.run_on_ray(groups, 2, cluster.address)]
    out["tournament_same"] = sorted(local) == sorted(remote)
    out["tournament_rows"] = len(remote)
    out["tournament_folder_gone"] = not ckpt.exists()

    # the tournament's workers hand their CPUs back a moment after the last task: wait (bounded), else
    # the runner count is cut to what Ray reports free then (seen in a fresh-clone CI run: 1 of 2)
    deadline = time.time() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.2)
    # training with a learned team in the background, on two remote env runners, folder gone first
    team = save_agent(work / "team", "standard", "search")
    (work / "roster.toml").write_text(f'[agents]\nsearch = "learned:{team}"\n')
    args = TrainArgs(experiment="allocator_ppo", background=work / "roster.toml", num_env_runners=2,
                     num_envs_per_env_runner=2, train_batch_size=100, minibatch_size=50, num_epochs=1,
                     hidden=(8, 8), quiet=True)
    config = algorithm.algorithm_config(run_setup.with_unit_scales(run_setup.resolve(args)))
    shutil.rmtree(team)
    algo = config.build_algo()
    result = algo.train()
    out["env_steps"] = int(result["num_env_steps_sampled_lifetime"])
    out["runners"] = foreach_sampling_runner(algo, lambda r: (
        type(r.env.envs[0].unwrapped.seats.background["search"]).__name__,
        {k: str(v) for k, v in __import__("policies.shipping").shipping.installed().items()},
        os.getpid()))
    out["team_source"] = str(team)
    algo.stop()

    # the command line on the same cluster (--address): train on two env runners (one CPU per node: one
    # runner per node), then a tournament of its checkpoint as Ray tasks, which stores the rows the same
    # tournament stores in-process
    import subprocess
    from commands.cli import main
    from tests.experiments.evaluation.test_tournament import stored
    deadline = time.time() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.2)

    def cli(*argv):
        done = subprocess.run([sys.executable, "-m", "commands", *argv, "--address", cluster.address],
                              capture_output=True, text=True, cwd=sys.argv[1], timeout=400)
        return [done.returncode, done.stdout, done.stderr[-2000:]]

    out["cli_train"] = cli("train", "--experiment", "allocator_ppo", "--iterations", "1", "--num-env-runners", "2",
                           "--train-batch-size", "100", "--minibatch-size", "50", "--num-epochs", "1",
                           "--num-envs-per-env-runner", "2", "--hidden", "8", "8", "--eval-seeds", "2",
                           "--eval-every", "1", "--quiet", "--out", str(work / "runs"), "--run-name", "cluster")
    best = work / "runs" / "cluster" / "best"
    out["cli_best"] = (best / "arena_policy.json").is_file()
    entrants = ["--scenarios", "standard", "--allocators", "edf", f"learned:{best}", "--seeds", "4", "--no-progress"]
    out["cli_tournament"] = cli("tournament", *entrants, "--workers", "2", "--ray-min-seconds", "0",
                                "--out", str(work / "t"))
    out["cli_standings"] = (work / "t" / "standings.md").is_file()
    main(["tournament", *entrants, "--workers", "1", "--out", str(work / "local")])
    out["cli_same_rows"] = stored(work / "local" / "results.sqlite") == stored(work / "t" / "results.sqlite")
finally:
    ray.shutdown()
    cluster.shutdown()
    shutil.rmtree(work, ignore_errors=True)
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.rllib
@pytest.mark.ray  # a two-node cluster
@pytest.mark.timeout(1500)
def test_code_and_checkpoints_reach_nodes_that_share_no_disk(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env["COMMONS_ARENA_CHECKPOINT_CACHE"] = str(tmp_path / "cache")
    # a Ray temp dir of its own (short: socket paths), else a local ray.init() elsewhere on this
    # machine with the same RAY_TMPDIR would find this cluster and join it
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="rcs", dir="/tmp")
    try:
        run = subprocess.run([sys.executable, "-c", CLUSTER_DRIVER, str(REPO)], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=1480)
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    # the nodes imported the code Ray shipped, not this checkout (nor an installed copy)
    assert all("runtime_resources" in path and not path.startswith(str(REPO)) for path in out["code"]), out["code"]
    assert out["tournament_same"] and out["tournament_rows"] == 16 and out["tournament_folder_gone"]  # 2 entrants + 2 anchors x 4 seeds
    assert out["env_steps"] >= 100
    assert len(out["runners"]) == 2 and len({pid for *_, pid in out["runners"]}) == 2
    for policy, installed, _ in out["runners"]:
        assert policy == "LearnedPolicy"
        assert installed[out["team_source"]].startswith(str(tmp_path / "cache"))
    # `train` and `tournament` with --address (the nodes get the code the same way)
    code, _, err = out["cli_train"]
    assert code == 0 and "env runners instead of" not in err, err  # both runners were placed
    assert out["cli_best"]
    code, stdout, err = out["cli_tournament"]
    assert code == 0, err
    assert "ray" in stdout.lower() and out["cli_standings"]  # played as Ray tasks, not in-process
    assert out["cli_same_rows"]
