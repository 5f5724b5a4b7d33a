"""Grants: the allocator's per-(team, tier) GPUs for this tick (docs/rules.md §5, rule 5).

Repair rule (deterministic): when a tier's grants exceed what is available, each team
keeps ``floor(request * available / total_requested)``; the GPUs left over go one each to
the teams with the largest fractional remainders (ties: the earlier team). Every GPU taken
away counts as a repaired (invalid) unit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def repair_grants(grants: np.ndarray | Sequence[Sequence[int]], available: Sequence[int]) -> tuple[np.ndarray, int]:
    """Scale each tier's column of ``grants`` (teams x tiers) down to ``available``."""
    rows = grants.tolist() if isinstance(grants, np.ndarray) else grants
    fixed = [list(row) for row in rows]
    cut = 0
    for tier, column in enumerate(zip(*rows, strict=True)):
        total, cap = sum(column), int(available[tier])
        if total <= cap:
            continue
        # exact integer arithmetic: floors, then the largest remainders get one more GPU
        kept = [r * cap // total for r in column]
        leftover = cap - sum(kept)
        if leftover:
            remainders = [r * cap % total for r in column]
            # sorted() is stable (also with reverse=True): ties keep the earlier team first
            for team in sorted(range(len(column)), key=remainders.__getitem__, reverse=True)[:leftover]:
                kept[team] += 1
        for row, k in zip(fixed, kept, strict=True):
            row[tier] = k
        cut += total - sum(kept)
    return np.array(fixed, dtype=np.int64).reshape(len(rows), len(available)), int(cut)
