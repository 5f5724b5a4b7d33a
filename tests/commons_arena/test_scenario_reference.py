"""docs/scenario_reference.md is generated from the scenario models: it lists every key, and it cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from commons_arena import scenario
from commons_arena.scenario_reference import scenario_reference

PAGE = Path(__file__).parents[2] / "docs" / "scenario_reference.md"


def _models() -> list[type[BaseModel]]:
    return [m for m in vars(scenario).values()
            if isinstance(m, type) and issubclass(m, scenario._Frozen) and m is not scenario._Frozen]


def test_the_page_is_the_models_output():
    """Regenerate with `commons-arena scenarios reference > docs/scenario_reference.md`."""
    assert PAGE.read_text() == scenario_reference(), (
        "docs/scenario_reference.md differs from the scenario models: run "
        "`commons-arena scenarios reference > docs/scenario_reference.md`")


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_every_key_of_every_model_has_a_row_with_its_meaning(model):
    text = scenario_reference()
    for key, field in model.model_fields.items():
        assert field.description, f"{model.__name__}.{key} has no docstring: the reference needs its meaning"
        assert f"| `{key}` |" in text and " ".join(field.description.split()) in text


def test_a_new_field_without_a_meaning_is_refused(monkeypatch):
    """The generator names a key with no meaning instead of writing an empty cell."""
    real = scenario.ScenarioConfig.model_json_schema()
    real["$defs"]["CredibilityConfig"]["properties"]["undocumented"] = {"type": "integer", "default": 0}
    monkeypatch.setattr(scenario.ScenarioConfig, "model_json_schema", classmethod(lambda cls: real))
    with pytest.raises(RuntimeError, match=r"\[credibility\] undocumented has no meaning"):
        scenario_reference()
