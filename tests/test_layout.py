"""The import graph of every package the wheel ships: one-way layers, no cycle, no RLlib below training.

Drawn from the source (``ast``), so lazy imports inside functions and ``TYPE_CHECKING``
imports count too: a cycle that only bites at run time, or a layer skipped "just for a
type", is still a cycle or a skipped layer. The layers (docs/architecture.md, "Layout"):

    commons_arena  <-  policies  <-  serving  <-  experiments  <-  commands
    (the game)         (behaviour)   (the server)  (training,       (the command line)
                                                   evaluation, ...)

Each package may import only the packages to its left; nothing imports ``commands``.

Inside ``experiments`` the sub-packages stack the same way (:data:`EXPERIMENT_LAYERS`)::

    experiments/*.py  <-  viewing  <-  evaluation  <-  training  <-  studies  <-  bench
    (seed table,          (plots,      (plays and      (RLlib; may    (train, then   (speed
     statistics, Ray)      replay)      measures;       evaluate)      measure)       benchmarks)
                                        no RLlib)

The engine (``experiments/evaluation/engine.py``) is the only episode loop: no module
outside it, the layers that define the substrate (``commons_arena``, ``policies``) and the
places named in :data:`EPISODE_LOOP_ALLOWED` (each with its reason) uses ``run_episode`` or
``FocalEnv``.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# package -> the project packages it may import (besides itself)
LAYERS: dict[str, set[str]] = {
    "commons_arena": set(),
    "policies": {"commons_arena"},
    "serving": {"commons_arena", "policies"},
    "experiments": {"commons_arena", "policies", "serving"},
    "commands": {"commons_arena", "policies", "serving", "experiments"},
}
NO_RLLIB = ("commons_arena", "policies", "serving")  # RLlib (and Ray) live where training lives: experiments/
# inside experiments, lowest first: each may import only those before it ("experiments": its top-level modules)
EXPERIMENT_LAYERS = ["experiments", "experiments.viewing", "experiments.evaluation", "experiments.training",
                     "experiments.studies", "experiments.bench", "experiments.examples"]
NO_RLLIB_IN_EXPERIMENTS = ("experiments", "experiments.viewing", "experiments.evaluation")  # RLlib: training and up


def shipped_packages() -> list[str]:
    """The top-level packages pyproject.toml puts in the wheel."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])


@functools.cache
def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of every shipped package."""
    files: dict[str, Path] = {}
    for package in shipped_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


@functools.cache
def tree_of(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once for all the checks here."""
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.cache
def nodes_of(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s syntax tree, walked once."""
    return tuple(ast.walk(tree_of(path)))


def imports_of(path: Path, module: str, is_package: bool) -> Iterator[tuple[str, ...]]:
    """Every import in ``path`` (absolute; relative ones resolved), wherever it stands, as the
    names it may load, most specific first: ``from pkg import name`` is ``(pkg.name, pkg)``,
    importing the module ``pkg.name`` if there is one and otherwise a name of ``pkg``."""
    for node in nodes_of(path):
        if isinstance(node, ast.Import):
            yield from ((alias.name,) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            yield from ((f"{base}.{alias.name}", base) for alias in node.names)


@functools.cache
def project_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    files = module_files()
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        imports = imports_of(path, module, path.name == "__init__.py")
        graph[module] = {next(n for n in names if n in files) for names in imports if any(n in files for n in names)}
        graph[module].discard(module)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as its modules in order (empty: none). A package's own ``__init__``
    importing its modules is the normal case; a module importing its package back is a cycle."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, node])):
                return found
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return []


def test_every_shipped_package_has_a_layer() -> None:
    """A new top-level package gets a place in the layers (here and in docs/architecture.md)."""
    assert sorted(shipped_packages()) == sorted(LAYERS)


def test_there_is_no_import_cycle_anywhere() -> None:
    graph = project_graph()
    assert len(graph) > 80, "the graph lost modules: is the package list right?"
    assert "commands.cli" in graph and "serving.app" in graph and "policies.focal" in graph
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in project_graph().items() if module.split(".")[0] == package
        for target in targets if target.split(".")[0] not in LAYERS[package] | {package}
    )
    assert not wrong, f"{package} may import only {sorted(LAYERS[package])}: " + "; ".join(wrong)


@pytest.mark.parametrize("package", NO_RLLIB)
def test_no_rllib_below_experiments(package: str) -> None:
    files = module_files()
    wrong = sorted(
        f"{module} imports {name}"
        for module, path in files.items() if module.split(".")[0] == package
        for names in imports_of(path, module, path.name == "__init__.py")
        if (name := names[-1]).split(".")[0] == "ray"
    )
    assert not wrong, f"{package} must not import Ray/RLlib (training lives in experiments/): " + "; ".join(wrong)


def experiment_layer(module: str) -> str:
    """The sub-layer of an ``experiments`` module (its sub-package, or ``experiments`` for a top-level module)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and ".".join(parts) in EXPERIMENT_LAYERS) \
        else "experiments"


