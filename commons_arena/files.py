"""The one way out to the disk: every file a command writes goes through :func:`write_file`.

``commons_arena.inputs`` is the one way in; this module is the one way out (ARCHITECTURE.md
rule 22). ``tests/test_files.py`` fails when code outside this module opens a file for writing.

Example::

    from commons_arena.files import check_outputs, make_folder, write_file, write_figure

    out = make_folder(Path(args.out))                 # created if missing; never a symlink
    check_outputs(out, ["scores.csv", "scores.png"], force=args.force)   # before any work
    write_file(out / "scores.csv", csv_text)          # str (UTF-8) or bytes
    write_figure(out / "scores.png", fig, dpi=120)    # a matplotlib figure
    write_file(safe_join(out, suite_name, "rows.json"), text)   # a name from input: checked

What every write holds to:

* **No links, no special files on the way.** The target is refused if it is a symlink, a
  folder, a FIFO or a device; its folder is refused if it is a symlink or not a folder.
  Folders are made by :func:`make_folder`, which refuses a symlink at each level it makes or
  enters below an existing ancestor.
* **Temp file + rename.** The bytes go to a temporary file beside the target (``O_EXCL``,
  never followed) and are renamed over it: a reader never sees half a file, a symlink
  planted after the check is replaced, never followed.
* **Never an input.** Every file read through :mod:`commons_arena.inputs` is remembered by
  identity (``st_dev``, ``st_ino``, and size and mtime so a recycled inode is not mistaken for
  it); writing over or removing one of them is refused, whatever name it is reached by (a
  hard link, ``OUT/../scenario.toml``). Records a command updates itself (a run's
  ``state.json``) are read with ``inputs.read_bytes(..., own=True)``.
* **Inside the output folder.** A name that comes from input is joined with :func:`safe_join`:
  no ``..``, no ``.``, no separator or NUL, at most :data:`MAX_NAME_BYTES` bytes.

Also here: :func:`toml_value` / :func:`toml_key` / :func:`toml_text`, the one TOML writer
(every string escaped as TOML requires, so a value holding a newline stays one value).

Errors are :class:`OutputError` (a ``ValueError``: the command line prints one line, exit 2).
"""

from __future__ import annotations

import math
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from commons_arena.inputs import is_input, what_is

MAX_NAME_BYTES = 200
"""longest single file or folder name a command writes (most file systems allow 255; a temp prefix needs room)"""

_UMASK = os.umask(0o022)
os.umask(_UMASK)


class OutputError(ValueError):
    """An output that would be written through a link, over an input, outside its folder or over an
    earlier file without ``--force``."""


def check_name(name: str, what: str = "name") -> str:
    """``name`` if it is one plain file or folder name (not empty, not ``.`` or ``..``, no ``/``, ``\\``
    or NUL, at most :data:`MAX_NAME_BYTES` bytes of UTF-8), else :class:`OutputError`."""
    if not isinstance(name, str) or not name:
        raise OutputError(f"{what} {name!r}: must be a non-empty name")
    if name in (".", "..") or any(c in name for c in "/\\\0"):
        raise OutputError(f"{what} {name[:60]!r}: must be one plain name (no '..', '/', '\\\\' or NUL): "
                          "a command writes only inside its output folder")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise OutputError(f"{what} {name[:60]!r}: not valid Unicode") from None
    if size > MAX_NAME_BYTES:
        raise OutputError(f"{what} {name[:60]!r}...: {size} bytes, over the limit of {MAX_NAME_BYTES}")
    return name


def safe_join(folder: str | os.PathLike[str], *names: str) -> Path:
    """``folder/name/...`` with each name checked by :func:`check_name` (use it for any name taken from
    input: a suite, a scenario, a member)."""
    return Path(folder).joinpath(*(check_name(n) for n in names))


def refuse_link(path: str | os.PathLike[str], what: str) -> None:
    """Refuse ``path`` if it is a symlink, dangling or not (a dangling one reads as free, then a write or a
    ``resolve()`` lands at its target): one line naming it."""
    path = Path(path)
    if path.is_symlink():
        raise OutputError(f"{path} is a symlink: a command never writes {what} through one; remove it "
                          "or choose another output folder")


