"""A best response that starts where its codec's fixed codes end, and is never below them (issue 30).

A learner in a team or broker seat can mix a dozen codes where one fixed code pays more (the
``robotics`` seat against ``planner`` on ``crisis``: docs/negotiation.md). So a best response
(``--experiment best_response``) is made in two parts:

1. **search**: before training, every fixed code of the seat's codec with one choice on every
   tier (:func:`experiments.evaluation.fixed_codes.uniform_codes`: ``bluff``'s 48, ``markup``'s
   300) plays the ``--selection-seeds`` against the frozen background; the best is written to
   ``<run>/fixed_code_search.json`` (the report reads it there instead of searching again);
2. **learning**: the learner starts from that code (its logit advantage ``--best-code-bias``,
   :meth:`experiments.training.kinds.BestResponse.start`: the greedy action at iteration 0 *is*
   the code) and may learn to switch codes tick by tick on what it observes.

After training the learned seat plays the same selection seeds, and the **final** best response
is the better of the two there (:func:`choose`): the checkpoint, or the fixed code itself. Both
were chosen on the selection seeds and are reported on held-out ones, so the final best response
is below the best fixed code only by the noise of that choice, and the report says per cell which
part came from the search and which from learning (``best_response_choice.json``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field, Strict, TypeAdapter
from typing_extensions import TypedDict  # pydantic reads TypedDicts of typing_extensions on Python 3.11

from commons_arena.files import make_folder, write_file
from commons_arena.inputs import load_record
from experiments.evaluation.fixed_codes import Arena, uniform_codes
from policies.codecs import Codec, DescribesCodes

SEARCH_FILE = "fixed_code_search.json"
CHOICE_FILE = "best_response_choice.json"
SEARCH, LEARNING = "search", "learning"  # where the final best response came from


@dataclass(frozen=True)
class CodeSearch:
    """The best fixed code of a codec on the selection seeds (every uniform code tried)."""

    codec: str
    code: tuple[int, ...]
    description: str
    selection_mean: float  # the seat's mean return on `seeds`
    seeds: tuple[int, ...]  # every seed it was chosen on (the first look's, then the second's)
    codes_tried: int

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "code": list(self.code), "seeds": list(self.seeds)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CodeSearch:
        return cls(codec=str(data["codec"]), code=tuple(int(c) for c in data["code"]),
                   description=str(data["description"]), selection_mean=float(data["selection_mean"]),
                   seeds=tuple(int(s) for s in data["seeds"]), codes_tried=int(data["codes_tried"]))


REFINE_TOP = 5  # codes of the first look that get the second


def search(arena: Arena, codec: Codec, seeds: Sequence[int], refine: Sequence[int] = ()) -> CodeSearch:
    """Every uniform fixed code of ``codec`` in ``arena``'s seat on ``seeds``: the best (the first on a tie).

    With ``refine`` seeds, a second look: the :data:`REFINE_TOP` best codes of the first also play
    ``refine``, and the best mean over ``seeds`` + ``refine`` wins. On 30 seeds alone the chosen code
    was the best by the luck of those seeds often enough to matter: against the main job's allocator on
    ``crisis`` the ``robotics`` search chose x3-with-escalation, and a x2 bluff gained 2.4 more on the
    report seeds (docs/negotiation.md)."""
    if not isinstance(codec, DescribesCodes):
        raise ValueError(f"codec {codec.name!r} cannot name its codes; a best response needs a team or broker codec")
    codes = uniform_codes(codec)
    means = [float(arena.coded(codec.name, code, seeds).mean()) for code in codes]
    best, looked = int(np.argmax(means)), [int(s) for s in seeds]
    if refine:
        looked += [int(s) for s in refine]
        top = sorted(range(len(codes)), key=lambda i: (-means[i], i))[:REFINE_TOP]
        both = {i: float(arena.coded(codec.name, codes[i], looked).mean()) for i in top}
        best = min(top, key=lambda i: (-both[i], i))
        means[best] = both[best]
    return CodeSearch(codec.name, tuple(int(c) for c in codes[best]), codec.describe(codes[best]), means[best],
                      tuple(looked), len(codes))


class _Search(TypedDict):
    codec: str
    code: list[Annotated[int, Strict(), Field(ge=0, le=2**31)]]
    description: str
    selection_mean: float
    seeds: list[Annotated[int, Strict(), Field(ge=0)]]
    codes_tried: Annotated[int, Strict(), Field(ge=0)]


SEARCH_RECORD = TypeAdapter(_Search)  # the search file, read back by the one reader (commons_arena.inputs)


def cached_search(folder: Path | None, arena: Arena, codec: Codec, seeds: Sequence[int],
                  refine: Sequence[int] = ()) -> CodeSearch:
    """:func:`search`, read from ``folder/fixed_code_search.json`` when it searched the same codec on
    the same seeds (written there otherwise; ``folder`` None: nothing is read or written)."""
    path = None if folder is None else folder / SEARCH_FILE
    if path is not None and path.is_file():
        found = CodeSearch.from_json(load_record(path, SEARCH_RECORD, "fixed-code search", own=True, allow_nan=True))
        if found.codec == codec.name and list(found.seeds) == [*seeds, *refine]:
            return found
    found = search(arena, codec, seeds, refine)
    if path is not None:
        make_folder(path.parent)
        write_file(path, json.dumps(found.to_json(), indent=1))
    return found


def choose(learned_selection_mean: float, found: CodeSearch) -> str:
    """The final best response's source: the checkpoint only if it beat the fixed code on the selection seeds."""
    return LEARNING if learned_selection_mean > found.selection_mean else SEARCH


__all__ = ["CHOICE_FILE", "LEARNING", "REFINE_TOP", "SEARCH", "SEARCH_FILE", "CodeSearch", "cached_search", "choose",
           "search"]
