"""Every scripted policy by name: ``make_policy(name, config, agent, env=None, **params)``.

=================  =========  ===================================================
name               role       module
=================  =========  ===================================================
safety_first,      team       :mod:`policies.teams` (bluff factor, escalation
growth,                       threshold per archetype)
reliability,
truthful,
greedy_bluffer
demand_priced,     broker     :mod:`policies.brokers`
fixed_price
random,            allocator  :mod:`policies.allocators` (observation only)
equal_split,
proportional,
fifo, edf,
best_fit,
max_min_fair, drf
planner            allocator  :mod:`policies.planner` (observation + public
                              scenario parameters; estimates each team's
                              inflation from its history)
credit,            allocator  :mod:`policies.mechanisms`: the reference
uniform_rule,                 mechanisms of the literature (karma credits,
fair_planner                  Sprumont's uniform rule, ``planner`` with a
                              headroom that is a share of the deflated need)
oracle             allocator  :mod:`policies.oracle` (reads ``env.hidden_state()``;
                              needs ``env=``)
learned:<ckpt>     as trained :mod:`policies.learned` (a checkpoint of
                              ``commons-arena train``; no Ray needed). A
                              multi-seat run's checkpoint is a policy set
                              (:mod:`policies.policy_set`): every role it holds
fixed:<codec>:<c>  the        :class:`policies.codecs.CodedPolicy`: one fixed code
                   codec's    of a codec every tick, e.g. ``fixed:bluff:5,3``
                              (factor x1.5, escalate_2) or ``fixed:markup:...``;
                              the benchmark's high anchor of a team / broker seat
=================  =========  ===================================================

``batch_policy(name, config, agent, num_envs, **params)`` is the same policy in ``num_envs``
arenas at once (:mod:`policies.batch`): its batched form where :data:`BATCHED` has one, else a loop.

``params`` are the policy's keyword parameters (e.g. ``bluff=1.3`` for a team,
``level=4`` for ``fixed_price``, ``pacing=1.0`` for an allocator baseline); unknown
parameters raise ``ValueError`` naming the accepted ones.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commons_arena import scenario as scenario_module
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import role_of
from policies.allocators import SCRIPTED_ALLOCATORS, per_arena
from policies.base import Policy
from policies.batch import BatchPolicy, LoopBatchPolicy, OneArena, batch_of
from policies.brokers import BROKERS
from policies.mechanisms import REFERENCE_MECHANISMS
from policies.oracle import OracleAllocator, make_oracle
from policies.planner import BatchPlanner
from policies.teams import ARCHETYPE_PROFILES, make_team_factory

ROLES = ("allocator", "team", "broker")


@dataclass(frozen=True)
class PolicySpec:
    name: str
    role: str
    factory: Callable[..., Policy]
    params: tuple[str, ...]  # accepted keyword parameters
    needs_env: bool = False
    privileged: bool = False  # reads hidden state
    other_roles: tuple[str, ...] = ()  # a learned policy set plays several roles

    def plays(self, role: str) -> bool:
        return role == self.role or role in self.other_roles

    @property
    def roles(self) -> tuple[str, ...]:
        return (self.role, *self.other_roles)


def _params_of(
    cls: Callable[..., Any], skip: tuple[str, ...] = ("self", "config", "agent", "seed", "env", "num_envs")
) -> tuple[str, ...]:
    return tuple(p for p in inspect.signature(cls).parameters if p not in skip)


_REGISTRY: dict[str, PolicySpec] = {}


def register(spec: PolicySpec) -> None:
    if spec.role not in ROLES:
        raise ValueError(f"unknown role {spec.role!r}; roles are {ROLES}")
    if spec.name in _REGISTRY:
        raise ValueError(f"policy {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec


for _archetype in ARCHETYPE_PROFILES:
    register(PolicySpec(_archetype, "team", make_team_factory(_archetype), ("bluff", "escalate_after")))
for _broker in BROKERS:
    register(PolicySpec(_broker.name, "broker", OneArena.maker(_broker), _params_of(_broker)))
for _name, _allocator in SCRIPTED_ALLOCATORS.items():
    register(PolicySpec(_name, "allocator", per_arena(_allocator), _params_of(_allocator)))
register(PolicySpec(BatchPlanner.name, "allocator", per_arena(BatchPlanner), _params_of(BatchPlanner)))
for _name, _mechanism in REFERENCE_MECHANISMS.items():
    register(PolicySpec(_name, "allocator", per_arena(_mechanism), _params_of(_mechanism)))
register(PolicySpec("oracle", "allocator", make_oracle, _params_of(OracleAllocator), needs_env=True, privileged=True))


def available_policies(role: str | None = None) -> list[str]:
    """Registered policy names, all or those of one role (``allocator``, ``team``, ``broker``)."""
    if role is not None and role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {list(ROLES)}")
    return [name for name, spec in _REGISTRY.items() if role is None or spec.role == role]


def _learned_spec(name: str) -> PolicySpec:
    from policies.checkpoint_format import CheckpointError
    from policies.learned import LEARNED_PREFIX, LearnedPolicy, read_sidecar
    from policies.policy_set import is_policy_set, member_for, set_roles
    from policies.shipping import local_path, shipped_checkpoint, shipped_checkpoints

    # sent to this node as bytes, a checkpoint shipped with the package (learned:universal), or as written
    checkpoint = local_path(name.removeprefix(LEARNED_PREFIX))
    if not Path(checkpoint).exists():
        base = Path(checkpoint).name
        hint = (f"; the package ships {base!r}: write learned:{base} to play it from any folder"
                if shipped_checkpoint(base) is not None else
                f"; checkpoints shipped with the package: {', '.join(shipped_checkpoints()) or 'none'}")
        raise CheckpointError(f"{checkpoint} is not a commons_arena policy checkpoint: no such folder (looked from "
                              f"{Path.cwd()}){hint}")
    if is_policy_set(checkpoint):  # one policy per seat of a multi-seat run: any role it holds
        roles = set_roles(checkpoint)

        def member(config: ScenarioConfig, agent: str, seed: int | None = None) -> Policy:
            return LearnedPolicy.load(member_for(checkpoint, config, agent), config, agent, seed=seed)

        return PolicySpec(name, roles[0], member, (), other_roles=roles[1:])
    sidecar = read_sidecar(checkpoint)

    def factory(config: ScenarioConfig, agent: str, seed: int | None = None, gate: float | None = None) -> Policy:
        return LearnedPolicy.load(checkpoint, config, agent, seed=seed, gate=gate)

    # a universal allocator takes a gate (policies.universal.CellNetwork); other checkpoints take no parameter
    return PolicySpec(name, sidecar["role"], factory, ("gate",) if sidecar.get("universal") else ())


FIXED_PREFIX = "fixed:"


def fixed_code_name(codec: str, code: Any) -> str:
    """The policy name of one fixed code of ``codec`` (:func:`policy_spec` reads it back)."""
    return f"{FIXED_PREFIX}{codec}:{','.join(str(int(c)) for c in code)}"


def _fixed_spec(name: str) -> PolicySpec:
    """``fixed:<codec>:<i>,<j>,...``: the codec's choices as integers (a module's action); the code is
    checked against the codec's space of the scenario it plays (:class:`policies.codecs.CodedPolicy`)."""
    from policies.codecs import CODECS, CodedPolicy

    codec_name, _, digits = name.removeprefix(FIXED_PREFIX).partition(":")
    if codec_name not in CODECS:
        raise ValueError(f"policy {name!r}: no codec {codec_name!r}; codecs: {', '.join(CODECS)}")
    try:
        code = [int(d) for d in digits.split(",")]
    except ValueError:
        raise ValueError(f"policy {name!r}: a fixed code is fixed:<codec>:<i>,<j>,... with integers") from None
    codec = CODECS[codec_name]

    def factory(config: ScenarioConfig, agent: str, seed: int | None = None) -> Policy:
        return CodedPolicy(codec(config, agent), code)  # type: ignore[arg-type]

    return PolicySpec(name, str(codec.role), factory, ())