def make_folder(folder: str | os.PathLike[str], new: bool = False,
                root: str | os.PathLike[str] | None = None) -> Path:
    """``folder``, created with its missing parents; refused if it, or a folder made on the way, is a
    symlink or not a folder, or (``new``) if it exists already. Existing ancestors above the first
    missing one are taken as they are (a user's ``runs`` may be a link to another disk; ``OUT``
    itself may not), except that with ``root`` (the command's output folder) no level from ``root``
    down to ``folder`` may be a symlink: ``make_folder(out / suite / policy, root=out)``."""
    folder = Path(folder)
    if root is not None:
        here, top = folder, Path(root)
        levels = [here, *here.parents]
        if top not in levels:
            raise OutputError(f"{folder} is not inside the output folder {top}")
        for level in levels[: levels.index(top) + 1]:
            refuse_link(level, "into a folder")
    if new and (folder.exists() or folder.is_symlink()):
        raise OutputError(f"{folder} exists already; a new folder was expected there")
    missing = []
    here = folder
    while not os.path.lexists(here) and here.parent != here:
        missing.append(here)
        here = here.parent
    if not missing:
        refuse_link(folder, "into a folder")
    elif not here.is_dir():
        raise OutputError(f"{here} is not a folder; choose another output folder")
    for level in reversed(missing):
        try:
            level.mkdir()
        except FileExistsError:
            pass
        refuse_link(level, "into a folder")
    refuse_link(folder, "into a folder")
    if not folder.is_dir():
        raise OutputError(f"{folder} is not a folder; choose another output folder")
    return folder


def check_target(path: str | os.PathLike[str], what: str = "a file") -> Path:
    """Refuse ``path`` as a place to write if it is a symlink, an existing non-regular file (a folder,
    a FIFO, a device) or one of the command's inputs; its folder must be a folder and not a symlink.
    Returns ``path``. :func:`write_file` calls it; a library that must own its file (SQLite) calls it
    before opening."""
    path = Path(path)
    check_name(path.name, "file name")
    refuse_link(path.parent, what)
    if not path.parent.is_dir():
        raise OutputError(f"{path.parent} is not a folder; choose another output folder")
    refuse_link(path, what)
    if path.exists():
        info = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(f"{path} exists and is {what_is(path)}, not a regular file; remove it or choose another "
                              "output")
        if is_input(info):
            raise OutputError(f"{path} is one of this command's inputs: a command never writes over its input; "
                              "choose another output folder")
    return path


def check_outputs(folder: str | os.PathLike[str], names: Iterable[str], force: bool, flag: str = "--force") -> None:
    """Before any work: refuse outputs ``folder/<name>`` that :func:`check_target` refuses (with or without
    ``force``) or that exist (without ``force``). A refused command has written nothing."""
    folder = Path(folder)
    refuse_link(folder, "a report")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder} is not a folder; choose another output folder")
    for name in names:
        path = safe_join(folder, *Path(name).parts) if "/" in name else safe_join(folder, name)
        if folder.exists():
            refuse_link(path, "a report")
            if path.parent.is_dir():
                check_target(path, "a report")
        if path.exists() and not force:
            raise OutputError(f"{path} already exists; pass {flag} to replace it")


RUN_LINK = "latest"  # the one link a command makes itself (point_link): a run parent's newest run


def check_tree(folder: str | os.PathLike[str]) -> None:
    """Before any work: refuse an existing output folder holding a symlink (but a run parent's ``latest``) or
    a special file anywhere inside it. :func:`write_file` would refuse it too, but only when it got there: after
    the work, with a half-written folder left behind."""
    for here, folders, names in os.walk(folder):
        for name in [*folders, *names]:
            item = Path(here) / name
            if item.is_symlink() and name != RUN_LINK:
                raise OutputError(f"{item} is a symlink: a command never writes through one; remove it or choose "
                                  "another output folder")
            if not item.is_symlink() and not (item.is_dir() or item.is_file()):
                raise OutputError(f"{item} is a special file; remove it or choose another output folder")


def _tmp_beside(path: Path) -> tuple[int, Path]:
    fd, name = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=path.parent)
    return fd, Path(name)


