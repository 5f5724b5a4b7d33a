"""Every code block of README.md, docs/ and the checkpoints' READMEs that is a command or a Python example is run
or checked here, so the docs cannot drift from the code.

* **Python blocks** run as written, each in a process of its own from an empty folder (the package on
  ``PYTHONPATH``): the quick ones in the fast loop, forked from an interpreter that imported only third-party
  packages (:data:`ZYGOTE`); the ones that talk to a server at ``127.0.0.1:8000`` in a fresh interpreter against a
  server started here (its own port put in place of 8000), marked ``slow``. :data:`PYTHON` says how each block runs.
* **Commands**: every ``commons-arena`` line is parsed by the command line's own parser (flags and values exist:
  fast). :data:`RUNS` then runs each command that can run on this machine in a few seconds, with its smallest
  budget (``--seeds 1``, ``--count 2``...: :data:`SMALLEST`), from a folder where ``docs/``, ``experiments/`` and
  ``checkpoints/`` are the checkout's (``slow``). Each command that does not run here is in :data:`NOT_RUN` with the
  reason (it trains for minutes, it needs a run that only training makes, it joins a cluster, ...) and, where one
  exists, the test that covers it; a command in neither table fails :func:`test_every_block_is_accounted_for`.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "checkpoints").glob("*/README.md"))]
BLOCK = re.compile(r"^```(bash|python)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks() -> list[tuple[str, int, str, str]]:
    """(page relative to the checkout, line, language, body) of every bash and python block; an indented block
    (four spaces, after a blank line, outside a fence) whose first line is a ``commons-arena`` command is bash."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            out.append((page.relative_to(ROOT).as_posix(), text[:m.start()].count("\n") + 1, m.group(1), m.group(2)))
        out += [(page.relative_to(ROOT).as_posix(), line, "bash", body) for line, body in indented_blocks(text)]
    return sorted(out, key=lambda b: (PAGES.index(ROOT / b[0]), b[1]))


def indented_blocks(text: str) -> list[tuple[int, str]]:
    """(first line, dedented body) of each indented code block that starts with a ``commons-arena`` command."""
    out, lines, fenced, i = [], text.split("\n"), False, 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            start = i
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                i += 1
            body = "\n".join(line[4:] for line in lines[start:i]).strip("\n") + "\n"
            if body.startswith("commons-arena "):
                out.append((start + 1, body))
            continue
        i += 1
    return out


