"""Sums and dot products whose rounding is part of the recorded behaviour.

Recorded trajectories (golden playthroughs, digests) pin rewards to the bit, so every
float the rules add up must round the same way on every processor. numpy's ``a @ b`` on
two vectors does not: it calls BLAS (OpenBLAS ``ddot``), whose kernel is chosen per
processor at run time, and an AVX-512 kernel rounds a three-term dot product differently
from an AVX2 one (the recordings made on one machine failed on another in the last bit of
``fairness``). :func:`dot` is an element-wise product (exactly rounded per element) and
:func:`numpy_sum` (a fixed order of additions), the same everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def numpy_sum(values: Sequence[float]) -> float:
    """``float(np.sum(values))`` to the bit, without numpy for a few values.

    numpy adds fewer than 8 float64 entries left to right from 0, as Python's ``sum`` does;
    from 8 on it sums pairwise, so those go through numpy."""
    return float(sum(values, 0.0)) if len(values) < 8 else float(np.sum(np.asarray(values, dtype=np.float64)))


def dot(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """The dot product of two vectors, rounded the same on every processor (no BLAS)."""
    products = np.multiply(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return numpy_sum(products.tolist())
