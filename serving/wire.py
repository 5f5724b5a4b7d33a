"""A seat's wire format: named JSON actions and observations, and their JSON Schemas.

The flat vectors of :mod:`commons_arena.spaces` become JSON objects whose keys are the
layout's field names. Every axis of a field has labels (tier names, team names, ...), so
an action part may be written as nested lists in layout order *or* as objects keyed by
those labels, with missing entries meaning 0::

    {"buy": [0, 1, 0], "grant": [[2, 1, 0], [1, 1, 0], [1, 0, 1]]}
    {"buy": {"medium": 1}, "grant": {"search": {"small": 2, "medium": 1}, "safety": {"large": 1}}}

A part left out is all zeros (the env's no-op); an unknown part, a wrong shape, a
non-integer or a value outside the part's range is an :class:`ActionError` naming the
entry (``grant.search.small``) and its allowed range. A team's ``stance`` is one integer
or its name (``"accept"``, ``"counter"``, ``"escalate"``).

Observations go out as ``{field: value}``: a number for one-entry fields, lists (nested
for two axes) in layout order otherwise. The labels of each axis are in the schema
(``x-axes``) and in :func:`axis_labels`.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from commons_arena.enums import ShockKind, Stance
from commons_arena.inputs import loads_json
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import JOB_SLOT_FIELDS, Layout, action_layout, observation_layout, role_of

# The meaning of each axis of each field, per role: () is a single number.
ACTION_AXES: dict[tuple[str, str], tuple[str, ...]] = {
    ("allocator", "buy"): ("tier",),
    ("allocator", "grant"): ("team", "tier"),
    ("team", "request"): ("tier",),
    ("team", "stance"): (),
    ("broker", "quantity"): ("tier",),
    ("broker", "price_level"): ("tier",),
}
OBSERVATION_AXES: dict[tuple[str, str], tuple[str, ...]] = {
    **{(role, "tick"): () for role in ("allocator", "team", "broker")},
    **{(role, name): ("tier",) for role in ("allocator", "team", "broker") for name in ("offer_qty", "offer_price")},
    ("allocator", "owned"): ("tier",),
    ("allocator", "online"): ("tier",),
    ("allocator", "budget"): (),
    ("allocator", "carbon_used"): (),
    ("allocator", "carbon_cap"): (),
    ("allocator", "intensity_forecast"): ("ahead",),
    ("allocator", "declared"): ("team", "tier"),
    ("allocator", "stance"): ("team", "stance"),
    ("allocator", "escalations"): ("team",),
    ("allocator", "credibility"): ("team",),
    ("allocator", "pressure"): ("team",),
    ("allocator", "revealed"): ("team",),
    ("allocator", "revealed_need"): ("team", "tier"),
    ("allocator", "shocks_seen"): ("shock",),
    ("allocator", "shocks_active"): ("shock",),
    ("broker", "inventory"): ("tier",),
    ("broker", "unit_cost"): ("tier",),
    ("broker", "last_sold"): ("tier",),
    ("broker", "last_price"): ("tier",),
    ("broker", "demand"): ("tier",),
    ("broker", "crisis"): (),
    ("team", "need"): ("tier",),
    ("team", "last_grant"): ("tier",),
    ("team", "declared"): ("tier",),
    ("team", "credibility"): (),
    ("team", "starved_streak"): (),
    ("team", "others_declared"): ("other_team", "tier"),
    ("team", "jobs"): ("slot", "job_field"),
}
_F32 = struct.Struct("f")
STANCES = tuple(s.name.lower() for s in Stance)  # a stance may be sent by name


class ActionError(ValueError):
    """An action that is not one of the seat's actions; says which entry and what is allowed."""

    def __init__(self, message: str, field: str = "", allowed: tuple[int, int] | list[str] | None = None,
                 got: Any = None, code: str = "INVALID_ACTION") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.allowed = allowed
        self.got = got

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            out["field"] = self.field
        if self.allowed is not None:
            out["allowed"] = list(self.allowed)
        if self.got is not None:
            out["got"] = _short(self.got)
        return out


def _short(value: Any, limit: int = 80) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no NaN or Infinity: the error body must still serialise
    if isinstance(value, bool | int | float | str) or value is None:
        return value if not isinstance(value, str) or len(value) <= limit else value[:limit] + "…"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def media_type(content_type: str | bytes | None) -> str | None:
    """A ``Content-Type``'s media type, lower case and without parameters (its case means nothing, RFC 9110);
    None when the header is absent."""
    if content_type is None:
        return None
    text = content_type.decode("latin-1") if isinstance(content_type, bytes) else content_type
    return text.split(";")[0].strip().lower()


