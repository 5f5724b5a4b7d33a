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
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from policies.checkpoint_format import SIDECAR, WEIGHTS
from policies.learned import LEARNED_PREFIX

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


def pack(source: str) -> PackedCheckpoint:
    """The checkpoint folder ``source`` (a single policy or a policy set) as bytes."""
    folder = Path(source)
    if not folder.is_dir():
        raise ShippingError(f"checkpoint {source}: not a folder on this machine (the driver packs what nodes play)")
    names = {SIDECAR, WEIGHTS}
    files = tuple(
        (path.relative_to(folder).as_posix(), path.read_bytes())
        for path in sorted(folder.rglob("*"))
        if path.name in names and path.is_file()
    )
    if not any(rel.endswith(SIDECAR) for rel, _ in files):
        raise ShippingError(f"checkpoint {source}: no {SIDECAR} in it or in its policies/ folders")
    return PackedCheckpoint(source, files, digest(files))


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
    """Check ``packed`` against its hash and write it once into ``cache_root()/<hash>``."""
    if digest(packed.files) != packed.sha256:
        raise ShippingError(f"checkpoint {packed.source}: its bytes do not match their SHA-256 (damaged in transit)")
    target = cache_root() / packed.sha256
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{packed.sha256[:12]}-", dir=target.parent))
    for rel, data in packed.files:
        path = staging / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise ShippingError(f"checkpoint {packed.source}: file name {rel!r} leaves the checkpoint")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    try:
        staging.rename(target)  # atomic: another process unpacking the same hash either wins or finds it
    except OSError:
        if not target.is_dir():
            raise
    return target


def install(packed: Iterable[PackedCheckpoint]) -> dict[str, Path]:
    """Unpack each checkpoint and make its source path resolve to the unpacked folder here."""
    for one in packed:
        _INSTALLED[one.source] = unpack(one)
    return dict(_INSTALLED)


def local_path(source: str) -> str:
    """Where the checkpoint named ``learned:<source>`` is in this process."""
    return str(_INSTALLED.get(source, source))


def installed() -> Mapping[str, Path]:
    return dict(_INSTALLED)


__all__ = ["PackedCheckpoint", "ShippingError", "cache_root", "digest", "install", "installed", "learned_sources",
           "local_path", "pack", "pack_all", "unpack"]