def policy_spec(name: str) -> PolicySpec:
    if name.startswith("learned:"):
        return _learned_spec(name)
    if name.startswith(FIXED_PREFIX):
        return _fixed_spec(name)
    if name not in _REGISTRY:
        raise ValueError(f"unknown policy {name!r}; known policies: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def make_policy(
    name: str,
    config: ScenarioConfig | str,
    agent: str,
    env: Any = None,
    seed: int | None = None,
    **params: Any,
) -> Policy:
    """Build policy ``name`` to play ``agent`` of ``config`` (a ScenarioConfig or scenario name).

    ``env`` is required by privileged policies (``oracle``) and ignored by the others.
    """
    config = load_scenario(config)
    spec = policy_spec(name)
    role = role_of(config, agent)
    if not spec.plays(role):
        raise ValueError(
            f"policy {name!r} plays the {'/'.join(spec.roles)} role but agent {agent!r} of scenario {config.name!r} is a "
            f"{role}; {role} policies: {', '.join(available_policies(role))}"
        )
    unknown = set(params) - set(spec.params)
    if unknown:
        raise ValueError(
            f"policy {name!r} got unknown parameter(s) {sorted(unknown)}; it accepts {list(spec.params) or 'none'}"
        )
    for key, value in params.items():
        if value is None:
            continue
        if key in FLAG_PARAMETERS:
            if not isinstance(value, bool):
                raise ValueError(f"policy {name!r} parameter {key} must be true or false, got {value!r}")
        elif isinstance(value, bool) or not _plain_number(value):
            raise ValueError(f"policy {name!r} parameter {key} must be a finite number of magnitude at most "
                             f"{MAX_PARAMETER:g}, got {value!r}")
        elif key in INTEGER_PARAMETERS and not isinstance(value, int):
            raise ValueError(f"policy {name!r} parameter {key} must be an integer, got {value!r}")
    try:
        if spec.needs_env:
            return spec.factory(config, agent, seed=seed, env=env, **params)
        return spec.factory(config, agent, seed=seed, **params)
    except (TypeError, ArithmeticError) as err:  # a value the policy cannot use: say which policy
        raise ValueError(f"policy {name!r} with parameters {params}: {err}") from None


