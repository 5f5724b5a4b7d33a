"""Pure state transitions of the game, one module per rule family.

Each function takes the state it needs (arrays, job lists, the rng when random) and
returns new values plus what happened; the environment only orchestrates them.
"""