def strict_json(text: str | bytes) -> Any:
    """JSON as the standard defines it (UTF-8; no NaN, Infinity or numbers that overflow to them), at most
    ``MAX_DEPTH`` deep: :func:`commons_arena.inputs.loads_json`, the one strict reader; else ValueError."""
    return loads_json(text, "the JSON")


def axis_labels(config: ScenarioConfig, seat: str, kind: str) -> tuple[str, ...]:
    """The labels of one axis kind for ``seat`` (e.g. ``"tier"`` → the tier names)."""
    if kind == "tier":
        return config.tier_names
    if kind == "team":
        return config.team_names
    if kind == "other_team":
        return tuple(t for t in config.team_names if t != seat)
    if kind == "stance":
        return STANCES
    if kind == "shock":
        return tuple(k.label for k in ShockKind)
    if kind == "ahead":
        return tuple(f"t+{i}" for i in range(config.carbon.forecast_horizon))
    if kind == "slot":
        return tuple(f"slot{i}" for i in range(config.queue_slots))
    if kind == "job_field":
        return JOB_SLOT_FIELDS
    raise KeyError(f"unknown axis kind {kind!r}")


@dataclass(frozen=True)
class Part:
    """One named field of a seat's action or observation, with its axes."""

    name: str
    doc: str
    shape: tuple[int, ...]
    start: int  # offset in the flat vector
    axes: tuple[str, ...]  # axis kinds; () for a single number
    labels: tuple[tuple[str, ...], ...]  # labels per axis
    low: tuple[float, ...]  # per entry, flat
    high: tuple[float, ...]

    @property
    def size(self) -> int:
        return len(self.low)

    def flat_index(self, index: tuple[int, ...]) -> int:
        """Position of the entry at ``index`` (one per axis) in the part's flat values."""
        flat = 0
        for i, n in zip(index, self.shape, strict=False):
            flat = flat * n + i
        return flat


def _parts(config: ScenarioConfig, seat: str, layout: Layout, table: Mapping[tuple[str, str], tuple[str, ...]]):
    role = role_of(config, seat)
    parts = []
    for f in layout.fields:
        axes = table[(role, f.name)]
        labels = tuple(axis_labels(config, seat, kind) for kind in axes)
        expected = tuple(len(lab) for lab in labels) or (1,)
        if expected != f.shape:  # a new field or shape in spaces.py needs its axes here
            raise AssertionError(f"{role}.{f.name}: layout shape {f.shape} but axes {axes} give {expected}")
        sl = layout.slices[f.name]
        parts.append(Part(f.name, f.doc, f.shape, sl.start, axes, labels,
                          tuple(layout.low[sl].tolist()), tuple(layout.high[sl].tolist())))
    return tuple(parts)


@dataclass(frozen=True)
class SeatSpec:
    """Everything the wire needs about one seat of one scenario (cached per content)."""

    config: ScenarioConfig
    seat: str
    role: str
    actions: tuple[Part, ...]
    observations: tuple[Part, ...]
    action_size: int
    observation_size: int

    @functools.cached_property
    def observation_plan(self) -> tuple[tuple[str, int, int, int], ...]:
        """(field, start, stop, row width: 0 for one number, -1 for one axis) per observation field."""
        return tuple((p.name, p.start, p.start + p.size, 0 if not p.axes else -1 if len(p.shape) == 1 else p.shape[1])
                     for p in self.observations)


_SPECS: dict[tuple[str, str], SeatSpec] = {}


def seat_spec(config: ScenarioConfig, seat: str) -> SeatSpec:
    """The seat's wire spec, built once per scenario content (like the layouts)."""
    key = (config.content_hash, seat)
    if key not in _SPECS:
        if seat not in config.agents:
            raise ValueError(f"unknown seat {seat!r}; seats of scenario {config.name!r} are {list(config.agents)}")
        act, obs = action_layout(config, seat), observation_layout(config, seat)
        _SPECS[key] = SeatSpec(config, seat, role_of(config, seat), _parts(config, seat, act, ACTION_AXES),
                               _parts(config, seat, obs, OBSERVATION_AXES), act.size, obs.size)
    return _SPECS[key]


# --------------------------------------------------------------------------- observations
def _nest(flat: list, shape: tuple[int, ...]) -> Any:
    if len(shape) == 1:
        return flat
    step = int(np.prod(shape[1:]))
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _short32(value: float) -> float:
    """The shortest decimal that is the same float32 (0.4, not 0.4000000059604645)."""
    for digits in (6, 7, 8):
        candidate = float(f"{value:.{digits}g}")
        if _F32.unpack(_F32.pack(candidate))[0] == value:
            return candidate
    return value


