"""The one rule for files a user hands over: a regular file, bounded in size, bounded in nesting.

Every file format the project reads from a user (scenarios, rosters and populations,
experiment files, recordings, checkpoint sidecars, run folders' JSON) goes through
:func:`read_text` and :func:`loads_toml` / :func:`loads_json`:

* a special file (a FIFO, ``/dev/zero``, a socket, a folder) is refused by its type before
  anything is read: reading it could hang or never end;
* at most :data:`MAX_FILE_BYTES` are read (a recording: :data:`MAX_RECORDING_BYTES`);
* TOML and JSON nest at most :data:`MAX_DEPTH` levels (the server's JSON limit too): deeper
  input is refused as one line, never a ``RecursionError``;
* JSON is strict: no ``NaN`` or ``Infinity``.

Every file read here is remembered by identity (:func:`is_input`): ``commons_arena.files``, the
one way out, refuses to write over or remove a command's input. A record the command itself
updates (a run's ``state.json``) is read with ``own=True`` and not remembered.

Errors are :class:`InputError` (a ``ValueError``: the command line prints one line, exit 2).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from typing import Any

MAX_DEPTH = 32
"""deepest nesting of any TOML or JSON input (a scenario nests 3 deep, an action 3)"""
MAX_FILE_BYTES = 4 * 1024 * 1024
"""largest TOML or JSON file read (scenario, roster, experiment file, sidecar, run folder files)"""
MAX_RECORDING_BYTES = 256 * 1024 * 1024
"""largest recording read (a 12-tick episode with observations is ~40 kB)"""


class InputError(ValueError):
    """A file or text that cannot be read as input: ``"<what> <path>: <reason>"`` (``reason`` alone too)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


