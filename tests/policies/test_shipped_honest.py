"""The honest allocator shipped with the repository (checkpoints/honest): a fresh clone plays it from any
folder as ``learned:honest``. Its recipe and measured figures: checkpoints/honest/README.md."""

from __future__ import annotations

from pathlib import Path

import commons_arena
from commons_arena.enums import ALLOCATOR
from policies.learned import read_sidecar
from policies.registry import make_policy
from policies.shipping import shipped_checkpoints
from tests.policies.test_shipped_universal import crisis_gains_over_planner

SHIPPED = Path(__file__).resolve().parents[2] / "checkpoints" / "honest"


def test_it_acts_through_the_thrifty_need_codec_and_is_shipped(tmp_path, monkeypatch) -> None:
    assert read_sidecar(SHIPPED)["action_codec"]["name"] == "need_thrifty"
    monkeypatch.chdir(tmp_path)
    assert "honest" in shipped_checkpoints()
    make_policy("learned:honest", commons_arena.load_scenario("crisis"), ALLOCATOR)


def test_it_is_trained_it_beats_planner_on_crisis() -> None:
    """Measured +90.1 ± 12.1 over planner on crisis (100 seeds, checkpoints/honest/README.md); 12 seeds show it."""
    gains = crisis_gains_over_planner(SHIPPED)
    assert gains.mean() > 0, gains.tolist()
