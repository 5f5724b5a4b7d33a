"""The one rule for the files a report writes into a folder: never through a symlink, never over
an earlier file without ``--force``.

:func:`check_outputs` runs before any work (a refused command has written nothing);
:func:`write_output` writes each file into a temporary file beside it and renames it into
place, so a symlink planted at the output's name after the check is replaced, never followed,
and a reader never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

_UMASK = os.umask(0o022)
os.umask(_UMASK)


class OutputError(ValueError):
    """An output that would be written through a symlink or over an earlier file."""


def check_outputs(folder: Path, names: Iterable[str], force: bool, flag: str = "--force") -> None:
    """Refuse, before any work, outputs ``folder/<name>`` that are symlinks (with or without
    ``force``: they would write outside the folder) or that exist (without ``force``)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise OutputError(f"{folder} is a symlink: a report is never written through one; remove it or choose "
                          "another output folder")
    for name in names:
        path = folder / name
        if path.is_symlink():
            raise OutputError(f"{path} is a symlink: a report is never written through one; remove it")
        if path.exists() and not force:
            raise OutputError(f"{path} already exists; pass {flag} to replace it")


def write_output(path: Path, write: Callable[[Path], object] | str | bytes) -> Path:
    """Write ``path`` (text, bytes, or ``write(temporary path)``) by renaming a finished temporary file
    over it: a symlink at ``path`` is replaced, never followed."""
    path = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        if isinstance(write, str):
            tmp.write_text(write, encoding="utf-8")
        elif isinstance(write, bytes):
            tmp.write_bytes(write)
        else:
            write(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # as open() would have made it (mkstemp makes 0600)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


__all__ = ["OutputError", "check_outputs", "write_output"]
