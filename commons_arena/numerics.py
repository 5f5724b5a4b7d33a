"""Sums and dot products whose rounding is part of the recorded behaviour.

Recorded trajectories (golden playthroughs, digests) pin rewards to the bit, so every
float the rules add up must round the same way on every processor. numpy's ``a @ b`` on
two vectors does not: it calls BLAS (OpenBLAS ``ddot``), whose kernel is chosen per
processor at run time, and an AVX-512 kernel rounds a three-term dot product differently
from an AVX2 one (the recordings made on one machine failed on another in the last bit of
``fairness``). :func:`dot` is an element-wise product (exactly rounded per element) and
:func:`numpy_sum` (a fixed order of additions), the same everywhere.

The batched core sums the rows of ``(B, n)`` arrays: :func:`numpy_sum_rows` and :func:`dot_rows`
are :func:`numpy_sum` and :func:`dot` of each row, to the bit (added column by column in the same
order), and :func:`left_to_right_sum` is Python's ``sum`` of each row.
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


def left_to_right_sum(x: np.ndarray) -> np.ndarray:
    """Each row (last axis) of ``x`` added left to right from 0.0, as Python's ``sum`` of a list adds."""
    acc = np.zeros(x.shape[:-1])
    for k in range(x.shape[-1]):
        acc = acc + x[..., k]
    return acc


def numpy_sum_rows(x: np.ndarray) -> np.ndarray:
    """:func:`numpy_sum` of each row (last axis) of ``x``."""
    if x.shape[-1] >= 8:
        return np.sum(x, axis=-1)  # numpy's pairwise sum, as numpy_sum calls it (per row the same)
    return left_to_right_sum(x)  # below 8 values numpy adds left to right


def dot_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`dot` of each row pair."""
    return numpy_sum_rows(np.multiply(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))
