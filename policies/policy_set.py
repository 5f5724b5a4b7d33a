"""A checkpoint with a policy for several seats: ``learned:<dir>`` plays every role it holds.

A multi-seat training run (``commons-arena train --experiment selfplay``, ``league`` or
``seats_ppo``) writes, beside RLlib's own state, one data-only policy per learning seat
(:mod:`policies.checkpoint_format`)::

    <checkpoint>/policies/<seat>/arena_policy.json
    <checkpoint>/policies/<seat>/arena_policy.safetensors

``learned:<checkpoint>`` then works in any seat whose role the set holds: the member trained
for that seat when there is one, else the first member of the same role whose spaces fit
(e.g. a team policy in a team seat of another scenario). A checkpoint folder with its own
``arena_policy.json`` is a single policy, as before.
"""

from __future__ import annotations

from pathlib import Path

from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import make_action_space, make_observation_space, role_of

SET_DIR = "policies"


def is_policy_set(checkpoint: str | Path) -> bool:
    from policies.checkpoint_format import SIDECAR

    folder = Path(checkpoint)
    return not (folder / SIDECAR).is_file() and (folder / SET_DIR).is_dir()


def members(checkpoint: str | Path) -> dict[str, dict]:
    """Seat -> validated sidecar of each member (in folder-name order)."""
    from policies.learned import read_sidecar

    folder = Path(checkpoint) / SET_DIR
    return {p.name: read_sidecar(p) for p in sorted(folder.iterdir()) if p.is_dir()}


def set_roles(checkpoint: str | Path) -> tuple[str, ...]:
    """The roles the set can play, in the order allocator, team, broker."""
    roles = {meta["role"] for meta in members(checkpoint).values()}
    if not roles:
        raise ValueError(f"{checkpoint}/{SET_DIR} holds no policies")
    return tuple(r for r in ("allocator", "team", "broker") if r in roles)


def member_for(checkpoint: str | Path, config: ScenarioConfig, agent: str) -> Path:
    """The member folder that plays ``agent`` of ``config`` (see the module docstring)."""
    folder = Path(checkpoint) / SET_DIR
    found = members(checkpoint)
    if agent in found and found[agent]["role"] == role_of(config, agent):
        return folder / agent
    role = role_of(config, agent)
    shape = list(make_observation_space(config, agent).shape)
    nvec = make_action_space(config, agent).nvec.tolist()
    for seat, meta in found.items():
        if meta["role"] == role and meta["observation_shape"] == shape and meta["action_nvec"] == nvec:
            return folder / seat
    raise ValueError(
        f"checkpoint {checkpoint} has no policy for {role} {agent!r} of scenario {config.name!r}: it holds "
        + ", ".join(f"{seat} ({meta['role']}, trained on {meta['scenario']!r})" for seat, meta in found.items())
    )


__all__ = ["SET_DIR", "is_policy_set", "member_for", "members", "set_roles"]
