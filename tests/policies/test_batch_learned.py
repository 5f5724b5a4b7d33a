"""A learned checkpoint acts on a batch exactly as N per-arena learned policies (policies/batch_learned.py):
every codec and history it may carry, through partial resets; the shape-free (universal) allocator too."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from commons_arena.family import generate_scenarios
from commons_arena.scenario import load_scenario
from policies.batch_learned import BatchLearned
from policies.checkpoint_format import NetworkSpec, PolicyNetwork
from policies.learned import ModuleInterface, save_policy
from policies.registry import batch_policy
from tests.policies.batch_cases import assert_equivalent, record_episodes


def random_network(input_size: int, nvec: list[int], seed: int, hidden: int = 16, lstm: bool = False) -> PolicyNetwork:
    """A small tanh MLP with random weights (large enough that its greedy codes vary with the input); ``lstm``:
    an LSTM cell after its hidden layer (a recurrent network)."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [input_size, hidden, sum(nvec)]
    layers, tensors = [], {}
    for k, (a, b) in enumerate(zip(sizes, sizes[1:], strict=False)):
        i = len(layers)
        layers.append({"type": "linear", "in": a, "out": b})
        tensors[f"layers.{i}.weight"] = torch.randn(b, a, generator=gen)
        tensors[f"layers.{i}.bias"] = torch.randn(b, generator=gen)
        if k == 0:
            layers.append({"type": "tanh"})
            if lstm:
                i = len(layers)
                layers.append({"type": "lstm", "in": b, "hidden": b})
                tensors.update({f"layers.{i}.{name}": torch.randn(*shape, generator=gen) for name, shape in (
                    ("weight_ih", (4 * b, b)), ("weight_hh", (4 * b, b)), ("bias_ih", (4 * b,)), ("bias_hh", (4 * b,)))})
    spec = NetworkSpec.model_validate({"layers": layers, "weights_sha256": "0" * 64,
                                       "action_distribution": {"type": "multi_categorical", "nvec": nvec}})
    return PolicyNetwork(spec, tensors)


@pytest.mark.parametrize(("agent", "codec", "history", "lstm"), [
    ("allocator", "need", 1, False), ("allocator", None, 3, False), ("allocator", "residual", 2, False),
    ("search", "bluff", 1, False), ("broker", "markup", 2, False), ("allocator", "need", 1, True)])
def test_a_learned_checkpoint_acts_as_a_batch_exactly_as_per_arena(tmp_path, agent, codec, history, lstm):
    """``lstm``: a recurrent network, each arena's state carried and cleared when that arena restarts."""
    config = load_scenario("crisis")
    episodes = record_episodes(config, episodes=4, seed=11)[agent]
    scale = np.maximum(np.abs(np.concatenate(episodes)).max(axis=0), 1.0).astype(np.float32)
    interface = ModuleInterface(config, agent, scale, codec, history)
    nvec = [int(n) for n in interface.action_space().nvec]
    save_policy(tmp_path, random_network(interface.input_size, nvec, seed=5, lstm=lstm), config, agent, scale, codec,
                history)
    name = f"learned:{tmp_path}"
    assert isinstance(batch_policy(name, config, agent, 3), BatchLearned)
    assert assert_equivalent(name, config, agent, episodes, num_envs=4, seed=2) > 20


@pytest.mark.parametrize("scenario", ["standard", "broad"])
def test_the_shipped_universal_allocator_acts_as_a_batch_exactly_as_per_arena(scenario):
    config = generate_scenarios("broad", 4, seed=9)[-1] if scenario == "broad" else load_scenario(scenario)
    episodes = record_episodes(config, episodes=4, seed=3)["allocator"]
    assert isinstance(batch_policy("learned:universal", config, "allocator", 2), BatchLearned)
    assert assert_equivalent("learned:universal", config, "allocator", episodes, num_envs=4, seed=1) > 20
