"""Checkpoints as data: ``learned:<dir>`` policies on machines that cannot see ``<dir>``.

A node of a Ray cluster need not share the driver's disk. The driver :func:`pack`s each
data-only checkpoint a run or a tournament names (its ``arena_policy.json`` and
``arena_policy.safetensors`` files, a policy set's members too: nothing else is read, so
nothing else is sent) into a :class:`PackedCheckpoint`: the files' bytes and one SHA-256
over them. The bytes travel inside whatever Ray sends the node anyway (an env config, a
task's arguments); on the node :func:`install` checks the hash, writes the files once per
node into a folder named by the hash, and makes ``learned:<the driver's path>`` resolve to
that folder in this process (``policies.registry`` asks :func:`local_path`). Names that were
never installed resolve as written, so a single machine needs none of this.

Shipped checkpoints: a bare name (no ``/``) that names a checkpoint shipped with the package
(``learned:universal``: ``checkpoints/universal`` of a checkout, ``policies/checkpoints/universal``
inside the wheel) resolves to it from any folder (:func:`shipped_checkpoint`); write
``learned:./NAME`` for a folder of that name in the working directory.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from commons_arena.files import make_folder, publish_folder, remove_file, remove_tree, write_file
from policies.checkpoint_format import SIDECAR, WEIGHTS
from policies.learned import LEARNED_PREFIX

MAX_FILE_BYTES = 512 * 2**20  # one file of a packed checkpoint (the largest network's weights: 256 MiB)
MAX_PACK_BYTES = 1024 * 2**20  # a whole packed checkpoint (a policy set's members together)
# the driver's path as written after "learned:" -> where this process unpacked it
_INSTALLED: dict[str, Path] = {}


class ShippingError(ValueError):
    """A checkpoint that cannot be packed, or bytes that do not match their hash."""


@dataclass(frozen=True)
class PackedCheckpoint:
    """A data-only checkpoint as bytes: ``files`` (path relative to the checkpoint -> bytes)."""

    source: str  # the path as the policy name writes it (the key it is installed under)
    files: tuple[tuple[str, bytes], ...]
    sha256: str

    @property
    def size(self) -> int:
        return sum(len(data) for _, data in self.files)


def digest(files: Iterable[tuple[str, bytes]]) -> str:
    """One SHA-256 over every (relative path, bytes), in the given order."""
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.encode())
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _shipped_roots() -> list[Path]:
    here = Path(__file__).resolve().parent
    # inside a wheel they ship as policies/checkpoints; in a checkout they sit at the top
    return [d for d in (here / "checkpoints", here.parent / "checkpoints") if d.is_dir()]


def shipped_checkpoints() -> list[str]:
    """The names of the checkpoints shipped with the package (``learned:<name>`` plays each from any folder)."""
    return sorted({d.name for root in _shipped_roots() for d in root.iterdir() if (d / SIDECAR).is_file()})


def shipped_checkpoint(source: str) -> Path | None:
    """The shipped checkpoint ``source`` names (a bare name such as ``universal``), or None."""
    if not source or "/" in source or os.sep in source or source in (".", ".."):
        return None
    for root in _shipped_roots():
        if (root / source / SIDECAR).is_file():
            return root / source
    return None


def on_disk(source: str) -> str:
    """The folder a ``learned:`` name points at on this machine: a shipped checkpoint's, else as written."""
    shipped = shipped_checkpoint(source)
    return str(shipped) if shipped is not None else source


def pack(source: str) -> PackedCheckpoint:
    """The checkpoint folder ``source`` (a single policy or a policy set) as bytes.

    Only regular files named like a checkpoint's data-only files, inside the folder: a
    symlink (to a file or a folder) is never followed, whatever it points at, and a file
    over :data:`MAX_FILE_BYTES` or a total over :data:`MAX_PACK_BYTES` is refused before it
    is read (the folder itself may be reached through a symlink, e.g. ``runs/latest/best``)."""
    folder = Path(on_disk(source))
    if not folder.is_dir():
        raise ShippingError(f"checkpoint {source}: not a folder on this machine (the driver packs what nodes play)")
    names = {SIDECAR, WEIGHTS}
    paths: list[Path] = []
    for root, dirs, filenames in os.walk(folder, followlinks=False):  # a symlinked folder is not entered
        dirs.sort()
        paths += [Path(root) / name for name in filenames if name in names]
    files, total = [], 0
    for path in sorted(paths):
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):  # a symlink or a special file: never read
            raise ShippingError(f"checkpoint {source}: {path.relative_to(folder)} is not a regular file (a "
                                "symlink?); a checkpoint's files are packed only as files inside it")
        total += info.st_size
        if info.st_size > MAX_FILE_BYTES or total > MAX_PACK_BYTES:
            raise ShippingError(f"checkpoint {source}: over the size limit of a packed checkpoint "
                                f"({MAX_FILE_BYTES // 2**20} MiB a file, {MAX_PACK_BYTES // 2**20} MiB in all)")
        files.append((path.relative_to(folder).as_posix(), _read_regular(path, source)))
    if not any(rel.endswith(SIDECAR) for rel, _ in files):
        raise ShippingError(f"checkpoint {source}: no {SIDECAR} in it or in its policies/ folders")
    return PackedCheckpoint(source, tuple(files), digest(files))


