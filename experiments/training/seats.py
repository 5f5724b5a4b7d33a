"""Which seats learn, and which RLlib module plays each learning seat.

A training run names its learners by seat or role (``allocator``, ``broker``, ``team`` for
every team, or a team's name) and how teams share modules:

* ``shared``: one module ``team`` plays every learning team seat; each seat's observation
  gets its team's identity appended (a one-hot over the scenario's teams, by the seat's
  ``policies.learned.ModuleInterface``, from the env-config key ``seat_identity``), so one network
  can still act differently per team;
* ``per_team``: one module per team seat, named after it.

The allocator and the broker always get their own module, named after the seat. Seats that
do not learn are background (``policies.focal``): scripted policies or frozen checkpoints
from a roster, playing inside the env.

A module's observation scale (the network sees ``observation / scale``) is fitted on the
observations of all the seats it plays. For export, a shared team module is written as one
ordinary single-seat policy per team seat: a one-hot identity only adds a column of the
first layer's weights to its bias, so :func:`fold_identity` bakes it in exactly and
``learned:<dir>`` needs nothing new to read it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import role_of

TeamModules = Literal["shared", "per_team"]
SHARED_TEAM_MODULE = "team"
ROLE_WORDS = ("allocator", "broker", "team")


@dataclass(frozen=True)
class SeatPlan:
    """Learning seats (env order) and the module of each; see the module docstring."""

    module_of: Mapping[str, str]  # learning seat -> module id
    identity: Mapping[str, tuple[int, int]]  # seat -> (index, size) of its appended one-hot
    roles: Mapping[str, str]  # module id -> role

    @classmethod
    def build(cls, config: ScenarioConfig, learners: Sequence[str], team_modules: TeamModules = "shared") -> SeatPlan:
        seats = list(config.agents)
        teams = list(config.team_names)
        wanted: set[str] = set()
        for name in learners:
            if name == "team":
                wanted.update(teams)
            elif name in seats:
                wanted.add(name)
            else:
                raise ValueError(
                    f"unknown learner {name!r} for scenario {config.name!r}: name a seat {seats} or a role "
                    f"{list(ROLE_WORDS)} ('team' means every team)"
                )
        if not wanted:
            raise ValueError("no learning seats: name at least one with --learners")
        if team_modules not in ("shared", "per_team"):
            raise ValueError(f"team_modules must be 'shared' or 'per_team', got {team_modules!r}")
        module_of: dict[str, str] = {}
        identity: dict[str, tuple[int, int]] = {}
        roles: dict[str, str] = {}
        for seat in seats:
            if seat not in wanted:
                continue
            role = role_of(config, seat)
            module = SHARED_TEAM_MODULE if role == "team" and team_modules == "shared" else seat
            if module == SHARED_TEAM_MODULE:
                identity[seat] = (teams.index(seat), len(teams))
            module_of[seat] = module
            roles[module] = role
        return cls(module_of, identity, roles)

    @classmethod
    def single(cls, seat: str) -> SeatPlan:
        """One seat learning through a module named after it (the allocator-only runs)."""
        return cls({seat: seat}, {}, {seat: seat if seat in ("allocator", "broker") else "team"})

    @property
    def seats(self) -> list[str]:
        return list(self.module_of)

    @property
    def modules(self) -> dict[str, list[str]]:
        """Module id -> the seats it plays (env order)."""
        out: dict[str, list[str]] = {}
        for seat, module in self.module_of.items():
            out.setdefault(module, []).append(seat)
        return out

    def describe(self) -> str:
        return ", ".join(f"{m} ({'+'.join(s)})" for m, s in self.modules.items())

    def mapping_fn(self) -> Any:
        """A picklable ``policy_mapping_fn``: learning seats to their module, others to themselves."""
        return functools.partial(module_for_seat, dict(self.module_of))


ALL_ROLES = ("allocator", "team", "broker")


def module_for_seat(module_of: Mapping[str, str], agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
    return module_of.get(str(agent_id), str(agent_id))


def module_scales(plan: SeatPlan, samples: Mapping[str, np.ndarray], scale_fn: Any) -> dict[str, np.ndarray]:
    """Seat -> observation scale, fitted per module on the observations of all its seats."""
    out: dict[str, np.ndarray] = {}
    for seats in plan.modules.values():
        scale = scale_fn(np.concatenate([samples[s] for s in seats]))
        out.update(dict.fromkeys(seats, scale))
    return out


def exact_scale(scale: np.ndarray) -> np.ndarray:
    """``scale`` rounded up to powers of two: dividing and multiplying back is then exact,
    so scripted members recover the raw observation bit for bit."""
    return np.exp2(np.ceil(np.log2(np.maximum(np.asarray(scale, np.float64), 1.0)))).astype(np.float32)


def fold_identity(network: Any, identity: tuple[int, int]) -> Any:
    """The network of a shared module, specialised to one seat: the identity input removed.

    The first layer is linear, ``W [x; e_i] + b = W_x x + (W_e[:, i] + b)``: the same logits
    for every observation, from an ordinary network over the seat's own observation.
    """
    from policies.checkpoint_format import Linear, PolicyNetwork

    first = network.spec.layers[0]
    if not isinstance(first, Linear):
        raise ValueError("a shared team module must start with a linear layer to specialise it per team")
    index, size = identity
    tensors = network.tensors()
    weight, bias = tensors["layers.0.weight"], tensors["layers.0.bias"]
    width = first.in_ - size
    tensors["layers.0.weight"] = weight[:, :width].contiguous()
    tensors["layers.0.bias"] = (bias + weight[:, width + index]).contiguous()
    layers = [first.model_copy(update={"in_": width}), *network.spec.layers[1:]]
    return PolicyNetwork(network.spec.model_copy(update={"layers": layers}), tensors)


__all__ = ["SHARED_TEAM_MODULE", "SeatPlan", "TeamModules", "exact_scale", "fold_identity", "module_scales"]