def test_every_experiments_subpackage_has_a_layer() -> None:
    packages = {experiment_layer(m) for m, path in module_files().items()
                if m.split(".")[0] == "experiments" and path.name == "__init__.py"}
    assert packages == set(EXPERIMENT_LAYERS), "a new experiments/ sub-package gets a place in EXPERIMENT_LAYERS"


def test_experiments_subpackages_import_only_the_layers_below_them() -> None:
    rank = {layer: i for i, layer in enumerate(EXPERIMENT_LAYERS)}
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in project_graph().items() if module.split(".")[0] == "experiments"
        for target in targets if target.split(".")[0] == "experiments"
        and rank[experiment_layer(target)] > rank[experiment_layer(module)]
    )
    assert not wrong, f"experiments/ stacks {' <- '.join(EXPERIMENT_LAYERS)}: " + "; ".join(wrong)


def test_no_rllib_in_evaluation() -> None:
    wrong = sorted(
        f"{module} imports {name}"
        for module, path in module_files().items()
        if module.split(".")[0] == "experiments" and experiment_layer(module) in NO_RLLIB_IN_EXPERIMENTS
        for names in imports_of(path, module, path.name == "__init__.py")
        if (name := names[-1]).startswith("ray.rllib") or name.startswith("ray.tune")
    )
    assert not wrong, "evaluation plays and measures; RLlib is training's: " + "; ".join(wrong)


