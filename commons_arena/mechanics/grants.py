"""Grants: the allocator's per-(team, tier) GPUs for this tick (SPEC §5.3–5.4).

Repair rule (deterministic): when a tier's grants exceed what is available, each team
keeps ``floor(request * available / total_requested)``; the GPUs left over go one each to
the teams with the largest fractional remainders (ties: the earlier team). Every GPU taken
away counts as a repaired (invalid) unit.
"""

from __future__ import annotations

import numpy as np


def repair_grants(grants: np.ndarray, available: np.ndarray) -> tuple[np.ndarray, int]:
    """Scale each tier's column of ``grants`` (teams x tiers) down to ``available``."""
    totals = grants.sum(axis=0)
    over = np.flatnonzero(totals > available)
    if len(over) == 0:
        return grants, 0
    fixed = grants.copy()
    for tier in over.tolist():
        requested = grants[:, tier].tolist()
        total, cap = int(totals[tier]), int(available[tier])
        kept = [r * cap // total for r in requested]
        # largest remainder first (exact integer arithmetic); ties keep the earlier team first
        by_remainder = sorted(range(len(requested)), key=lambda i: (-(requested[i] * cap % total), i))
        for team in by_remainder[: cap - sum(kept)]:
            kept[team] += 1
        fixed[:, tier] = kept
    return fixed, int(totals.sum() - fixed.sum())
