"""One way out to the disk: no shipped module but ``commons_arena/files.py`` opens a file for writing.

Read from the source (``ast``) of every shipped package, so a write in a lazy branch counts too.
What counts as writing (:func:`writes_in`):

* ``open(path, mode)``, ``x.open(mode)``, ``io.open``, ``os.fdopen``, ``gzip.open``, ... with a
  mode holding ``w``, ``a``, ``x`` or ``+`` (a mode that is not a constant counts: it could);
* ``os.open`` with a flag naming ``O_WRONLY``, ``O_RDWR``, ``O_CREAT``, ``O_APPEND`` or ``O_TRUNC``;
* a method that writes, makes, moves or removes by path: ``write_text``, ``write_bytes``, ``savefig``,
  ``to_csv``/``to_json``/``tofile``/... given a path, ``mkdir``, ``touch``, ``unlink``, ``rmdir``, ``rename``, ``symlink_to``,
  ``hardlink_to``, ``save_to_path``, and ``Path.replace(target)`` (one positional argument, no
  keyword: ``str.replace`` takes two);
* a module function that does: ``os.replace/rename/renames/remove/unlink/rmdir/removedirs/mkdir/
  makedirs/symlink/link/truncate/mkfifo``, ``shutil.copy/copy2/copyfile/copytree/move/rmtree``,
  ``tempfile.mkstemp/NamedTemporaryFile``, ``np.save/savez/savez_compressed/savetxt``,
  ``torch.save``, ``pickle.dump``, ``safetensors``' ``save_file``, ``sqlite3.connect`` (unless
  its path is a read-only ``mode=ro`` URI), tensorboard's ``SummaryWriter``, also when imported by
  name (``from shutil import rmtree``).

A library that must own its file is allowed in :data:`ALLOWED` with the reason; the test also
fails on an allowance no longer used, so the list stays true.
"""

from __future__ import annotations

import ast
import functools
import re

import pytest

from tests.test_layout import ROOT, module_files, tree_of

WRITER = "commons_arena/files.py"
MODE = re.compile(r"^[rwxabt+U]{1,4}$")
WRITE_MODE = re.compile(r"[wax+]")
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
METHODS = {"write_text", "write_bytes", "savefig", "to_csv", "to_parquet", "to_pickle", "to_json", "tofile",
           "mkdir", "touch", "unlink", "rmdir", "rename", "symlink_to", "hardlink_to", "save_to_path"}
FUNCTIONS = {
    "os": {"replace", "rename", "renames", "remove", "unlink", "rmdir", "removedirs", "mkdir", "makedirs", "symlink",
           "link", "truncate", "mkfifo"},
    "shutil": {"copy", "copy2", "copyfile", "copytree", "move", "rmtree", "copyfileobj"},
    "tempfile": {"mkstemp", "NamedTemporaryFile"},
    "np": {"save", "savez", "savez_compressed", "savetxt"},
    "numpy": {"save", "savez", "savez_compressed", "savetxt"},
    "torch": {"save"},
    "pickle": {"dump"},
    "safetensors.torch": {"save_file"},
    "sqlite3": {"connect"},
    "tensorboardX": {"SummaryWriter"},
    "torch.utils.tensorboard": {"SummaryWriter"},
}
OPENERS = {"open", "fdopen"}  # builtins.open, io.open, os.fdopen, gzip.open, Path.open, ...

# (module file, call) -> why a library, not files.py, owns that file
ALLOWED: dict[tuple[str, str], str] = {
    ("experiments/training/export.py", "save_to_path"):
        "RLlib writes its own checkpoint folder (many files, its own format); the data-only policy beside it "
        "goes through files.write_file",
    ("experiments/training/reporting.py", "tensorboardX.SummaryWriter"):
        "tensorboardX owns its event files, appended while training; the run folder is made by files.make_folder",
    ("experiments/evaluation/store.py", "sqlite3.connect"):
        "SQLite owns its database and journal files; the path is checked first by files.check_target "
        "(no link, no special file, no input)",
    ("policies/oracle.py", "os.open"):
        "opens os.devnull to silence the MILP solver's C output: not a file anyone reads",
}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _imported_names(nodes: list[ast.AST]) -> dict[str, str]:
    """Local name -> ``module.function`` for ``from module import function`` of a function listed above."""
    names = {}
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module in FUNCTIONS:
            for alias in node.names:
                if alias.name in FUNCTIONS[node.module]:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _module_aliases(nodes: list[ast.AST]) -> dict[str, str]:
    """Local name -> module, for ``import module as name`` of a module listed above."""
    return {alias.asname: alias.name for node in nodes if isinstance(node, ast.Import)
            for alias in node.names if alias.asname and alias.name in FUNCTIONS}


def _mode(call: ast.Call, position: int) -> ast.AST | None:
    for keyword in call.keywords:
        if keyword.arg == "mode":
            return keyword.value
    return call.args[position] if len(call.args) > position else None


def _read_only_uri(node: ast.AST | None) -> bool:
    text = ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return "mode=ro" in text