def test_the_checks_see_lazy_imports_and_cycles(tmp_path: Path) -> None:
    """The graph counts an import inside a function; the cycle search finds a three-module loop."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from ray.rllib.core import Columns\n    from . import sibling\n")
    assert list(imports_of(source, "pkg.m", is_package=False)) == [("ray.rllib.core.Columns", "ray.rllib.core"),
                                                                   ("pkg.sibling", "pkg")]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


# ------------------------------------------------------------------ the one episode loop

LOOP_NAMES = {"run_episode", "FocalEnv"}
SUBSTRATE = ("commons_arena", "policies")  # where the loop's parts are defined
EPISODE_LOOP_ALLOWED = {
    "experiments.evaluation.engine": "the engine: the one episode loop",
    "serving.session": "a front door: a remote client steps its seats of a FocalEnv, the server plays none itself",
    "experiments.training.env": "RLlib's env: RLlib steps the focal seats (a training env, not an episode loop)",
    "experiments.bench.scripted": "a benchmark of the substrate itself (FocalEnv's env and policy timers)",
    "experiments.bench.step_ab": "a benchmark of the substrate itself (step time, A/B)",
    "experiments.bench.serve": "a benchmark: the server against a local FocalEnv stepped the same way",
    "experiments.bench.serve_profile": "a benchmark: the serving layer's per-message work against a local FocalEnv "
                                       "stepped the same way",
    "experiments.bench.universal_shapes": "a benchmark of the shape-free networks (FocalEnv's observations only)",
    "serving.seat_references": "the server's references for an ended session: serving lies below experiments, so it "
                               "plays them with the substrate's run_episode",
}


def loop_uses(path: Path) -> list[int]:
    """Lines of ``path`` that use ``run_episode`` or ``FocalEnv`` (a call, an attribute, a
    reference), imports and strings not counted."""
    return sorted({node.lineno for node in nodes_of(path)
                   if (isinstance(node, ast.Name) and node.id in LOOP_NAMES)
                   or (isinstance(node, ast.Attribute) and node.attr in LOOP_NAMES)})


def test_episodes_are_played_by_the_engine_only() -> None:
    users = {module: lines for module, path in module_files().items()
             if module.split(".")[0] not in SUBSTRATE and (lines := loop_uses(path))}
    wrong = sorted(f"{module} (lines {lines})" for module, lines in users.items() if module not in EPISODE_LOOP_ALLOWED)
    assert not wrong, ("play episodes through experiments.evaluation.engine.play (an Observer sees every tick), "
                       "not run_episode / FocalEnv: " + "; ".join(wrong))
    stale = sorted(set(EPISODE_LOOP_ALLOWED) - set(users))
    assert not stale, f"allowed but no longer playing episodes themselves (drop them from the list): {stale}"


def test_the_loop_check_sees_calls_and_attributes(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from policies.focal import FocalEnv, run_episode\n'run_episode'\n"
                      "x = focal.run_episode(env, p, 1)\ny = FocalEnv.from_scenario('standard', ())\n")
    assert loop_uses(source) == [3, 4]


# ------------------------------------------------------------------ kinds and networks are objects

def kind_flags() -> set[str]:
    """The flags an experiment kind carries (its ClassVar bools): read by its own hooks only."""
    from experiments.training.kind import Kind

    return {name for name, value in vars(Kind).items() if isinstance(value, bool)}


def object_switches(path: Path, flags: set[str], names: set[str]) -> list[str]:
    """Where ``path`` reads a kind's flag (``kind.<flag>``, ``args.kind.<flag>``, ``kind_of(x).<flag>``) or
    compares a network by name (``network == "cells"``, ``args.network in (...)``)."""
    found = []
    for node in nodes_of(path):
        if isinstance(node, ast.Attribute) and node.attr in flags:
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id in ("kind", "self")) or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "kind") or \
                    (isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "kind_of"):
                found.append(f"line {node.lineno}: reads the kind's {node.attr!r}")
        elif isinstance(node, ast.Compare) and "network" in ast.unparse(node):
            said = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)} & names
            if said:
                found.append(f"line {node.lineno}: compares the network with {sorted(said)}")
    return found


def test_kinds_and_networks_are_asked_not_switched_on() -> None:
    """No kind flag is read outside the kinds (kind.py, kinds.py) and no network name compared outside networks.py: code asks
    the object (its hooks), and a new kind or network is one class in its registry."""
    from experiments.training.args import TrainArgs
    from experiments.training.networks import NETWORKS

    flags, names = kind_flags(), set(NETWORKS)
    assert {"shape_free", "league", "switches_populations"} <= flags
    homes = {"experiments.training.kind", "experiments.training.kinds", "experiments.training.networks"}
    wrong = sorted(f"{module} {where}" for module, path in module_files().items() if module not in homes
                   for where in object_switches(path, flags, names))
    assert not wrong, "ask the kind (experiments/training/kind.py) or the network (networks.py): " + "; ".join(wrong)
    assert not flags & set(dir(TrainArgs)), "TrainArgs forwards a kind flag: ask args.kind's hooks instead"


def test_the_object_check_sees_flags_and_names(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("if args.kind.mixed:\n    pass\nx = kind.league\ny = setup.league\n"
                      "z = args.network == 'cells'\nw = spec in ('cells', 'mlp')\n")
    assert object_switches(source, {"mixed", "league"}, {"cells", "mlp"}) == [
        "line 1: reads the kind's 'mixed'", "line 3: reads the kind's 'league'",
        "line 5: compares the network with ['cells']"]


# ------------------------------------------------------------------ one name per idea

# the same public name defined in several modules, allowed only where it is one idea (with why)
SHARED_NAMES = {
    "Args": "the arguments of each hand-run benchmark script (experiments/bench/, `python -m`)",
    "main": "the entry point of each hand-run benchmark script and of the command line",
}
# module names used twice, allowed only where one mirrors the other (with why)
SHARED_MODULE_NAMES = {
    "evaluate": "commands/evaluate.py is the command of experiments/evaluation/evaluate.py",
    "train": "commands/train.py is the command of experiments/training/train.py",
    "serve": "experiments/bench/serve.py benchmarks what commands/serve.py starts",
    "tournament": "experiments/bench/tournament.py benchmarks experiments/evaluation/tournament.py",
    "env": "experiments/bench/env.py benchmarks the env; experiments/training/env.py is RLlib's env of it",
    "scripted": "experiments/bench/scripted.py benchmarks scripted seats; training/scripted.py plays them in RLlib",
}


def public_definitions() -> dict[str, list[str]]:
    """Public name -> the modules whose top level defines it (a function or a class)."""
    out: dict[str, list[str]] = {}
    for module, path in module_files().items():
        for node in tree_of(path).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                out.setdefault(node.name, []).append(module)
    return out


def test_no_public_name_means_two_things() -> None:
    twice = {name: modules for name, modules in public_definitions().items() if len(modules) > 1}
    wrong = sorted(f"{name}: {', '.join(modules)}" for name, modules in twice.items() if name not in SHARED_NAMES)
    assert not wrong, "one name per idea: rename one of " + "; ".join(wrong)
    stale = sorted(set(SHARED_NAMES) - set(twice))
    assert not stale, f"no longer defined twice (drop them from SHARED_NAMES): {stale}"


def test_no_module_name_means_two_things() -> None:
    names: dict[str, list[str]] = {}
    for module, path in module_files().items():
        if path.name != "__init__.py":
            names.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    twice = {name: modules for name, modules in names.items() if len(modules) > 1}
    wrong = sorted(f"{name}: {', '.join(modules)}" for name, modules in twice.items()
                   if name not in SHARED_MODULE_NAMES)
    assert not wrong, "one module name per idea: rename one of " + "; ".join(wrong)
    assert not sorted(set(SHARED_MODULE_NAMES) - set(twice)), "drop the names no longer shared from SHARED_MODULE_NAMES"
