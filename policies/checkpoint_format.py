"""The data-only policy checkpoint: a JSON sidecar plus safetensors weights, nothing executable.

A learned policy on disk is two files in its checkpoint folder::

    arena_policy.json          what the policy is (format_version 2, below)
    arena_policy.safetensors   its weights: named float32 tensors, nothing else

Loading reads only these two. The sidecar is JSON (NaN/Infinity refused, every field typed
and bounded); the weights are safetensors, a format that holds tensors and a JSON header and
cannot carry code. The network is rebuilt here from the sidecar's ``network`` spec with plain
torch layers, so no class named by the file is ever imported or constructed. RLlib's own
checkpoint files (``*.pkl``, used by ``--resume``) may sit next to them; they are never read.

Sidecar fields (``format_version`` 2)::

    format, format_version       "commons_arena.policy", 2
    env                          "commons_arena_v0"
    agent, role                  the agent it was trained as and that agent's role
                                 (allocator / team / broker)
    scenario, scenario_hash      where it was trained (informative; fit is checked on spaces)
    observation_shape            the env observation shape of that agent
    action_nvec                  the env action space (MultiDiscrete nvec) of that agent
    observation_scale            the network sees observation / scale (one finite number in
                                 [1e-3, 1e12] per observation dimension)
    action_codec                 null (the network outputs the env action) or
                                 {"name": <policies.codecs.CODECS key>, "params": {}} (no
                                 codec takes parameters)
    history                      ticks of (scaled observation + codec features) the network
                                 sees, newest first (default 1; policies.learned.ModuleInterface)
    input_size                   the network's input width (default: the observation size;
                                 larger with codec features or history)
    network.layers               the forward pass, in order: {"type": "linear", "in": n,
                                 "out": m} (tensors ``layers.<i>.weight`` [m, n] and
                                 ``layers.<i>.bias`` [m]), {"type": "layer_norm", "size": n}
                                 (``layers.<i>.weight`` / ``.bias`` [n]), an activation
                                 {"type": "tanh" | "relu" | "elu" | "silu" | "sigmoid"} or
                                 {"type": "lstm", "in": n, "hidden": h}: one LSTM cell
                                 (torch's ``LSTMCell``: ``layers.<i>.weight_ih`` [4h, n],
                                 ``.weight_hh`` [4h, h], ``.bias_ih`` / ``.bias_hh`` [4h]; its
                                 output is h), whose state the network carries from one call
                                 to the next until ``reset()`` (zero at an episode's start)
    network.action_distribution  {"type": "multi_categorical", "nvec": [...]}: the last
                                 layer's outputs are the concatenated logits of each
                                 sub-space; the greedy action is the argmax of each
    network.weights_sha256       sha256 of the safetensors file
    universal                    absent/null, or a shape-free allocator (policies.universal):
                                 {"max_teams", "max_tiers", "features": "cells_v1" |
                                 "cells_v2", "cell_features": n}: the version of the cell
                                 features (policies.universal.CELL_VIEWS; v2 = v1 + the
                                 episode's memory of declarations; an unknown version is
                                 refused). The network is then one cell's policy
                                 (``input_size`` = n features, one sub-space: the cell's
                                 code), played on every (team, tier) cell of any scenario up
                                 to max_teams x max_tiers; ``observation_shape`` and
                                 ``action_nvec`` are the padded view's (cells x (n + 1), one
                                 code per cell) and ``observation_scale`` is empty (features
                                 are normalised by the scenario's public parameters)

Extending it (a new layer type, a recurrent layer, another distribution): add an entry to
:data:`LAYER_TYPES` or :data:`DISTRIBUTIONS` and to the docs. A reader that does not know a
type refuses the file with a message naming it, so old readers fail clearly on new files;
bump ``format_version`` only when a field an old reader *does* know changes meaning.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from commons_arena.errors import format_validation_error, one_line
from commons_arena.files import make_folder, write_file
from commons_arena.inputs import InputError, loads_json, read_bytes

SIDECAR = "arena_policy.json"
WEIGHTS = "arena_policy.safetensors"
FORMAT = "commons_arena.policy"
FORMAT_VERSION = 2
CONVERT_COMMAND = "commons-arena convert-checkpoint {dir} --i-trust-this-checkpoint"

# Bounds on what a sidecar may ask for, so a crafted one cannot exhaust memory.
MAX_SIDECAR_BYTES = 16 * 2**20
MAX_LAYER_WIDTH = 65_536
MAX_PARAMETERS = 64 * 2**20  # float32: 256 MiB
MAX_LAYERS = 64
# observation_scale entries: training writes max(|observation|, 1), and observations are at most the
# scenarios' MAX_AMOUNT (1e9); outside these, observation / scale overflows or underflows float32
MIN_SCALE, MAX_SCALE = 1e-3, 1e12

Width = Annotated[int, Field(ge=1, le=MAX_LAYER_WIDTH)]


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded as a data-only policy (message says why)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class Linear(_Strict):
    type: Literal["linear"]
    in_: Width = Field(alias="in")
    out: Width

    model_config = ConfigDict(populate_by_name=True)  # merged with _Strict's


class LayerNorm(_Strict):
    type: Literal["layer_norm"]
    size: Width
    eps: float = Field(default=1e-5, gt=0, le=1)


class Activation(_Strict):
    type: Literal["tanh", "relu", "elu", "silu", "sigmoid"]


class Lstm(_Strict):
    type: Literal["lstm"]
    in_: Width = Field(alias="in")
    hidden: Width

    model_config = ConfigDict(populate_by_name=True)  # merged with _Strict's


Layer = Annotated[Linear | LayerNorm | Activation | Lstm, Field(discriminator="type")]


class MultiCategorical(_Strict):
    type: Literal["multi_categorical"]
    nvec: list[Width] = Field(min_length=1, max_length=MAX_LAYER_WIDTH)


class NetworkSpec(_Strict):
    layers: list[Layer] = Field(min_length=1, max_length=MAX_LAYERS)
    action_distribution: Annotated[MultiCategorical, Field(discriminator="type")]
    weights_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class CodecSpec(_Strict):
    name: str = Field(min_length=1, max_length=100)
    # no codec takes parameters: a sidecar that gives some is refused here, not by a TypeError at load
    params: dict[str, int | float | str | bool] = Field(default_factory=dict, max_length=0)


class Universal(_Strict):
    """A shape-free allocator's padded cell view (policies.universal)."""

    max_teams: Annotated[int, Field(ge=2, le=64)]
    max_tiers: Annotated[int, Field(ge=1, le=64)]
    features: Literal["cells_v1", "cells_v2"]  # policies.universal.CELL_VIEWS (tests/policies/test_universal.py checks)
    cell_features: Width


