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
    fixed = grants.copy()
    totals = grants.sum(axis=0)
    for tier in np.flatnonzero(totals > available):
        requested = grants[:, tier]
        share = requested * int(available[tier]) / int(totals[tier])
        kept = np.floor(share).astype(grants.dtype)
        leftover = int(available[tier]) - int(kept.sum())
        remainders = share - kept
        # largest remainder first; the stable sort keeps the earlier team first on ties
        for team in np.argsort(-remainders, kind="stable")[:leftover]:
            kept[team] += 1
        fixed[:, tier] = kept
    return fixed, int((grants - fixed).sum())