def writes_in(source: str | ast.Module) -> list[tuple[int, str]]:
    """(line, call) of every call in ``source`` (text or its parsed tree) that writes to the disk (the rules in the
    module docstring)."""
    nodes = list(ast.walk(ast.parse(source) if isinstance(source, str) else source))  # walked once, read three times
    imported = _imported_names(nodes)
    aliases = _module_aliases(nodes)
    found = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        dotted = _dotted(func)
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        module = dotted.rsplit(".", 1)[0] if "." in dotted else ""
        module = aliases.get(module, module)
        if dotted in imported:
            dotted = imported[dotted]
            module, name = dotted.rsplit(".", 1)
        if name in OPENERS and dotted != "os.open":
            # open(path, mode) / io.open / gzip.open / os.fdopen(fd, mode): the mode is the 2nd; path.open(mode): the 1st
            method = isinstance(func, ast.Attribute) and module not in ("io", "os", "gzip", "bz2", "lzma", "codecs")
            mode = _mode(node, 0 if method else 1)
            if mode is None:
                continue
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
                if method and not MODE.match(mode.value):
                    continue  # not a file mode: some other object's open ("ws" of a session store)
                if WRITE_MODE.search(mode.value):
                    found.append((node.lineno, f"{dotted or name}({mode.value!r})"))
            else:
                found.append((node.lineno, f"{dotted or name}(mode not a constant)"))
        elif dotted == "os.open":
            flags = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in ast.walk(node)}
            if flags & WRITE_FLAGS:
                found.append((node.lineno, "os.open"))
        elif module in FUNCTIONS and name in FUNCTIONS[module]:
            if dotted == "sqlite3.connect" and _read_only_uri(node.args[0] if node.args else None):
                continue
            found.append((node.lineno, f"{module}.{name}"))
        elif isinstance(func, ast.Attribute) and name in METHODS and module not in FUNCTIONS:
            if name.startswith("to") and not (node.args or node.keywords):
                continue  # df.to_json() returns text; to_json(path) writes
            found.append((node.lineno, name))
        elif isinstance(func, ast.Attribute) and name == "replace" and len(node.args) == 1 and not node.keywords \
                and not isinstance(node.args[0], ast.Constant):
            found.append((node.lineno, "replace"))
    return sorted(found)


@functools.cache
def shipped_writes() -> dict[tuple[str, str], list[int]]:
    """(module file, call) -> lines, for every write outside the writer."""
    out: dict[tuple[str, str], list[int]] = {}
    for path in module_files().values():
        rel = path.relative_to(ROOT).as_posix()
        if rel == WRITER:
            continue
        for line, call in writes_in(tree_of(path)):
            key = (rel, call.split("(")[0])
            out.setdefault(key, []).append(line)
    return out


def test_no_module_but_the_writer_opens_a_file_for_writing() -> None:
    """Every file a command writes goes through commons_arena.files (ARCHITECTURE.md rule 22)."""
    stray = {key: lines for key, lines in shipped_writes().items() if key not in ALLOWED}
    assert not stray, "write through commons_arena.files instead (write_file, write_figure, make_folder, ...):\n" + \
        "\n".join(f"  {path}:{lines[0]}: {call}" for (path, call), lines in sorted(stray.items()))


def test_every_allowance_is_still_used() -> None:
    used = set(shipped_writes())
    assert not set(ALLOWED) - used, f"allowances no longer needed: {sorted(set(ALLOWED) - used)}"


@pytest.mark.parametrize("source", [
    "open(p, 'w')", "open(p, mode='ab')", "open(p, 'r+')", "open(p, m)", "Path(p).open('w')", "p.open(mode='x')",
    "io.open(p, 'wb')", "os.fdopen(fd, 'w')", "gzip.open(p, 'wt')", "os.open(p, os.O_WRONLY | os.O_CREAT)",
    "p.write_text('x')", "(out / 'a').write_bytes(b)", "fig.savefig(p)", "p.mkdir(parents=True)", "p.unlink()",
    "p.rename(q)", "p.replace(q)", "p.symlink_to(q)", "os.replace(a, b)", "os.rename(a, b)", "os.remove(p)",
    "os.makedirs(p)", "os.symlink(a, b)", "shutil.copytree(a, b)", "shutil.rmtree(p)", "shutil.copy2(a, b)",
    "tempfile.mkstemp()", "tempfile.NamedTemporaryFile(delete=False)", "np.save(p, a)", "np.savez_compressed(p, a=a)",
    "numpy.savetxt(p, a)", "df.to_csv(p)", "df.to_json(path_or_buf=p)", "torch.save(m, p)", "pickle.dump(x, fh)", "sqlite3.connect(p)", "sqlite3.connect(str(p))",
    "from shutil import rmtree\nrmtree(p)", "from os import replace as mv\nmv(a, b)", "import numpy as xp\nxp.save(p, a)",
    "from safetensors.torch import save_file\nsave_file(t, p)", "from tensorboardX import SummaryWriter\nSummaryWriter(p)",
    "algo.save_to_path(p)",
])
def test_the_scan_sees_a_write(source: str) -> None:
    assert writes_in(source), source


@pytest.mark.parametrize("source", [
    "open(p)", "open(p, 'r')", "open(p, 'rb')", "p.open()", "p.open(encoding='utf-8')", "store.open('ws')",
    "os.open(p, os.O_RDONLY | os.O_NONBLOCK)", "text.replace('a', 'b')", "name.replace('-', '_')", "p.read_text()",
    "dataclasses.replace(x, a=1)", "replace(args, seed=1)", "sqlite3.connect(f'file:{p}?mode=ro', uri=True)",
    "tempfile.mkdtemp()", "json.dumps(x)", "p.exists()", "sidecar.to_json()", "df.to_csv()",
])
def test_the_scan_passes_a_read(source: str) -> None:
    assert not writes_in(source), source