def _commit(tmp: Path, path: Path) -> None:
    os.chmod(tmp, 0o666 & ~_UMASK)  # as open() would have made it (mkstemp makes 0600)
    check_target(path)  # again, just before: a link or an input that appeared meanwhile is still refused
    os.replace(tmp, path)


def write_file(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (``str``: UTF-8) to ``path`` by temp file + rename, under every rule of this module.

    ``write_file(out / "scores.json", json.dumps(rows))``"""
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return _write_through(path, lambda fh: fh.write(payload))


class OutputStream:
    """A text file written line by line (a recording) under the rules of :func:`write_file`: the lines go
    to a temporary file beside ``path``, and :meth:`close` renames it into place (a killed process leaves
    only the ``.<name>.*.tmp`` file, never half a file at ``path``).

    ``with OutputStream(out / "run.jsonl") as stream: stream.write(line)``"""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = check_target(Path(path))
        fd, self._tmp = _tmp_beside(self.path)
        self._file: Any = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, text: str) -> None:
        self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Finish: the file appears at ``path`` (once; later calls do nothing)."""
        if self._file is None:
            return
        try:
            self._file.close()
            _commit(self._tmp, self.path)
        finally:
            self._file = None
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> OutputStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_through(path: str | os.PathLike[str], write: Any) -> Path:
    """``write(file object)`` into a temporary file beside ``path``, renamed over it (the rules of this module)."""
    target = check_target(Path(path))
    fd, tmp = _tmp_beside(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        _commit(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def write_figure(path: str | os.PathLike[str], figure: Any, **savefig: Any) -> Path:
    """A matplotlib figure saved to ``path`` (format from its suffix unless ``format=`` is given) like
    :func:`write_file`."""
    savefig.setdefault("format", Path(path).suffix.lstrip(".") or "png")
    return _write_through(path, lambda fh: figure.savefig(fh, **savefig))


def write_arrays(path: str | os.PathLike[str], **arrays: Any) -> Path:
    """numpy arrays saved as one compressed ``.npz`` at ``path`` like :func:`write_file`."""
    import numpy as np

    return _write_through(path, lambda fh: np.savez_compressed(fh, **arrays))


def append_line(path: str | os.PathLike[str], line: str) -> Path:
    """Append one line (a newline is added) to a log ``path`` (created if missing): never through a link
    (``O_NOFOLLOW``), never to a special file or an input. A log is the one file appended in place:
    a reader sees whole lines (one ``write``)."""
    path = check_target(Path(path))
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags, 0o666)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutputError(f"{path} is not a regular file; remove it")
        os.write(fd, (line.rstrip("\n") + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    return path


def remove_file(path: str | os.PathLike[str]) -> None:
    """Remove a file an earlier run wrote (a link itself is removed, never what it points to); refused
    for a folder, a special file or an input. Missing: nothing to do."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    info = os.stat(path, follow_symlinks=False)
    if not stat.S_ISLNK(info.st_mode):
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(f"{path} is not a regular file; a command removes only files it wrote")
        if is_input(info):
            raise OutputError(f"{path} is one of this command's inputs: a command never removes its input")
    path.unlink()


def rename_within(path: str | os.PathLike[str], aside: str | os.PathLike[str]) -> Path:
    """Rename a folder or file ``path`` to ``aside`` in the same folder (a rerun keeps the earlier run);
    refused if ``path`` is a link or an input, or ``aside`` exists."""
    path, aside = Path(path), Path(aside)
    refuse_link(path, "a move")
    if path.exists() and is_input(os.stat(path)):
        raise OutputError(f"{path} is one of this command's inputs: a command never moves its input")
    if aside.exists() or aside.is_symlink():
        raise OutputError(f"{aside} already exists; remove it")
    os.rename(path, aside)
    return aside


def point_link(link: str | os.PathLike[str], target: str) -> Path:
    """Point the symlink ``link`` at ``target`` (a name in the same folder) by link + rename: a run
    folder's ``latest``. Refused when ``link`` exists and is not a symlink."""
    link = Path(link)
    check_name(target, "link target")
    if link.exists() and not link.is_symlink():
        raise OutputError(f"{link} exists and is not a symlink; remove it")
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)
    return link


def publish_folder(staging: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Put the finished folder ``staging`` (made beside ``target`` with ``tempfile.mkdtemp(dir=...)`` and
    filled through :func:`write_file`) at ``target`` by one rename: whatever was at ``target`` (an older
    copy, a planted link) is moved aside first and removed as itself (a link is never followed). Another
    process publishing the same folder at the same time either wins or finds its copy."""
    staging, target = Path(staging), Path(target)
    if target.is_symlink() or target.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{target.name[:40]}-old-", dir=target.parent))
        os.replace(target, aside / "old")
        if (aside / "old").is_symlink():
            (aside / "old").unlink()
        remove_tree(aside)
    os.rename(staging, target)
    return target


def copy_folder(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Copy the regular files and folders under ``source`` to ``target`` (made fresh: an earlier one is
    removed first). A symlink or special file under ``source`` is refused: a copy is data only."""
    source, target = Path(source), Path(target)
    refuse_link(target, "a copy")
    if target.exists():
        remove_tree(target)
    for here, folders, names in os.walk(source):
        rel = Path(here).relative_to(source)
        make_folder(target / rel)
        for name in [*folders, *names]:
            item = Path(here) / name
            if item.is_symlink() or not (item.is_dir() or item.is_file()):
                raise OutputError(f"{item} is a symlink or special file: a copy holds regular files only")
        for name in names:
            from commons_arena.inputs import read_bytes

            write_file(target / rel / name, read_bytes(Path(here) / name, "file", max_bytes=1 << 34, own=True))
    return target


def remove_tree(folder: str | os.PathLike[str]) -> None:
    """Remove a folder an earlier run wrote, links in it removed as links (never followed); refused
    if the folder itself is a symlink or holds an input."""
    import shutil

    folder = Path(folder)
    refuse_link(folder, "a removal")
    if not folder.exists():
        return
    for here, _, names in os.walk(folder):
        for name in names:
            item = Path(here) / name
            if not item.is_symlink() and is_input(os.stat(item)):
                raise OutputError(f"{item} is one of this command's inputs: a command never removes its input")
    shutil.rmtree(folder)


# ------------------------------------------------------------------ the one TOML writer

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"cannot write {text[:40]!r} to TOML: it holds a lone surrogate (not Unicode text)")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_key(name: str) -> str:
    """A bare key when TOML allows one (``standard``), else a quoted one (``"split:broad-train"``)."""
    return name if _BARE_KEY.fullmatch(name) else _toml_string(name)


def toml_value(value: Any) -> str:
    """One value as inline TOML: bool, int, float (``inf``/``nan`` as TOML spells them), str (escaped:
    a newline, quote or control character stays inside the string), list/tuple, mapping (inline table)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }" \
            if value else "{}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def _toml_table(path: str, data: Mapping[str, Any], lines: list[str]) -> None:
    top = not path
    for key, value in data.items():
        if not isinstance(value, Mapping) and not (top and _is_table_list(value)):
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
    for key, value in data.items():
        if isinstance(value, Mapping):
            name = f"{path}.{toml_key(key)}" if path else toml_key(key)
            lines.extend(["", f"[{name}]"])
            _toml_table(name, value, lines)
        elif top and _is_table_list(value):
            for item in value:
                lines.extend(["", f"[[{toml_key(key)}]]"])
                _toml_table(toml_key(key), item, lines)


def toml_text(data: Mapping[str, Any], header: Iterable[str] = ()) -> str:
    """A TOML document: ``header`` lines as ``#`` comments, the top-level keys, then each nested table as
    ``[path.key]`` and each top-level list of tables as ``[[key]]`` (deeper ones inline).
    ``tomllib.loads(toml_text(d)) == d`` for any data TOML can hold."""
    lines = [f"# {line}".rstrip() for text in header for line in text.splitlines()]
    _toml_table("", data, lines)
    return "\n".join(lines).lstrip("\n") + "\n"


__all__ = ["MAX_NAME_BYTES", "OutputError", "OutputStream", "append_line", "check_name", "check_outputs", "check_target", "check_tree",
           "copy_folder", "make_folder", "point_link", "publish_folder", "refuse_link", "remove_file", "remove_tree", "rename_within", "safe_join",
           "toml_key", "toml_text", "toml_value", "write_arrays", "write_figure", "write_file"]
