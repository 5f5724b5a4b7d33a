"""Evaluation: episode tables, misreport gains, tournaments."""