def _read_regular(path: Path, source: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ShippingError(f"checkpoint {source}: {path} is not a regular file")
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ShippingError(f"checkpoint {source}: {path} is over {MAX_FILE_BYTES // 2**20} MiB")
    return data


def learned_sources(policy_names: Iterable[str]) -> list[str]:
    """The checkpoint paths of the ``learned:`` names among ``policy_names`` (each once, in order)."""
    return list(dict.fromkeys(n.removeprefix(LEARNED_PREFIX) for n in policy_names if n.startswith(LEARNED_PREFIX)))


def pack_all(policy_names: Iterable[str]) -> tuple[PackedCheckpoint, ...]:
    """Every checkpoint the ``learned:`` names among ``policy_names`` point at, packed."""
    return tuple(pack(source) for source in learned_sources(policy_names))


def cache_root() -> Path:
    """Where a node keeps unpacked checkpoints (``$COMMONS_ARENA_CHECKPOINT_CACHE`` or the temp dir)."""
    return Path(os.environ.get("COMMONS_ARENA_CHECKPOINT_CACHE") or Path(tempfile.gettempdir()) / "commons_arena_ckpt")


def unpack(packed: PackedCheckpoint) -> Path:
    """Check ``packed`` against its hash and write it once into ``cache_root()/<hash>``.

    A folder already there is used only if its files hash to the same SHA-256 (anyone who can
    write to the cache could have planted it): otherwise it is replaced. A refused unpack
    leaves nothing behind."""
    if digest(packed.files) != packed.sha256:
        raise ShippingError(f"checkpoint {packed.source}: its bytes do not match their SHA-256 (damaged in transit)")
    for rel, _ in packed.files:  # checked before anything is written
        if ".." in Path(rel).parts or Path(rel).is_absolute() or Path(rel).name not in (SIDECAR, WEIGHTS):
            raise ShippingError(f"checkpoint {packed.source}: file name {rel!r} leaves the checkpoint")
    target = cache_root() / packed.sha256
    if _holds(target, packed):
        return target
    make_folder(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{packed.sha256[:12]}-", dir=target.parent))
    try:
        for rel, data in packed.files:
            path = staging / rel
            make_folder(path.parent)
            write_file(path, data)
        try:  # planted or damaged: moved aside, then removed; atomic: another unpacking process wins or finds it
            publish_folder(staging, target)
        except OSError:
            if not _holds(target, packed):
                raise
    finally:
        _remove(staging)
    return target


def _holds(target: Path, packed: PackedCheckpoint) -> bool:
    """Whether ``target`` is a real folder whose regular files ``packed.files`` names hash to its SHA-256."""
    if target.is_symlink() or not target.is_dir():
        return False
    files = []
    for rel, data in packed.files:
        path = target / rel
        try:
            if path.is_symlink() or not path.is_file() or path.stat().st_size != len(data):
                return False
            files.append((rel, path.read_bytes()))
        except OSError:
            return False
    return digest(files) == packed.sha256


def _remove(path: Path) -> None:
    if path.is_symlink():
        remove_file(path)
    elif path.exists():
        remove_tree(path)


def install(packed: Iterable[PackedCheckpoint]) -> dict[str, Path]:
    """Unpack each checkpoint and make its source path resolve to the unpacked folder here."""
    for one in packed:
        _INSTALLED[one.source] = unpack(one)
    return dict(_INSTALLED)


def local_path(source: str) -> str:
    """Where the checkpoint named ``learned:<source>`` is in this process."""
    return str(_INSTALLED.get(source) or on_disk(source))


def installed() -> Mapping[str, Path]:
    return dict(_INSTALLED)


__all__ = ["PackedCheckpoint", "ShippingError", "cache_root", "digest", "install", "installed", "learned_sources",
           "local_path", "on_disk", "pack", "pack_all", "shipped_checkpoint", "shipped_checkpoints", "unpack"]
