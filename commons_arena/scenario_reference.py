"""Every key of a scenario file, generated from the models in :mod:`commons_arena.scenario`.

:func:`scenario_reference` walks :class:`~commons_arena.scenario.ScenarioConfig`'s JSON schema
(pydantic builds it from the models: each field's type, bounds, default and docstring) and
writes one markdown table per TOML table. ``commons-arena scenarios reference`` prints it;
docs/scenario_reference.md is its output, and ``tests/commons_arena/test_scenario_reference.py``
fails when the page drifts from the models.
"""

from __future__ import annotations

import json
from typing import Any

from commons_arena.scenario import ScenarioConfig

HEADER = """# Scenario reference: every key

Generated from the scenario models (`commons_arena/scenario.py`) by
`commons-arena scenarios reference > docs/scenario_reference.md`; a test fails when this page
and the models differ. A scenario is one TOML file; every key below is checked when it is
loaded (unknown keys, wrong types and out-of-range values are refused with the key's path),
then the cross-field rules (a deadline before its arrival, an unknown tier or team, a job no
tier can run, a dependency cycle, overlapping multipliers over x1000) are checked together.
Types are strict: `"3"` is not a number and an int key refuses `3.0` (a float key takes `3`). `[[name]]` is a TOML
array of tables (one `[[name]]` header per entry). "required" means the key has no default.
"""

_TITLES = {
    "ScenarioConfig": ("top level", "the keys at the top of the file"),
    "GpuTierConfig": ("[[gpu_tiers]]", "one table per GPU tier, 1-6"),
    "TeamConfig": ("[[teams]]", "one table per product team, 2-8"),
    "JobSpec": ("[[teams.jobs]]", "a team's jobs known before the episode starts"),
    "JobGenerator": ("[teams.generator]", "a team's seeded stream of jobs"),
    "CarbonConfig": ("[carbon]", "required"),
    "CredibilityConfig": ("[credibility]", "optional"),
    "ShockSpec": ("[[shocks]]", "scheduled (tick) or random (rate) shocks"),
    "UrgentJob": ("[shocks.job]", "the job a shock injects"),
    "RewardWeights": ("[rewards]", "optional: reward weights per role"),
    "AllocatorWeights": ("[rewards.allocator]", "optional"),
    "TeamWeights": ("[rewards.team]", "optional"),
    "BrokerWeights": ("[rewards.broker]", "optional"),
}


def _number(value: float) -> str:
    return f"{value:g}".replace("e+0", "e") if isinstance(value, float) else str(value)


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return _TITLES[prop["$ref"].rsplit("/", 1)[-1]][0]
    if "anyOf" in prop:
        kinds = [_type(p) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(kinds)
    if "enum" in prop:
        return "string"
    kind = prop.get("type")
    if kind == "array":
        if "prefixItems" in prop:
            return "[" + ", ".join(_type(p) for p in prop["prefixItems"]) + "]"
        return f"list of {_type(prop['items'])}"
    if kind == "object":
        return "table of string"
    return {"integer": "int", "number": "float", "string": "string", "boolean": "bool"}.get(str(kind), str(kind))


def _range(prop: dict[str, Any]) -> str:
    if "anyOf" in prop:
        return "; ".join(r for r in (_range(p) for p in prop["anyOf"] if p.get("type") != "null") if r)
    if "enum" in prop:
        return "one of " + ", ".join(f"`{v}`" for v in prop["enum"])
    parts = []
    low = ("(" + _number(prop["exclusiveMinimum"]) if "exclusiveMinimum" in prop
           else "[" + _number(prop["minimum"]) if "minimum" in prop else "")
    high = _number(prop["maximum"]) + "]" if "maximum" in prop else ""
    if low or high:  # an interval: [a, b] includes its ends, (a excludes a
        parts.append(f"{low or '(-inf'}, {high or 'inf)'}")
    if "pattern" in prop:
        parts.append(f"{prop.get('minLength', 0)}-{prop.get('maxLength', '')} chars matching `{prop['pattern']}`")
    elif "maxLength" in prop:
        parts.append(f"{prop.get('minLength', 0)}-{prop['maxLength']} chars")
    if prop.get("type") == "array":
        if "prefixItems" in prop:
            inner = _range(prop["prefixItems"][0])
            parts.append(f"lo <= hi, each {inner}" if inner else "lo <= hi")
        else:
            count = (f"{prop.get('minItems', 0)}-{prop['maxItems']} entries" if "maxItems" in prop else "")
            inner = _range(prop["items"]) if "$ref" not in prop["items"] else ""
            parts.extend(p for p in (count, f"each {inner}" if inner else "") if p)
    if prop.get("type") == "object" and "additionalProperties" in prop:
        parts.append("values " + _range(prop["additionalProperties"]))
    return "; ".join(parts)


def _default(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in prop:
        return "{}" if prop.get("type") == "object" else "-"
    value = prop["default"]
    if isinstance(value, dict):
        return "its keys' defaults"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def scenario_reference() -> str:
    """The markdown page of every scenario key: per TOML table, each key's type, range, default and meaning."""
    schema = ScenarioConfig.model_json_schema()
    defs = schema["$defs"]
    order = ["ScenarioConfig", "GpuTierConfig", "TeamConfig", "JobSpec", "JobGenerator", "CarbonConfig",
             "CredibilityConfig", "ShockSpec", "UrgentJob", "RewardWeights", "AllocatorWeights", "TeamWeights",
             "BrokerWeights"]
    missing = set(defs) - set(order)
    if missing:  # a new model: name its table in _TITLES and order above
        raise RuntimeError(f"scenario models without a place in the reference: {sorted(missing)}")
    lines = [HEADER]
    for name in order:
        model = schema if name == "ScenarioConfig" else defs[name]
        title, note = _TITLES[name]
        lines += [f"## `{title}`" if title != "top level" else "## Top level", ""]
        about = " ".join(model.get("description", "").split())
        lines += [f"{about} ({note}.)" if about else f"({note}.)", ""]
        lines += ["| key | type | range | default | meaning |", "|---|---|---|---|---|"]
        required = set(model.get("required", []))
        for key, prop in model["properties"].items():
            meaning = prop.get("description", "")
            if not meaning:
                raise RuntimeError(f"scenario key {title} {key} has no meaning: give its field a docstring")
            lines.append(f"| `{key}` | {_cell(_type(prop))} | {_cell(_range(prop))} | "
                         f"{_cell(_default(prop, key in required))} | {_cell(meaning)} |")
        lines.append("")
    return "\n".join(lines)


__all__ = ["scenario_reference"]
