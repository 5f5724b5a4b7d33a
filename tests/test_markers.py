"""The fast loop's marks: each test carries its own (tests/conftest.py checks them), needs imply slow,
sweeps keep their fast cases, and `-m` skips importing a module only when it deselects all of it."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import SLOW_NEEDS, deselects_every_test, marking_errors, module_marks, unmarked_needs
from tests.sweeps import SLOW_CASES, swept
from tests.test_layout import tree_of

TESTS = Path(__file__).parent
ROOT = TESTS.parent
TEST_MODULES = sorted(TESTS.rglob("test_*.py"))


def test_every_need_is_registered():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    registered = {line.partition(":")[0] for line in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    assert {"slow", "server", *SLOW_NEEDS} <= registered


@pytest.mark.parametrize("source", [
    "import pytest\npytestmark = [pytest.mark.slow, pytest.mark.rllib, pytest.mark.timeout(600)]  # why\n",
    "import pytest\n\npytestmark = pytest.mark.slow\n",
    "import pytest\npytestmark = (pytest.mark.slow,)\n",
])
def test_a_modules_marks_are_read_from_its_source(tmp_path, source):
    path = tmp_path / "test_x.py"
    path.write_text(source, encoding="utf-8")
    assert module_marks(path) == ({"slow", "rllib", "timeout"} if "rllib" in source else {"slow"})


def test_a_module_without_pytestmark_has_no_module_marks(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("import pytest\nmarks = [pytest.mark.slow]\n\n@pytest.mark.slow\ndef test_a():\n    pass\n")
    assert module_marks(path) == set()


def test_every_pytestmark_is_readable_without_importing():
    """`-m "not slow"` skips importing a module whole only if its pytestmark reads as marks."""
    for path in TEST_MODULES:
        assigned = any(isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)
                       for node in tree_of(path).body)
        assert module_marks(path) or not assigned, f"{path}: pytestmark names no pytest.mark.NAME"


def test_modules_that_drive_a_browser_are_marked_browser():
    drivers = [path for path in TEST_MODULES if any(
        isinstance(node, ast.ImportFrom) and node.module == "tests.browser"
        for node in ast.walk(tree_of(path)))]
    assert drivers
    for path in drivers:
        assert "browser" in module_marks(path), f"{path} drives Chromium but is not marked browser"


def item(*marks: str, fixtures: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(nodeid="tests/test_x.py::test_y", fixturenames=fixtures,
                           iter_markers=lambda: [SimpleNamespace(name=mark) for mark in marks])


def test_needs_imply_slow_and_ray_session_implies_ray():
    assert marking_errors(item("slow", "rllib", "ray", fixtures=("ray_session",))) == []
    assert marking_errors(item("server")) == []  # a quick server test may run in the fast loop
    assert marking_errors(item("rllib")) == ["tests/test_x.py::test_y is marked rllib but not slow"]
    assert marking_errors(item("slow", fixtures=("tmp_path", "ray_session"))) == [
        "tests/test_x.py::test_y uses ray_session but is not marked ray"]


def test_a_test_that_meets_an_unmarked_need_is_named(monkeypatch):
    missing = {"rllib": {"not_a_module_anywhere"}, "browser": {"selenium"}}  # not imported, and imported by the test
    monkeypatch.setitem(sys.modules, "selenium", SimpleNamespace())
    # in a whole run the session's real Ray may be up by now: this test's Ray is a stand-in, down
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: False))
    assert unmarked_needs(set(), missing, ray_was_up=False) == ["imports selenium, so it needs the `browser` mark"]
    assert unmarked_needs({"browser", "slow"}, missing, ray_was_up=False) == []
    assert unmarked_needs(set(), {"browser": set()}, ray_was_up=False) == []  # imported before the test: not its doing
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(is_initialized=lambda: True))
    assert unmarked_needs({"slow"}, {}, ray_was_up=False) == ["starts Ray, so it needs the `ray` mark"]
    assert unmarked_needs({"slow"}, {}, ray_was_up=True) == []


def test_sweeps_keep_standard_crisis_and_the_small_shape_in_the_fast_loop():
    assert {"standard", "crisis", "duo_one_tier_hard"}.isdisjoint(SLOW_CASES)
    assert {"job_mix", "octet_five_tiers"} <= SLOW_CASES
    fast, job_mix, octet, other = swept(["standard", "job_mix", "octet_five_tiers", "octet_four_tiers"])
    assert (fast, other) == ("standard", "octet_four_tiers")
    assert [mark.name for mark in job_mix.marks] == [mark.name for mark in octet.marks] == ["slow"]
    assert job_mix.values == ("job_mix",)


@pytest.mark.parametrize(("expression", "marks", "skip"), [
    ("not slow", {"slow"}, True),
    ("not slow", {"server", "slow"}, True),
    ("slow", {"slow"}, False),
    ("not browser", {"server", "slow"}, False),  # its tests may lack `browser`: collect
    ("not browser", {"browser", "slow"}, True),
    ("ray and not rllib", {"rllib", "ray", "slow"}, True),
    ("ray and not rllib", {"ray", "slow"}, False),
    ("server or ray", {"slow"}, False),  # a test of it may carry `ray` itself
    ("not (slow or ray)", {"ray", "slow"}, True),
    ("slow(reason=1)", {"rllib", "slow"}, False),  # marker arguments: never skip
])
def test_a_module_is_skipped_only_when_the_expression_deselects_all_of_it(expression, marks, skip):
    assert deselects_every_test(expression, marks) is skip
