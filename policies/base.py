"""The Policy protocol every scripted, learned or human agent implements.

A policy maps one agent's observation to one action from that agent's action space. It
has no hidden side effects: all randomness comes from the generator seeded in
``reset(seed)``, so the same seed and observations give the same actions.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Policy(Protocol):
    """``reset(seed)`` once per episode, then ``act(observation)`` once per tick."""

    def reset(self, seed: int | None = None) -> None: ...

    def act(self, observation: np.ndarray) -> np.ndarray: ...
