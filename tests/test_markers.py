"""The fast loop's marks (tests/conftest.py): every name in the tables still exists, needs imply slow,
sweeps keep their fast cases, and `-m` skips importing a module only when it deselects all of it."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from tests.conftest import FIXTURE_MARKS, MARKS, NEEDS_MARKS, SWEPT_ONLY_IN_FULL, deselects_every_test, marks_for

TESTS = Path(__file__).parent
ROOT = TESTS.parent


def module_file(module: str) -> Path | None:
    return next(TESTS.rglob(f"{module}.py"), None)


def functions_of(module: str) -> set[str]:
    tree = ast.parse(module_file(module).read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def test_every_marked_module_and_test_exists():
    """A renamed test would silently fall into the fast loop: its old name here must fail instead."""
    for key in MARKS:
        module, _, test = key.partition("::")
        assert module_file(module) is not None, f"MARKS names {module}, which is not a test module"
        if test:
            assert test.partition("[")[0] in functions_of(module), f"MARKS names {key}, which does not exist"


def test_every_marked_fixture_exists():
    fixtures = set().union(*(functions_of(path.stem) for path in TESTS.rglob("*.py")))
    for fixture in FIXTURE_MARKS:
        assert fixture in fixtures, f"FIXTURE_MARKS names {fixture}, which no test file defines"


def test_every_mark_is_registered():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    registered = {line.partition(":")[0] for line in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    used = {"slow", *NEEDS_MARKS, *(m for marks in (*MARKS.values(), *FIXTURE_MARKS.values()) for m in marks)}
    assert used <= registered, used - registered


def test_needs_imply_slow():
    assert marks_for("test_app", "test_x", "test_x", ()) == {"server", "slow"}
    assert marks_for("test_mechanics", "test_x", "test_x", ("tmp_path", "ray_session")) == {"ray", "slow"}
    assert marks_for("test_mechanics", "test_x", "test_x", ("tmp_path",)) == set()


def test_sweeps_keep_standard_crisis_and_the_small_shape_in_the_fast_loop():
    assert {"standard", "crisis", "duo_one_tier_hard"}.isdisjoint(SWEPT_ONLY_IN_FULL)
    assert {"job_mix", "octet_five_tiers"} <= SWEPT_ONLY_IN_FULL
    assert marks_for("test_x", "test_y", "test_y[job_mix-edf]", (), ("job_mix", "edf")) == {"slow"}
    assert marks_for("test_x", "test_y", "test_y[standard-edf]", (), ("standard", "edf")) == set()


@pytest.mark.parametrize(("expression", "marks", "skip"), [
    ("not slow", {"slow"}, True),
    ("not slow", {"server", "slow"}, True),
    ("slow", {"slow"}, False),
    ("not browser", {"server", "slow"}, False),  # its tests may lack `browser`: collect
    ("not browser", {"browser", "slow"}, True),
    ("ray and not rllib", {"rllib", "ray", "slow"}, True),
    ("ray and not rllib", {"ray", "slow"}, False),
    ("server or ray", {"slow"}, False),  # a test of it may carry `ray` through a fixture
    ("not (slow or ray)", {"ray", "slow"}, True),
    ("slow(reason=1)", {"rllib", "slow"}, False),  # marker arguments: never skip
])
def test_a_module_is_skipped_only_when_the_expression_deselects_all_of_it(expression, marks, skip):
    assert deselects_every_test(expression, marks) is skip