class TooDeep(InputError):
    """Input nested deeper than :data:`MAX_DEPTH`."""


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (JSON or TOML data) nests deeper than ``limit`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list | tuple):
            stack += [(v, depth + 1) for v in item]
    return False


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def what_is(path: str | os.PathLike[str]) -> str:
    """What is at ``path`` as an error names it: "a file", "a folder", "a FIFO", "a socket", ... ("nothing")."""
    try:
        info = os.stat(path)
    except OSError:
        return "nothing"
    return "a file" if stat.S_ISREG(info.st_mode) else _kind(info.st_mode)


def check_regular(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> os.stat_result:
    """``path``'s status if it is a regular file of at most ``max_bytes`` (a symlink to one counts);
    else :class:`InputError`. ``FileNotFoundError`` passes through (callers word it)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{what} {path}", f"{_kind(info.st_mode)}, not a regular file; give a file")
    if info.st_size > max_bytes:
        raise InputError(f"{what} {path}", f"{info.st_size} bytes, over the limit of {max_bytes}")
    return info


MAX_REMEMBERED = 100_000
"""most input identities remembered (a server reading scenarios for days stays bounded)"""
_INPUTS: set[tuple[int, int, int, int]] = set()


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns  # size, mtime: a recycled inode is another file


def remember_input(path: str | os.PathLike[str]) -> None:
    """Mark an existing file as one of this command's inputs (done for every file :func:`read_bytes`
    reads; call it for a file another library opens, e.g. a database a command only reads)."""
    try:
        info = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(info.st_mode) and len(_INPUTS) < MAX_REMEMBERED:
        _INPUTS.add(_identity(info))


def forget_inputs() -> None:
    """Start a new command: no file is an input yet (the command line calls it first; a test running
    several commands in one process gets each command's own inputs)."""
    _INPUTS.clear()


def is_input(info: os.stat_result) -> bool:
    """Whether the file with status ``info`` is one this process read as an input (by identity: any
    name, a hard link or a path through ``..`` reaching it counts)."""
    return _identity(info) in _INPUTS


def read_bytes(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES,
               own: bool = False) -> bytes:
    """A regular file's bytes, refused by type before opening and by size before and while reading.
    Remembered as an input (:func:`is_input`) unless ``own``: a record this command updates itself, which is
    never read through a symlink."""
    if own and os.path.islink(path):  # a record the command rewrites: the one writer would refuse the link, after the work
        raise InputError(f"{what} {path}", "a symlink, not the record this program wrote; remove it")
    check_regular(path, what, max_bytes)
    # O_NONBLOCK: should the path become a FIFO between the check and the open, the open does not wait
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise InputError(f"{what} {path}", "not a regular file; give a file")
        data = f.read(max_bytes + 1)
        info = os.fstat(f.fileno())
    if len(data) > max_bytes:
        raise InputError(f"{what} {path}", f"over the limit of {max_bytes} bytes")
    if not own and len(_INPUTS) < MAX_REMEMBERED:
        _INPUTS.add(_identity(info))
    return data


def tree_sha256(folder: str | os.PathLike[str], what: str = "folder") -> str:
    """One sha256 over every regular file under ``folder`` (relative path, size, bytes; in sorted order), read
    without following a link: a symlink or special file inside is an :class:`InputError` (a checkpoint's files
    are recorded by it before a resume unpickles them)."""
    import hashlib

    digest = hashlib.sha256()
    for here, folders, names in sorted(os.walk(folder, followlinks=False)):  # a linked folder is listed, not entered
        for name in sorted(names + [d for d in folders if os.path.islink(os.path.join(here, d))]):
            path = os.path.join(here, name)
            info = os.stat(path, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{what} {folder}", f"{path} is a link or special file, not one the run wrote")
            digest.update(f"{os.path.relpath(path, folder)}\0{info.st_size}\0".encode("utf-8", "surrogateescape"))
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()


def read_text(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES,
              own: bool = False) -> str:
    """:func:`read_bytes` as UTF-8 text (another encoding is an :class:`InputError`)."""
    data = read_bytes(path, what, max_bytes, own)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{what} {path}", f"not UTF-8 text (byte {err.start}: {err.reason})") from None


def loads_toml(text: str, what: str = "the TOML") -> dict[str, Any]:
    """TOML text → data, or :class:`InputError` for nesting deeper than :data:`MAX_DEPTH`
    (``tomllib.TOMLDecodeError`` passes through: callers word it as their format's error)."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise TooDeep(what, f"nests deeper than {MAX_DEPTH} levels") from None
    if too_deep(data):
        raise TooDeep(what, f"nests deeper than {MAX_DEPTH} levels")
    return data


def load_toml_file(path: str | os.PathLike[str], what: str, error: type[ValueError], own: bool = False) -> dict[str, Any]:
    """A user's TOML file of format ``what`` (``roster``, ``population``, ``suite``) as data; ``error`` says
    what is wrong in one line naming the format and the file: ``<what> file not found: <path>``,
    ``<what> <path>: <reason>`` (a special file, too large, not UTF-8, too deep), ``<what> <path>: not valid
    TOML: ...``."""
    if not os.path.exists(path):
        raise error(f"{what} file not found: {path}")
    try:
        return loads_toml(read_text(path, f"{what} file", own=own))
    except InputError as err:
        raise error(f"{what} {path}: {err.reason}") from None
    except tomllib.TOMLDecodeError as err:
        raise error(f"{what} {path}: not valid TOML: {err}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of range")
    return value


_STRICT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


_LENIENT = json.JSONDecoder()
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # a \uD800..\uDFFF escape: half of a pair, or a lone one


def loads_json(text: str | bytes, what: str = "the JSON", allow_nan: bool = False) -> Any:
    """Strict JSON (no NaN or Infinity, unless ``allow_nan``: files Python's ``json`` wrote) at most
    :data:`MAX_DEPTH` deep, else :class:`InputError`."""
    try:
        value = (_LENIENT if allow_nan else _STRICT).decode(text.decode("utf-8") if isinstance(text, bytes) else text)
    except RecursionError:
        raise TooDeep(what, f"nests deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(what, f"not valid JSON: {err}") from None
    if too_deep(value):
        raise TooDeep(what, f"nests deeper than {MAX_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(text if isinstance(text, str) else text.decode("utf-8")) and not _encodable(value):
        raise InputError(what, "not valid JSON: a \\uD800-\\uDFFF escape that is not half of a surrogate pair "
                               "is no character (send the character itself, or both halves of the pair)")
    return value


def _encodable(value: Any) -> bool:
    """Whether every string of a decoded JSON value is text UTF-8 can write (no lone surrogate)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def load_json(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES,
              allow_nan: bool = False, own: bool = False) -> Any:
    """A JSON file under every rule of this module."""
    return loads_json(read_bytes(path, what, max_bytes, own), f"{what} {path}", allow_nan)


def load_json_object(path: str | os.PathLike[str], what: str = "file", allow_nan: bool = False,
                     own: bool = False) -> dict[str, Any]:
    """:func:`load_json` of a file that must hold one JSON object."""
    value = load_json(path, what, allow_nan=allow_nan, own=own)
    if not isinstance(value, dict):
        raise InputError(f"{what} {path}", f"must hold a JSON object, got {type(value).__name__}")
    return value


def load_record(path: str | os.PathLike[str], model: Any, what: str, own: bool = False,
                allow_nan: bool = False) -> Any:
    """A record an earlier run wrote (a JSON file) read back into ``model`` (a pydantic ``TypeAdapter`` or model
    class: types, bounds, no surprise keys), by :func:`load_json`; anything else is one :class:`InputError`
    naming the file and the key. ``own``: the command rewrites it (not remembered as an input)."""
    from pydantic import TypeAdapter, ValidationError

    from commons_arena.errors import format_validation_error

    data = load_json(path, what, allow_nan=allow_nan, own=own)
    adapter = model if isinstance(model, TypeAdapter) else TypeAdapter(model)
    try:
        return adapter.validate_python(data)
    except ValidationError as err:
        raise InputError(f"{what} {path}", f"not the record this program writes: {format_validation_error(err)}") from None


__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "MAX_RECORDING_BYTES", "InputError", "TooDeep", "check_regular", "forget_inputs", "is_input",
           "load_json", "load_json_object", "load_record", "load_toml_file", "loads_json", "loads_toml", "read_bytes", "read_text",
           "remember_input", "too_deep", "tree_sha256", "what_is"]