class Sidecar(_Strict):
    format: Literal["commons_arena.policy"]
    format_version: Literal[2]
    env: Literal["commons_arena_v0"]
    agent: str = Field(min_length=1, max_length=200)
    role: Literal["allocator", "team", "broker"]
    scenario: str = Field(max_length=500)
    scenario_hash: str = Field(max_length=200)
    observation_shape: list[Width] = Field(min_length=1, max_length=1)
    action_nvec: list[Annotated[int, Field(ge=1, le=2**62)]] = Field(min_length=1, max_length=MAX_LAYER_WIDTH)
    observation_scale: list[Annotated[float, Field(ge=MIN_SCALE, le=MAX_SCALE, allow_inf_nan=False)]] = Field(
        max_length=MAX_LAYER_WIDTH)
    action_codec: CodecSpec | None
    history: Annotated[int, Field(ge=1, le=64)] = 1
    input_size: Width | None = None
    network: NetworkSpec
    universal: Universal | None = None

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True), indent=1)


# ---------------------------------------------------------------------- reading


def read_sidecar_model(checkpoint: str | Path) -> Sidecar:
    """The validated sidecar of ``checkpoint``; :class:`CheckpointError` naming the problem otherwise.

    A sidecar of the old format (no ``format_version``: the weights were only in RLlib's
    pickles) is refused with the command that converts a checkpoint one trusts.
    """
    path = Path(checkpoint) / SIDECAR
    if not path.is_file():
        raise CheckpointError(
            f"{checkpoint} is not a commons_arena policy checkpoint: {SIDECAR} is missing "
            "(checkpoints written by `commons-arena train` have it)"
        )
    if path.stat().st_size > MAX_SIDECAR_BYTES:
        raise CheckpointError(f"{path} is larger than {MAX_SIDECAR_BYTES // 2**20} MiB: not a policy sidecar")
    try:  # the one strict, depth-limited JSON reader; a checkpoint is rewritten by training, so not remembered
        raw = loads_json(read_bytes(path, "sidecar", MAX_SIDECAR_BYTES, own=True), str(path))
    except InputError as exc:
        raise CheckpointError(f"{path}: {exc.reason}") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    version = raw.get("format_version")
    if version is None:
        raise CheckpointError(
            f"{checkpoint} is an old pickled checkpoint (its weights are only in RLlib's pickle files, and loading "
            "those can run code). If you trust it (you trained it yourself), convert it once with: "
            + CONVERT_COMMAND.format(dir=checkpoint)
        )
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format_version {version!r}; this commons_arena reads format_version {FORMAT_VERSION}"
        )
    try:
        sidecar = Sidecar.model_validate(raw)
    except ValidationError as exc:
        raise CheckpointError(f"{path} is invalid: {format_validation_error(exc)}") from None
    _check_consistent(sidecar, path)
    return sidecar