def encode_observation(spec: SeatSpec, vector: np.ndarray) -> dict[str, Any]:
    """A flat observation as ``{field: number | list}`` (module docstring)."""
    values32 = np.asarray(vector, dtype=np.float32)
    flat = values32.tolist()
    for i in np.flatnonzero(values32 != np.round(values32)).tolist():
        flat[i] = _short32(flat[i])
    out: dict[str, Any] = {}
    for name, start, stop, width in spec.observation_plan:  # plain list slices: this runs every step
        if width == 0:
            out[name] = flat[start]
        elif width < 0:
            out[name] = flat[start:stop]
        else:
            out[name] = [flat[a:a + width] for a in range(start, stop, width)]
    return out


def decode_observation(spec: SeatSpec, named: Mapping[str, Any]) -> np.ndarray:
    """The flat float32 vector of a named observation (inverse of :func:`encode_observation`)."""
    out = np.zeros(spec.observation_size, dtype=np.float32)
    for p in spec.observations:
        if p.name not in named:
            raise ValueError(f"observation lacks field {p.name!r}")
        out[p.start:p.start + p.size] = np.asarray(named[p.name], dtype=np.float32).reshape(-1)
    return out


# --------------------------------------------------------------------------- actions
def encode_action(spec: SeatSpec, vector: np.ndarray | list[int]) -> dict[str, Any]:
    """A flat action as named parts in list form (what a client sends)."""
    flat = [int(v) for v in np.asarray(vector).reshape(-1).tolist()]
    if len(flat) != spec.action_size:
        raise ValueError(f"action for {spec.seat!r} has {len(flat)} entries; its space has {spec.action_size}")
    out: dict[str, Any] = {}
    for p in spec.actions:
        values = flat[p.start:p.start + p.size]
        out[p.name] = values[0] if not p.axes else _nest(values, p.shape)
    return out


def _entry_name(part: Part, index: tuple[int, ...]) -> str:
    return ".".join([part.name, *(part.labels[a][i] for a, i in enumerate(index))])


