"""Benchmarks: scripts that print speed figures (run by hand, not in CI)."""
