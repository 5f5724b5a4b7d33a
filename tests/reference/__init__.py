"""The list-based reference: the game as first written, one arena in Python lists, and the
executable spec of the rules.

The game itself runs once, in the batched core (``commons_arena.batched``: the per-arena env
``commons_arena.parallel_env`` is a batch of one, ``commons_arena.vector_env`` many). This
package plays the same rules the plain way, phase by phase (``tick.py``, ``mechanics/``), behind
the env it had (:class:`tests.reference.arena.ReferenceEnv`), so that
``tests/commons_arena/test_batched.py`` can hold the core to it bit for bit on every shipped,
generated and stress scenario. It is not shipped.
"""