MAX_PARAMETER = 1e6  # largest magnitude of a policy parameter (every one is a number: a factor, a level, ticks)
INTEGER_PARAMETERS = frozenset({"level", "escalate_after", "crisis_levels", "horizon", "exact_ticks"})  # 1.5 is no level
FLAG_PARAMETERS = frozenset({"defer", "heed_escalation", "buy_headroom"})  # true or false; every other parameter is a number (never true)


# The batched form of each policy that has one, from the per-arena policy and the number of arenas: the
# policy its batch-of-one adaptor wraps (batch_of: teams, brokers, scripted allocators, planner and the
# reference mechanisms). A policy not named here acts in a batch through LoopBatchPolicy. One line per policy.
BATCHED: dict[str, Callable[[Any, int], BatchPolicy]] = {
    **{archetype: batch_of for archetype in ARCHETYPE_PROFILES},
    **{broker.name: batch_of for broker in BROKERS},
    **{name: batch_of for name in SCRIPTED_ALLOCATORS},
    "planner": batch_of,
    **{name: batch_of for name in REFERENCE_MECHANISMS},
}


def batch_policy(name: str, config: ScenarioConfig | str, agent: str, num_envs: int, **params: Any) -> BatchPolicy:
    """Policy ``name`` playing ``agent`` of ``config`` in ``num_envs`` arenas (``policies.batch``): its
    batched form when :data:`BATCHED` has one, else N per-arena policies in a loop. ``params`` are
    checked as :func:`make_policy` checks them; every arena starts unseeded until ``reset(seeds)``."""
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer of at least 1, got {num_envs!r}")
    config = load_scenario(config)
    if policy_spec(name).needs_env:
        raise ValueError(f"policy {name!r} reads one env's hidden state, so it cannot act on a batch of "
                         "observations; play it per arena")
    make = functools.partial(make_policy, name, config, agent, **params)
    prototype = make()  # checks name, role and parameters
    batched = BATCHED.get(name)
    if batched is None:
        from policies.batch_learned import BatchLearned, batchable

        if batchable(prototype):
            return BatchLearned(prototype, num_envs)  # type: ignore[arg-type]  # batchable: a LearnedPolicy
        return LoopBatchPolicy(make, num_envs)
    return batched(prototype, num_envs)


def has_batch_form(name: str, config: ScenarioConfig | str, agent: str) -> bool:
    """Whether :func:`batch_policy` gives ``name`` in ``agent``'s seat a batched form (not the per-arena loop):
    every scripted policy of :data:`BATCHED`, and a ``learned:`` checkpoint over its scenario's own or the cell view."""
    if name in BATCHED:
        return True
    if not name.startswith("learned:"):
        return False
    from policies.batch_learned import batchable

    return batchable(make_policy(name, load_scenario(config), agent))


def _plain_number(value: Any) -> bool:
    """A finite int, float or bool within :data:`MAX_PARAMETER` (never a list, string or NaN)."""
    return isinstance(value, int | float) and math.isfinite(value) and abs(value) <= MAX_PARAMETER


def _population_problems(config: ScenarioConfig) -> list[str]:
    """A scenario's ``[population]`` table names known policies of each agent's role."""
    problems = []
    for agent, name in config.population.items():
        role = role_of(config, agent)
        try:
            spec = policy_spec(name)
        except ValueError as err:
            problems.append(f"population.{agent}: {err}")
            continue
        if spec.role != role:
            problems.append(
                f"population.{agent}: policy {name!r} plays the {spec.role} role but {agent!r} is a {role}; "
                f"{role} policies: {', '.join(available_policies(role))}"
            )
    return problems


scenario_module.POPULATION_CHECKS.append(_population_problems)


__all__ = ["BATCHED", "FIXED_PREFIX", "has_batch_form", "ROLES", "PolicySpec", "available_policies", "batch_policy",
           "fixed_code_name", "make_policy", "policy_spec", "register"]