def _check_consistent(sidecar: Sidecar, path: Path) -> None:
    """The layers chain, their sizes match the observation and the distribution, and the
    parameter count is bounded."""
    obs_size = sidecar.observation_shape[0]
    if sidecar.universal is not None:
        _check_universal(sidecar, path)
    elif len(sidecar.observation_scale) != obs_size:
        raise CheckpointError(
            f"{path}: observation_scale has {len(sidecar.observation_scale)} entries for observation size {obs_size}"
        )
    width, parameters = sidecar.input_size or obs_size, 0
    for i, layer in enumerate(sidecar.network.layers):
        if isinstance(layer, Linear):
            if layer.in_ != width:
                raise CheckpointError(f"{path}: network layer {i} takes {layer.in_} inputs but receives {width}")
            parameters += layer.out * (layer.in_ + 1)
            width = layer.out
        elif isinstance(layer, LayerNorm):
            if layer.size != width:
                raise CheckpointError(f"{path}: network layer {i} normalises {layer.size} values but receives {width}")
            parameters += 2 * width
        elif isinstance(layer, Lstm):
            if layer.in_ != width:
                raise CheckpointError(f"{path}: network layer {i} takes {layer.in_} inputs but receives {width}")
            parameters += 4 * layer.hidden * (layer.in_ + layer.hidden + 2)
            width = layer.hidden
        if parameters > MAX_PARAMETERS:
            raise CheckpointError(f"{path}: the network has more than {MAX_PARAMETERS} parameters")
    logits = sum(sidecar.network.action_distribution.nvec)
    if width != logits:
        raise CheckpointError(
            f"{path}: the network outputs {width} values but its action distribution needs {logits} logits"
        )


def _check_universal(sidecar: Sidecar, path: Path) -> None:
    """A shape-free allocator's sidecar: one cell's network behind the padded view."""
    u = sidecar.universal
    assert u is not None
    cells = u.max_teams * u.max_tiers
    problems = []
    if sidecar.role != "allocator":
        problems.append(f"role {sidecar.role!r} (only the allocator is shape-free)")
    if sidecar.observation_shape != [cells * (u.cell_features + 1)]:
        problems.append(f"observation_shape {sidecar.observation_shape} is not the padded view's [{cells * (u.cell_features + 1)}]")
    if sidecar.observation_scale:
        problems.append("observation_scale must be empty (cell features need no fitted scale)")
    if any(isinstance(layer, Lstm) for layer in sidecar.network.layers):
        problems.append("a per-cell network has no recurrent layer")
    if sidecar.input_size != u.cell_features:
        problems.append(f"input_size {sidecar.input_size} is not cell_features {u.cell_features}")
    if len(sidecar.network.action_distribution.nvec) != 1 or len(sidecar.action_nvec) != cells or \
            set(sidecar.action_nvec) != set(sidecar.network.action_distribution.nvec):
        problems.append("the network must output one cell's code and action_nvec one such code per padded cell")
    if problems:
        raise CheckpointError(f"{path}: invalid universal allocator: " + "; ".join(problems))


