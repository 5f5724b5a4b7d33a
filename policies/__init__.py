"""Agent behaviour for the arena: the Policy protocol, scripted teams, brokers and
allocator baselines, the privileged oracle, populations and the single-agent view.

    from policies import make_policy, available_policies, Population, run_episode

Importing this package registers the Gymnasium id ``commons_arena/SingleAgent-v0``.
"""

from __future__ import annotations

from policies.base import Policy
from policies.focal import run_episode
from policies.population import Population, PopulationError
from policies.registry import available_policies, make_policy
from policies.single_agent import ENV_ID, SingleAgentEnv

__all__ = [
    "ENV_ID",
    "Policy",
    "Population",
    "PopulationError",
    "SingleAgentEnv",
    "available_policies",
    "make_policy",
    "run_episode",
]
