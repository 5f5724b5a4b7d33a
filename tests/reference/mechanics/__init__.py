"""The reference's rules, one module per rule family (pure functions over short lists).

Each module re-exports what the shipped :mod:`commons_arena.mechanics` keeps (the parts the
batched core and the policies read too) beside the list-based rules only this reference plays.
"""