def expected_tensors(spec: NetworkSpec) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape the weights file must hold, for ``spec``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for i, layer in enumerate(spec.layers):
        if isinstance(layer, Linear):
            shapes[f"layers.{i}.weight"] = (layer.out, layer.in_)
            shapes[f"layers.{i}.bias"] = (layer.out,)
        elif isinstance(layer, LayerNorm):
            shapes[f"layers.{i}.weight"] = (layer.size,)
            shapes[f"layers.{i}.bias"] = (layer.size,)
        elif isinstance(layer, Lstm):
            gates = 4 * layer.hidden
            shapes.update({f"layers.{i}.weight_ih": (gates, layer.in_), f"layers.{i}.weight_hh": (gates, layer.hidden),
                           f"layers.{i}.bias_ih": (gates,), f"layers.{i}.bias_hh": (gates,)})
    return shapes


def read_weights(checkpoint: str | Path, sidecar: Sidecar) -> dict[str, Any]:
    """The weights of ``checkpoint`` as torch tensors, checked against the sidecar's spec."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(checkpoint) / WEIGHTS
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} has no weights file {WEIGHTS}")
    shapes = expected_tensors(sidecar.network)
    limit = 4 * sum(math.prod(s) for s in shapes.values()) + 2**20  # tensors + a generous header
    if path.stat().st_size > limit:
        raise CheckpointError(f"{path} is larger than its network needs ({path.stat().st_size} > {limit} bytes)")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sidecar.network.weights_sha256:
        raise CheckpointError(f"{path} does not match the weights_sha256 recorded in {SIDECAR}")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a safetensors file: {one_line(exc)}") from None
    import torch

    missing = sorted(set(shapes) - set(tensors))
    extra = sorted(set(tensors) - set(shapes))
    if missing or extra:
        raise CheckpointError(f"{path}: tensors missing {missing}, unexpected {extra}")
    for name, shape in shapes.items():
        tensor = tensors[name]
        if tensor.dtype != torch.float32 or tuple(tensor.shape) != shape:
            raise CheckpointError(
                f"{path}: tensor {name} is {tensor.dtype} {tuple(tensor.shape)}, expected float32 {shape}"
            )
        if not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{path}: tensor {name} holds NaN or infinite values")
    return tensors


# --------------------------------------------------------------------- the network


def _activation(name: str) -> Callable[[], Any]:
    import torch.nn as nn

    return {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU, "sigmoid": nn.Sigmoid}[name]


def _build_layer(layer: Linear | LayerNorm | Activation | Lstm) -> Any:
    import torch.nn as nn

    if isinstance(layer, Linear):
        return nn.Linear(layer.in_, layer.out)
    if isinstance(layer, Lstm):
        return nn.LSTMCell(layer.in_, layer.hidden)
    if isinstance(layer, LayerNorm):
        return nn.LayerNorm(layer.size, eps=layer.eps)
    return _activation(layer.type)()


# Layer type -> builder of the torch module for it (the spec's ``type`` field).
LAYER_TYPES: dict[str, Callable[[Any], Any]] = {
    name: _build_layer for name in ("linear", "layer_norm", "tanh", "relu", "elu", "silu", "sigmoid", "lstm")
}


def _greedy_multi_categorical(logits: Any, nvec: list[int]) -> Any:
    import torch

    return torch.stack([part.argmax(dim=-1) for part in torch.split(logits, nvec, dim=-1)], dim=-1)


# Distribution type -> greedy action from the network's outputs.
DISTRIBUTIONS: dict[str, Callable[[Any, list[int]], Any]] = {"multi_categorical": _greedy_multi_categorical}


class PolicyNetwork:
    """The torch network a sidecar describes, with its weights: ``greedy(obs)`` -> action.

    Built only from :class:`NetworkSpec` and named tensors; holds no reference to the class
    that trained it. A network with an ``lstm`` layer is recurrent: each call steps every row's
    state (one row per arena, the same rows every call) until :meth:`reset` clears it.
    """

    def __init__(self, spec: NetworkSpec, tensors: dict[str, Any]) -> None:
        import torch

        self.spec = spec
        # tensors are named "layers.<i>.<param>": the sequence sits under the key "layers"
        self._root = torch.nn.ModuleDict({"layers": torch.nn.Sequential(*(LAYER_TYPES[x.type](x) for x in spec.layers))})
        self._root.load_state_dict(tensors, strict=True)
        self._root.eval()
        self.net = self._root["layers"]
        self.nvec = list(spec.action_distribution.nvec)
        self._greedy = DISTRIBUTIONS[spec.action_distribution.type]
        self.recurrent = any(isinstance(x, Lstm) for x in spec.layers)
        self._state: dict[int, tuple[Any, Any]] = {}  # a recurrent layer's (h, c), one row per arena

    @property
    def input_size(self) -> int:
        first = self.spec.layers[0]
        return first.size if isinstance(first, LayerNorm) else first.in_ if isinstance(first, Linear | Lstm) else -1

    def _forward(self, x: Any) -> Any:
        if not self.recurrent:
            return self.net(x)
        rows = {len(h) for h, _ in self._state.values()}
        if rows and rows != {len(x)}:
            raise ValueError(f"a recurrent network carries the state of {rows.pop()} rows; it was called with "
                             f"{len(x)} (reset() it before another batch of arenas)")
        for i, (layer, kind) in enumerate(zip(self.net.children(), self.spec.layers, strict=True)):
            if isinstance(kind, Lstm):
                self._state[i] = layer(x, self._state.get(i))
                x = self._state[i][0]
            else:
                x = layer(x)
        return x

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The network's outputs for ``(B, input_size)`` rows (a recurrent network steps their state)."""
        import torch

        with torch.no_grad():
            return self._forward(torch.from_numpy(np.asarray(obs, dtype=np.float32))).numpy()

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        """Greedy action for one (scaled) observation, int64."""
        obs = np.asarray(obs, dtype=np.float32)
        if obs.shape != (self.input_size,):
            raise ValueError(f"observation shape mismatch: network expects ({self.input_size},), got {obs.shape}")
        return self.greedy_rows(obs[None])[0]

    def greedy_rows(self, obs: np.ndarray) -> np.ndarray:
        """Greedy actions ``(B, k)`` int64 for ``(B, input_size)`` (scaled) observations, one forward pass."""
        import torch

        with torch.no_grad():
            out = self._forward(torch.from_numpy(np.asarray(obs, dtype=np.float32)))
            return self._greedy(out, self.nvec).numpy().astype(np.int64)

    def reset(self, rows: np.ndarray | None = None) -> None:
        """Clear a recurrent network's state (``rows``: only theirs, the arenas starting an episode)."""
        if rows is None:
            self._state = {}
        else:
            for h, c in self._state.values():
                h[rows], c[rows] = 0.0, 0.0

    def tensors(self) -> dict[str, Any]:
        return {k: v.detach().contiguous() for k, v in self._root.state_dict().items()}


