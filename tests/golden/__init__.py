"""Golden playthroughs: one recorded episode per shipped scenario (see ``make.py`` here)."""