def commands(body: str) -> list[str]:
    """The commands of a bash block: continuation lines joined, comments and output lines (``#  ->``) dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line, comments=True)
        if words:
            out.append(shlex.join(words))
    return out


def all_commands() -> list[tuple[str, int, str]]:
    return [(page, line, command) for page, line, lang, body in blocks() if lang == "bash" for command in commands(body)]


# --------------------------------------------------------------------------- how each one runs
# Python blocks, by their page and first line: "fast" (runs in the fast loop), "server" (needs the server at :8000).
PYTHON: dict[tuple[str, str], str] = {
    ("README.md", "import commons_arena"): "fast",
    ("docs/environment.md", "import commons_arena"): "fast",
    ("docs/environment.md", "from policies.focal_vector import BackgroundMixture, FocalVectorEnv, seat_observation_scale"): "fast",
    ("docs/environment.md", "from pathlib import Path"): "fast",
    ("docs/for_env_authors.md", "import commons_arena"): "fast",
    ("docs/families.md", "from commons_arena.family import generate_scenarios, load_split, refuse_heldout, scenario_to_toml"): "fast",
    ("docs/codecs.md", "from policies.codecs import make_codec, codecs_for_role, DEFAULT_CODECS, CodedPolicy"): "fast",
    ("docs/codecs.md", "from policies.codecs import make_batch_codec"): "fast",
    ("docs/serving.md", "import commons_arena"): "fast",
    ("docs/serving.md", "from serving.client import ArenaClient, play_episode"): "server",
    ("docs/serving.md", "from openenv.core import GenericEnvClient"): "server",
    ("docs/serving.md", "import asyncio, json"): "server",
}
# What a block needs that the page defines in the prose around it.
PRELUDE = {("docs/codecs.md", "from policies.codecs import make_codec, codecs_for_role, DEFAULT_CODECS, CodedPolicy"):
           'import commons_arena\nconfig = commons_arena.load_scenario("standard")\n'}
# A line the page says raises (its comment): run it expecting that error.
RAISES = re.compile(r"^(?P<code>\S.*?)\s*#\s*(?P<error>[A-Z][A-Za-z]*Error)\b")

# The smallest budget of each flag a command of the docs uses (substituted before it runs).
SMALLEST = [(re.compile(r"--seeds \d+"), "--seeds 2"), (re.compile(r"--count \d+"), "--count 2"),
            (re.compile(r"(gen/)?00003_<hash>\.toml"), "gen/00000_*.toml"),
            (re.compile(r"\bmy_cluster\.toml|\bown\.toml"), "docs/examples/own_cluster.toml"),
            (re.compile(r"\bROSTER\.toml"), "docs/roster_example.toml")]
# Commands run (slow), by their text before substitution: each regex must match at least one command.
RUNS = [
    r"^commons-arena scenarios$",
    r"^commons-arena scenarios generate broad --count 50 --seed 7 --out gen/",
    r"^commons-arena scenarios check ",
    r"^commons-arena play ",
    r"^commons-arena replay run\.jsonl",
    r"^commons-arena evaluate --allocators planner learned:universal --scenarios standard my_cluster\.toml",
    r"^commons-arena evaluate --allocators planner learned:honest --scenarios crisis$",
    r"^commons-arena benchmark (planner|best_fit|learned:universal) --suite docs/examples/own_suite\.toml",
    r"^commons-arena tournament --scenarios standard --allocators edf",
    r"^commons-arena serve-check --url",
    r"^commons-arena verify run\.jsonl",
    r"^commons-arena evaluate --allocators edf --record",
    r"^commons-arena compare-checkpoint checkpoints/universal",
]
# Commands not run here, by regex, with the reason (and the test that covers what they do, where one does).
NOT_RUN: list[tuple[str, str]] = [
    (r"learned:runs/|runs/latest|runs/allocator_|runs/selfplay|--resume runs/|seed-report|compare-checkpoint (runs|/tmp)/|"
      r"--config runs/",
     "needs a run that only training makes"),
    (r"^commons-arena scenarios generate my_family\.toml", "a family file of the reader's own (the broad family runs)"),
    (r"^commons-arena (train|distil|exploit|arms-race|psro) |^SEEDS=|^'SEEDS=",
     "trains for minutes (tests/experiments/training and tests/experiments/studies: tiny runs)"),
    (r"^commons-arena (need-gap|fixed-codes|frontier)", "a measurement of minutes (tests/experiments/evaluation and "
     "tests/experiments/studies/test_frontier.py: small ones)"),
    (r"--suite team-search", "choosing the best fixed code plays 4,320 episodes first: minutes (the own_suite "
     "benchmarks run)"),
    (r"'learned:<run>/best|OLD_CHECKPOINT", "a placeholder for a run or an old checkpoint of the reader's own"),
    (r"^commons-arena tournament (docs/roster_example|ROSTER)\.toml", "the example roster is 1,080 episodes, "
     "minutes (rosters: tests/experiments/evaluation/test_tournament.py; the flag form runs)"),
    (r"--address ray://|^RAY_ADDRESS=", "joins a Ray cluster"),
    (r"^commons-arena evaluate --scenarios all", "every scenario x every allocator: minutes (evaluate runs above)"),
    (r"--suite heldout-allocator", "the 80-scenario held-out suite: minutes (the own_suite benchmarks run)"),
    (r"--suite docs/examples/validation-allocator\.toml", "32 evaluation scenarios whose oracle anchors are played, not "
     "shipped: minutes (test_benchmark.py loads the suite; the own_suite benchmarks run)"),
    (r"^commons-arena serve( |$)", "a server that runs until stopped (tests/serving starts the same app)"),
    (r"^openenv validate", "openenv-core is a test-only dependency (tests/serving/test_openenv.py runs it)"),
    (r"^curl ", "the HTTP routes (tests/serving/test_app.py sends these requests)"),
    (r"^bash scripts/main\.sh", "the whole pipeline: set-up, training, tournament (scripts/main.sh, by hand)"),
    (r"-m pytest", "the test suite itself"),
    (r"^python -m experiments\.studies\.observability", "a study of minutes (its tests: tests/experiments/studies)"),
    (r"^python -m experiments\.examples\.ppo_one_seat", "trains for minutes (tests/experiments/examples: a small run)"),
    (r"^cp ", "copies a training run's files (the recipe's last step)"),
    (r"^python scripts/planner_hard_cap\.py", "a paired measurement of about a minute (30 seeds x 9 allocators, the "
     "oracle's MILP included); tests/policies/test_planner.py plays both hard-cap example files"),
]


def rule_for(command: str) -> str:
    """'run', or the reason it is not run; AssertionError when no table names it."""
    for reason_pattern, reason in NOT_RUN:
        if re.search(reason_pattern, command):
            return reason
    if any(re.search(p, command) for p in RUNS):
        return "run"
    raise AssertionError(f"no rule for the documented command {command!r}: add it to RUNS or NOT_RUN")


SEEDED = ("commons-arena scenarios check ", "commons-arena evaluate ", "commons-arena benchmark ",
          "commons-arena tournament --", "commons-arena compare-checkpoint ")  # they take --seeds: two (a paired interval needs two) when the page gives none


def smallest(command: str) -> str:
    for pattern, replacement in SMALLEST:
        command = pattern.sub(replacement, command)
    if command.startswith(SEEDED) and "--seeds" not in command:
        command += " --seeds 2"
    return command


def test_every_block_is_accounted_for():
    """A new example must say how it is tested: each Python block in PYTHON, each command in RUNS or NOT_RUN."""
    seen = set()
    for page, line, lang, body in blocks():
        if lang == "python":
            key = (page, body.splitlines()[0])
            assert key in PYTHON, f"{page}:{line}: a Python block with no entry in PYTHON: {key[1]!r}"
            seen.add(key)
        else:
            for command in commands(body):
                rule_for(command)
    assert seen == set(PYTHON), f"entries of PYTHON no page has: {set(PYTHON) - seen}"
    used = [p for p in RUNS if any(re.search(p, c) for _, _, c in all_commands())]
    assert used == RUNS, f"RUNS entries matching no documented command: {set(RUNS) - set(used)}"


def test_every_documented_command_parses():
    """Each commons-arena line, its placeholders filled, is a command the parser takes (flags, values, choices)."""
    from commands.cli import _parse
    from commands.train import config_defaults

    parsed: set[str] = set()  # a command documented on several pages parses once
    for page, line, command in all_commands():
        if not command.startswith("commons-arena ") or command in parsed:
            continue
        parsed.add(command)
        args = shlex.split(smallest(command))[1:]
        os.chdir(ROOT)  # --config paths are the checkout's
        try:
            defaults = config_defaults(args)
        except ValueError:  # --config names a run's file that only training writes: the flags alone
            assert "training makes" in rule_for(command), f"{page}:{line}: `{command}`: its --config does not load"
            defaults = None
        try:
            _parse(args, debug=False, train_defaults=defaults)
        except SystemExit as exc:
            raise AssertionError(f"{page}:{line}: `{command}` does not parse (exit {exc.code})") from None


def _python_blocks(kind: str) -> list[tuple[str, int, str]]:
    return [(page, line, body) for page, line, lang, body in blocks()
            if lang == "python" and PYTHON.get((page, body.splitlines()[0])) == kind]


def _runnable(page: str, body: str) -> str:
    """The block as a script: its prelude, and each line the page says raises wrapped to expect that error."""
    lines = []
    for line in body.splitlines():
        m = RAISES.match(line)
        if m:
            code, error = m.group("code"), m.group("error")
            lines += [f"try:\n    {code}\nexcept {error}:\n    pass",
                      f"else:\n    raise AssertionError({(page + ': expected ' + error + ' from ' + code)!r})"]
        else:
            lines.append(line)
    return PRELUDE.get((page, body.splitlines()[0]), "") + "\n".join(lines) + "\n"


def _run_python(source: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", source], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


# The fast blocks run in processes forked from one interpreter (the zygote) that imported only the third-party
# packages they use, so those load once and not once a block. The child runs its block as `python -c` does: a new
# __main__, its empty folder the working directory (sys.path[0] is ""), the checkout's packages imported afresh,
# nothing on stdin; its exit status and stderr come back.
ZYGOTE = r"""
import atexit, json, os, sys, traceback, types
import gymnasium, numpy, pettingzoo.utils, pydantic, scipy.optimize  # third-party only
for request in sys.stdin:
    source, cwd, errors = json.loads(request)
    pid = os.fork()
    if pid == 0:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        os.chdir(cwd)
        sys.modules["__main__"] = main = types.ModuleType("__main__")
        try:
            exec(compile(source, "<string>", "exec"), vars(main))
            atexit._run_exitfuncs()
            code = 0
        except SystemExit as exit:
            if exit.code is not None and not isinstance(exit.code, int):
                print(exit.code, file=sys.stderr)
            code = exit.code if isinstance(exit.code, int) else exit.code is not None
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen([sys.executable, "-c", ZYGOTE], cwd=tmp_path_factory.mktemp("zygote"), env=env,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdin is not None
        yield process
        process.stdin.close()
        process.wait(timeout=60)


def _run_forked(zygote: subprocess.Popen[str], source: str, folder: Path, timeout: float) -> tuple[int, str]:
    """(exit status, stderr) of ``source`` run by a child of the zygote from the empty folder ``folder/run``."""
    assert zygote.stdin is not None and zygote.stdout is not None
    (folder / "run").mkdir()
    zygote.stdin.write(json.dumps([source, str(folder / "run"), str(folder / "stderr")]) + "\n")
    zygote.stdin.flush()
    assert select.select([zygote.stdout], [], [], timeout)[0], f"no answer in {timeout} s"
    return int(zygote.stdout.readline()), (folder / "stderr").read_text()


@pytest.mark.parametrize(("page", "line", "body"), _python_blocks("fast"), ids=lambda v: str(v)[:30])
def test_python_examples_run(page, line, body, tmp_path, zygote):
    status, stderr = _run_forked(zygote, _runnable(page, body), tmp_path, timeout=120)
    assert status == 0, f"{page}:{line} failed:\n{stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.server
def test_python_examples_that_talk_to_a_server_run(tmp_path):
    from serving.app import running_server
    from serving.session import ServeSettings

    with running_server(ServeSettings()) as url:
        port = url.rsplit(":", 1)[1]
        for page, line, body in _python_blocks("server"):
            if "openenv" in body:
                pytest.importorskip("openenv", reason="openenv-core is the test-only `openenv` extra")
            source = _runnable(page, body).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            done = _run_python(source, tmp_path, timeout=300)
            assert done.returncode == 0, f"{page}:{line} failed:\n{done.stderr[-3000:]}"


@pytest.mark.slow
def test_commands_run(tmp_path):
    """Each command of RUNS, at its smallest budget, in page order: each block in a folder of its own (a later line
    may read what an earlier one of its block wrote) holding links to the checkout's docs/, experiments/ and
    checkpoints/; serve-check against a server started here."""
    from serving.app import running_server
    from serving.session import ServeSettings

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = []
    with running_server(ServeSettings()) as url:
        for index, (page, line, lang, body) in enumerate(blocks()):
            if lang != "bash":
                continue
            folder = tmp_path / f"block{index}"
            folder.mkdir()
            for name in ("docs", "experiments", "checkpoints"):
                (folder / name).symlink_to(ROOT / name)
            for command in commands(body):
                if rule_for(command) != "run":
                    continue
                args = [a.replace("http://127.0.0.1:8000", url) for a in shlex.split(smallest(command))[1:]]
                if args[0] == "serve-check":
                    args += ["--scenarios", "standard"]
                args = [str(next(folder.glob(a))) if "*" in a else a for a in args]
                done = subprocess.run([sys.executable, "-m", "commands", *args], cwd=folder, env=env,
                                      capture_output=True, text=True, timeout=900)
                assert done.returncode == 0, f"{page}:{line}: `{' '.join(args)}` failed:\n{done.stderr[-3000:]}"
                ran.append(command)
    assert {p for p in RUNS if any(re.search(p, c) for c in ran)} == set(RUNS)
