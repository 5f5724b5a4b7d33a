"""Versions: the package's, and the environment's (bumped when the game's behaviour changes)."""

__version__ = "0.1.0"
ENV_NAME = "commons_arena_v0"  # PettingZoo style: the number changes when an observation, action or reward does
