"""Training and evaluation experiments built on top of the ``commons_arena`` environment."""
