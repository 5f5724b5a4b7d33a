"""Sweeps: a test run once per shipped scenario (or per unusual shape) keeps `standard`, `crisis`
and the smaller unusual shape in the fast loop (`pytest -m "not slow"`); the other shipped
scenarios and the larger shape carry `slow` and play in the full run. Golden recordings and
trajectory digests are not swept: the fast loop checks every golden scenario."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

import commons_arena

SLOW_CASES = frozenset(commons_arena.list_scenarios()) - {"standard", "crisis"} | {"octet_five_tiers"}


def swept(names: Iterable[str]) -> list[Any]:
    """``names`` as parameters for ``parametrize`` (or a fixture's ``params``), those in
    :data:`SLOW_CASES` marked slow."""
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_CASES else name for name in names]
