"""Versioned entry point (PettingZoo style): ``from commons_arena import arena_v0``."""

from commons_arena import env, parallel_env, raw_env

__all__ = ["env", "parallel_env", "raw_env"]