def load_network(checkpoint: str | Path) -> tuple[Sidecar, PolicyNetwork]:
    """Sidecar and network of a data-only checkpoint. Reads two files; never unpickles."""
    sidecar = read_sidecar_model(checkpoint)
    return sidecar, PolicyNetwork(sidecar.network, read_weights(checkpoint, sidecar))


def write_checkpoint(checkpoint: str | Path, sidecar_fields: dict[str, Any], network: PolicyNetwork) -> Path:
    """Write ``arena_policy.safetensors`` and ``arena_policy.json`` into ``checkpoint``.

    ``sidecar_fields``: every sidecar field but ``format``, ``format_version`` and ``network``.
    The result is read back and checked before this returns.
    """
    from safetensors.torch import save

    folder = make_folder(Path(checkpoint))
    weights = save(network.tensors())
    write_file(folder / WEIGHTS, weights)
    digest = hashlib.sha256(weights).hexdigest()
    spec = network.spec.model_copy(update={"weights_sha256": digest})
    sidecar = Sidecar.model_validate(
        {"format": FORMAT, "format_version": FORMAT_VERSION, **sidecar_fields,
         "network": spec.model_dump(by_alias=True)}
    )
    write_file(folder / SIDECAR, sidecar.to_json())
    read_weights(folder, read_sidecar_model(folder))
    return folder / SIDECAR
