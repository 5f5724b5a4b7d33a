"""The batched core: N arenas of one scenario as arrays with a leading batch axis.

* :mod:`commons_arena.batched.state`: every field of the reference ``ArenaState`` as an array,
  jobs in slot tables, and the per-scenario tables (:class:`Tables`).
* :mod:`commons_arena.batched.tick`: the phases of ``commons_arena/tick.py``, one for one.
* :mod:`commons_arena.batched.observations`: the reference's observations, stacked.
* :mod:`commons_arena.batched.env`: :class:`VectorArenaEnv`, the public face
  (``commons_arena.vector_env``): PettingZoo's dicts with every value stacked, autoreset.

The reference env (:mod:`commons_arena.arena`) stays the one the goldens and digests record;
the equivalence test holds this core to it bit for bit (docs/architecture.md says why).
"""

from __future__ import annotations

from commons_arena.batched.env import VectorArenaEnv

__all__ = ["VectorArenaEnv"]
