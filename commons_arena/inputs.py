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

Errors are :class:`InputError` (a ``ValueError``: the command line prints one line, exit 2).
"""

from __future__ import annotations

import json
import math
import os
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


def check_regular(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> os.stat_result:
    """``path``'s status if it is a regular file of at most ``max_bytes`` (a symlink to one counts);
    else :class:`InputError`. ``FileNotFoundError`` passes through (callers word it)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{what} {path}", f"{_kind(info.st_mode)}, not a regular file; give a file")
    if info.st_size > max_bytes:
        raise InputError(f"{what} {path}", f"{info.st_size} bytes, over the limit of {max_bytes}")
    return info


def read_bytes(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, refused by type before opening and by size before and while reading."""
    check_regular(path, what, max_bytes)
    # O_NONBLOCK: should the path become a FIFO between the check and the open, the open does not wait
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise InputError(f"{what} {path}", "not a regular file; give a file")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(f"{what} {path}", f"over the limit of {max_bytes} bytes")
    return data


def read_text(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> str:
    """:func:`read_bytes` as UTF-8 text (another encoding is an :class:`InputError`)."""
    data = read_bytes(path, what, max_bytes)
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


def read_toml_file(path: str | os.PathLike[str], what: str, error: type[ValueError]) -> dict[str, Any]:
    """A TOML file's contents; a missing, special, oversized or malformed file is ``error`` in one line
    (``no <what> at PATH``, ``invalid <what> PATH: ...``): experiment, mixture and psro files alike."""
    try:
        return loads_toml(read_text(path, what))
    except FileNotFoundError:
        raise error(f"no {what} at {path}") from None
    except InputError as err:  # a special file (/dev/zero, a FIFO), too large, not UTF-8, nested too deeply
        raise error(f"invalid {what} {path}: {err.reason}") from None
    except tomllib.TOMLDecodeError as err:
        raise error(f"invalid {what} {path}: not TOML ({err})") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is out of range")
    return value


_STRICT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


_LENIENT = json.JSONDecoder()


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
    return value


def load_json(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_FILE_BYTES,
              allow_nan: bool = False) -> Any:
    """A JSON file under every rule of this module."""
    return loads_json(read_bytes(path, what, max_bytes), f"{what} {path}", allow_nan)


def load_json_object(path: str | os.PathLike[str], what: str = "file", allow_nan: bool = False) -> dict[str, Any]:
    """:func:`load_json` of a file that must hold one JSON object."""
    value = load_json(path, what, allow_nan=allow_nan)
    if not isinstance(value, dict):
        raise InputError(f"{what} {path}", f"must hold a JSON object, got {type(value).__name__}")
    return value


__all__ = ["MAX_DEPTH", "read_toml_file", "MAX_FILE_BYTES", "MAX_RECORDING_BYTES", "InputError", "TooDeep", "check_regular", "load_json",
           "load_json_object", "loads_json", "loads_toml", "read_bytes", "read_text", "too_deep"]
