"""Viewing: plots and the self-contained replay page."""
