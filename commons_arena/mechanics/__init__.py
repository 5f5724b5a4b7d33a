"""Pure state transitions of the game, one module per rule family.

Each function takes the state it needs (arrays, job lists, the rng when random) and
returns new values plus what happened; the environment only orchestrates them.

Vectors here have one entry per tier or per team: a handful of numbers. Rules loop over
them as plain sequences (the env passes lists), which is several times cheaper than a
numpy call per operation at that size; results the state keeps are numpy arrays. Float
sums and dot products stay in numpy wherever the exact rounding of the result matters.
"""
