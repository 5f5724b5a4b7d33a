"""RLlib modules read as plain networks: the only place outside training's RLlib code that
touches an ``RLModule`` (``policies/`` never imports RLlib). RLlib and torch are imported
inside the functions, so importing this module stays cheap.

* :func:`network_from_rl_module` — a default MLP or one-layer LSTM module's greedy actor copied
  into the data-only :class:`~policies.checkpoint_format.PolicyNetwork` a checkpoint stores;
* :func:`module_action` — a module's own greedy action (state carried), what a copy is held to, and
  :func:`recurrent_start`, a recurrent module's state for a batch of sequences;
* :func:`convert_pickled_checkpoint` — ``commons-arena convert-checkpoint``: an old pickled
  checkpoint given the data-only files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.errors import one_line
from commons_arena.inputs import load_json_object
from policies.checkpoint_format import CheckpointError, NetworkSpec, PolicyNetwork, write_checkpoint
from policies.learned import SIDECAR, module_dir


def network_from_rl_module(module: Any, nvec: list[int]) -> PolicyNetwork:
    """The greedy actor of an RLlib default (PPO/APPO) torch module as a :class:`PolicyNetwork`.

    Walks the actor's MLP encoder (or an LSTM encoder's tokenizer MLP and its one-layer LSTM) and
    the policy head (``torch.nn.Sequential`` of Linear, LayerNorm and activations) and refuses
    anything else. The copy is checked: its logits must equal the module's own
    ``forward_inference`` output on random observations (a recurrent one's over three steps).
    """
    import torch
    import torch.nn as nn
    from ray.rllib.core.columns import Columns

    encoder = getattr(module, "encoder", None)
    actor = getattr(encoder, "actor_encoder", encoder)
    lstm = getattr(actor, "lstm", None)  # RLlib's LSTM encoder: its tokenizer MLP, then the LSTM
    pi = getattr(module, "pi", None)
    parts = [getattr(getattr(part, "net", None), "mlp", None)
             for part in ((getattr(actor, "tokenizer", None), pi) if lstm is not None else (actor, pi))]
    if not all(isinstance(p, nn.Sequential) for p in parts) or (
            lstm is not None and not (isinstance(lstm, nn.LSTM) and lstm.num_layers == 1 and lstm.bias
                                      and not lstm.bidirectional and not lstm.proj_size and lstm.batch_first)):
        raise CheckpointError(f"cannot export {type(module).__name__}: only RLlib's default MLP and one-layer LSTM "
                              f"modules (encoder + pi head) are supported")
    children = [*parts[0], *([lstm] if lstm is not None else []), *parts[1]]  # type: ignore[misc]
    layers: list[dict[str, Any]] = []
    tensors: dict[str, Any] = {}
    activations = {nn.Tanh: "tanh", nn.ReLU: "relu", nn.ELU: "elu", nn.SiLU: "silu", nn.Sigmoid: "sigmoid"}
    for child in children:
        i = len(layers)
        if isinstance(child, nn.LSTM):  # one layer: torch's LSTMCell weights under the cell's names
            layers.append({"type": "lstm", "in": child.input_size, "hidden": child.hidden_size})
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                tensors[f"layers.{i}.{name}"] = getattr(child, f"{name}_l0")
        elif isinstance(child, nn.Linear):
            layers.append({"type": "linear", "in": child.in_features, "out": child.out_features})
            tensors[f"layers.{i}.weight"], tensors[f"layers.{i}.bias"] = child.weight, child.bias
        elif isinstance(child, nn.LayerNorm) and len(child.normalized_shape) == 1:
            layers.append({"type": "layer_norm", "size": child.normalized_shape[0], "eps": float(child.eps)})
            tensors[f"layers.{i}.weight"], tensors[f"layers.{i}.bias"] = child.weight, child.bias
        elif type(child) in activations:
            layers.append({"type": activations[type(child)]})
        else:
            raise CheckpointError(f"cannot export layer {type(child).__name__} of {type(module).__name__}")
    spec = NetworkSpec.model_validate(
        {"layers": layers, "action_distribution": {"type": "multi_categorical", "nvec": [int(n) for n in nvec]},
         "weights_sha256": "0" * 64}
    )
    network = PolicyNetwork(spec, {k: v.detach().clone().float() for k, v in tensors.items()})
    # the copy's check: the same logits on random observations (a recurrent one over three steps of its state)
    probes = np.random.default_rng(0).normal(size=(3 if network.recurrent else 1, 8, network.input_size))
    state = recurrent_start(module, len(probes[0])) if network.recurrent else None
    for probe in probes.astype(np.float32):
        with torch.no_grad():
            if state is None:
                theirs = module.forward_inference({Columns.OBS: torch.from_numpy(probe)})[Columns.ACTION_DIST_INPUTS]
            else:
                out = module.forward_inference({Columns.OBS: torch.from_numpy(probe[:, None]), Columns.STATE_IN: state})
                theirs, state = out[Columns.ACTION_DIST_INPUTS][:, 0], out[Columns.STATE_OUT]
        if not np.allclose(network.logits(probe), theirs.numpy(), atol=1e-5, rtol=1e-5):
            raise CheckpointError(f"exporting {type(module).__name__} changed its outputs: unsupported module layout")
    network.reset()
    return network


def recurrent_start(module: Any, rows: int) -> Any:
    """A recurrent module's initial state for ``rows`` sequences (its tree of tensors, each ``[rows, ...]``)."""
    import torch

    return torch.utils._pytree.tree_map(lambda s: s[None].repeat(rows, *([1] * s.ndim)), module.get_initial_state())


def module_action(module: Any, obs: np.ndarray, state: Any = None) -> Any:
    """Greedy action of an RLModule for one observation, as an int64 array (MultiDiscrete).

    Default RLlib modules return only ``ACTION_DIST_INPUTS`` (concatenated logits of all
    sub-spaces) from ``forward_inference``; the module's own inference distribution turns
    them into the per-sub-space argmax. Modules that return ``ACTIONS`` are used as-is.
    A recurrent module (``use_lstm``) takes and returns its ``state`` (``None``: the
    initial state); it is then called with a batch of one sequence of one step, and the
    result is ``(action, state)``.
    """
    import torch
    from ray.rllib.core.columns import Columns

    obs = np.asarray(obs, dtype=np.float32)
    expected = getattr(module.observation_space, "shape", None)
    if obs.shape != expected:
        raise ValueError(f"observation shape mismatch: module expects {expected}, got {obs.shape}")
    stateful = module.is_stateful()
    with torch.no_grad():
        if stateful:
            if state is None:
                state = recurrent_start(module, 1)
            batch = {Columns.OBS: torch.from_numpy(obs[None, None]), Columns.STATE_IN: state}
        else:
            batch = {Columns.OBS: torch.from_numpy(obs[None])}
        out = module.forward_inference(batch)
        if Columns.ACTIONS in out:
            action = out[Columns.ACTIONS]
        else:
            logits = out[Columns.ACTION_DIST_INPUTS]
            dist = module.get_inference_action_dist_cls().from_logits(logits.reshape(1, -1))
            action = dist.to_deterministic().sample()
    action = action.cpu().numpy() if isinstance(action, torch.Tensor) else np.asarray(action)
    action = action.reshape(1, -1)[0].astype(np.int64)
    return (action, out[Columns.STATE_OUT]) if stateful else action


def convert_pickled_checkpoint(checkpoint: str | Path) -> Path:
    """Write the data-only files for an old (format 1) checkpoint, from its RLlib pickles.

    This UNPICKLES the checkpoint's module files, which can run any code they contain: call it
    only on a checkpoint you trust (one you trained). ``commons-arena convert-checkpoint DIR
    --i-trust-this-checkpoint`` is the command-line form. The old files stay; ``learned:``
    reads only the new ones from then on.
    """
    checkpoint = Path(checkpoint).resolve()  # RLlib reads checkpoints as URIs: relative paths fail
    path = checkpoint / SIDECAR
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} has no {SIDECAR}: not a commons_arena checkpoint")
    try:  # the sidecar is checked (type, size, depth, fields) before anything is unpickled
        old = load_json_object(path, "sidecar", own=True)  # converted in place, on purpose: not an input kept
        old_format = "format_version" not in old
        fields = {k: old[k] for k in ("agent", "scenario", "scenario_hash", "observation_shape", "action_nvec",
                                      "observation_scale")} if old_format else {}
    except (ValueError, KeyError) as exc:
        raise CheckpointError(f"{path} is not a format-1 sidecar: {one_line(exc)}") from None
    if not old_format:
        raise CheckpointError(f"{checkpoint} is already in the data-only format (format_version "
                              f"{old.get('format_version')!r:.40})")
    agent, codec, history = fields["agent"], old.get("action_codec"), old.get("history", 1)
    if not isinstance(agent, str) or not agent.isidentifier():
        raise CheckpointError(f"{path}: agent must be an agent's name, got {agent!r:.60}")
    if codec is not None and not isinstance(codec, str):
        raise CheckpointError(f"{path}: action_codec must be a codec's name, got {codec!r:.60}")
    if isinstance(history, bool) or not isinstance(history, int) or not 1 <= history <= 64:
        raise CheckpointError(f"{path}: history must be an integer in [1, 64], got {history!r:.60}")
    from ray.rllib.core.rl_module.rl_module import RLModule

    source = module_dir(checkpoint, fields["agent"])
    if not source.is_dir():
        raise CheckpointError(f"checkpoint {checkpoint} has no module {fields['agent']!r} (looked in {source})")
    module: Any = RLModule.from_checkpoint(source)  # a torch module (eval(), a MultiDiscrete action space)
    module.eval()
    network = network_from_rl_module(module, [int(n) for n in module.action_space.nvec])
    fields |= {
        "env": "commons_arena_v0",
        "role": fields["agent"] if fields["agent"] in ("allocator", "broker") else "team",
        "action_codec": {"name": codec, "params": {}} if codec else None,
        "history": history,
        "input_size": network.input_size,  # codec features and history widen it past the observation
    }
    return write_checkpoint(checkpoint, fields, network)


__all__ = ["convert_pickled_checkpoint", "recurrent_start", "module_action", "network_from_rl_module"]