def _integer(part: Part, index: tuple[int, ...], value: Any) -> int:
    flat_index = part.flat_index(index)
    lo, hi = int(part.low[flat_index]), int(part.high[flat_index])
    if type(value) is int and lo <= value <= hi:  # the common case, first
        return value
    where = _entry_name(part, index)
    if part.name == "stance" and isinstance(value, str):
        if value.lower() in STANCES:
            return STANCES.index(value.lower())
        raise ActionError(f"{where} must be one of {list(STANCES)} or an integer in [{lo}, {hi}], got {value!r}",
                          where, (lo, hi), value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ActionError(f"{where} must be an integer in [{lo}, {hi}], got {_short(value)!r}", where, (lo, hi), value)
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ActionError(f"{where} must be a whole number in [{lo}, {hi}], got {value!r}", where, (lo, hi), value)
    number = int(value)
    if not lo <= number <= hi:
        raise ActionError(f"{where} = {number} is outside its allowed range [{lo}, {hi}]", where, (lo, hi), number)
    return number


def _fill(part: Part, value: Any, axis: int, index: tuple[int, ...], out: list[int]) -> None:
    """Write ``value`` (the sub-array at ``index``) into ``out`` in layout order."""
    if axis == len(part.axes):
        out[part.flat_index(index)] = _integer(part, index, value)
        return
    labels = part.labels[axis]
    where = ".".join([part.name, *(part.labels[a][i] for a, i in enumerate(index))])
    kind = part.axes[axis]
    if isinstance(value, list):
        if len(value) != len(labels):
            raise ActionError(f"{where} must list {len(labels)} entries (one per {kind}: {', '.join(labels)}), "
                              f"got {len(value)}", where, list(labels), value)
        for i, item in enumerate(value):
            _fill(part, item, axis + 1, (*index, i), out)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in labels:
                raise ActionError(f"{where} has no {kind} {key!r}; {kind}s are {list(labels)}", where,
                                  list(labels), key)
            _fill(part, item, axis + 1, (*index, labels.index(key)), out)
    else:
        raise ActionError(f"{where} must be a list of {len(labels)} or an object keyed by {kind} "
                          f"({', '.join(labels)}), got {_short(value)!r}", where, list(labels), value)


def decode_action(spec: SeatSpec, data: Any) -> list[int]:
    """Named JSON action → the flat integer action, or :class:`ActionError` (module docstring)."""
    if not isinstance(data, dict):
        raise ActionError(f"the action of {spec.seat!r} must be a JSON object with parts "
                          f"{[p.name for p in spec.actions]}, got {_short(data)!r}", "", None, data)
    known = {p.name: p for p in spec.actions}
    for key in data:
        if key not in known:
            raise ActionError(f"the action of {spec.seat!r} has no part {key!r}; its parts are {list(known)}",
                              str(key), list(known), key)
    out = [0] * spec.action_size
    for name, value in data.items():
        part = known[name]
        if not part.axes and isinstance(value, list) and len(value) == 1:
            value = value[0]  # [x] for a one-entry part, as the flat vector writes it
        chunk = _valid_lists(part, value)
        if chunk is None:  # anything but in-range integer lists: the checked path, which names the problem
            chunk = [0] * part.size
            _fill(part, value, 0, (), chunk)
        out[part.start:part.start + part.size] = chunk
    return out


def _valid_lists(part: Part, value: Any) -> list[int] | None:
    """``value`` flattened if it is the part's nested lists of in-range ints (what clients mostly send), else None."""
    if not isinstance(value, list):
        return None
    if len(part.shape) == 1:
        flat = value
    elif len(value) == part.shape[0] and all(isinstance(row, list) and len(row) == part.shape[1] for row in value):
        flat = [v for row in value for v in row]
    else:
        return None
    if len(flat) != part.size:
        return None
    for v, lo, hi in zip(flat, part.low, part.high, strict=True):
        if type(v) is not int or not lo <= v <= hi:
            return None
    return flat


# --------------------------------------------------------------------------- schemas
def _bound(value: float) -> float | int | None:
    if not math.isfinite(value):
        return None
    return int(value) if float(value).is_integer() else float(value)


def _entry_schema(part: Part, index: int, integer: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer" if integer else "number"}
    lo, hi = _bound(part.low[index]), _bound(part.high[index])
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    return schema


def _array_schema(part: Part, axis: int, offset: int, integer: bool, keyed: bool) -> dict[str, Any]:
    if axis == len(part.axes):
        entry = _entry_schema(part, offset, integer)
        if integer and part.name == "stance":
            return {"anyOf": [entry, {"enum": list(STANCES)}]}
        return entry
    labels, stride = part.labels[axis], int(np.prod(part.shape[axis + 1:]))
    items = [_array_schema(part, axis + 1, offset + i * stride, integer, keyed) for i in range(len(labels))]
    as_list = {"type": "array", "minItems": len(labels), "maxItems": len(labels), "prefixItems": items,
               "items": False}
    if not keyed:
        return as_list
    as_object = {"type": "object", "additionalProperties": False,
                 "properties": dict(zip(labels, items, strict=True))}
    return {"anyOf": [as_list, as_object]}


def _object_schema(spec: SeatSpec, what: str, parts: tuple[Part, ...], action: bool) -> dict[str, Any]:
    props = {}
    for p in parts:
        schema = _array_schema(p, 0, 0, integer=action, keyed=action)
        if action and not p.axes:  # a one-entry part may also come as [x]
            schema = {"anyOf": [schema, {"type": "array", "prefixItems": [schema], "minItems": 1, "maxItems": 1}]}
        axes = " x ".join(p.axes) or "one number"
        props[p.name] = {**schema, "description": f"{p.doc} ({axes})", "x-axes": dict(zip(p.axes, p.labels, strict=True))}
    out: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"commons_arena_v0 {what} of seat {spec.seat} ({spec.role})",
        "type": "object",
        "properties": props,
    }
    if action:
        out["additionalProperties"] = False  # missing parts are 0; unknown parts are errors
    else:
        out["required"] = [p.name for p in parts]
    return out


def action_schema(spec: SeatSpec) -> dict[str, Any]:
    """JSON Schema of the seat's action: an object of named parts (missing parts are 0)."""
    return _object_schema(spec, "action", spec.actions, action=True)


def observation_schema(spec: SeatSpec) -> dict[str, Any]:
    """JSON Schema of the seat's observation as named fields."""
    return _object_schema(spec, "observation", spec.observations, action=False)


def form_spec(spec: SeatSpec) -> dict[str, Any]:
    """The seat's action and observation parts for the play page (labels, ranges, docs)."""
    def describe(p: Part, bounds: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"name": p.name, "doc": p.doc, "shape": list(p.shape), "axes": list(p.axes),
                               "labels": [list(lab) for lab in p.labels]}
        if bounds:
            out["low"] = [int(v) for v in p.low]
            out["high"] = [int(v) for v in p.high]
        return out

    return {"seat": spec.seat, "role": spec.role, "scenario": spec.config.name,
            "action": [describe(p, True) for p in spec.actions],
            "observation": [describe(p, False) for p in spec.observations]}


__all__ = [
    "ACTION_AXES",
    "OBSERVATION_AXES",
    "ActionError",
    "Part",
    "SeatSpec",
    "action_schema",
    "axis_labels",
    "decode_action",
    "decode_observation",
    "encode_action",
    "encode_observation",
    "form_spec",
    "observation_schema",
    "seat_spec",
    "strict_json",
]
