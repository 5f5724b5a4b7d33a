"""The errors both env paths raise, and how an error reads: one line for the command line, and
pydantic's reports as ``where: what``.

Every layer that checks untyped data with pydantic (scenarios here; rosters and checkpoint
sidecars in ``policies``; experiment files and tournament rosters in ``experiments``)
words its errors with :func:`format_validation_error`, and every one-line report (the command
line's ``error:`` line, a message quoting another error) goes through :func:`one_line`, so
the same mistake reads the same wherever it is made.
"""

from __future__ import annotations

from pydantic import ValidationError


class EpisodeStateError(RuntimeError, ValueError):
    """``step()`` with no episode running (before ``reset()`` or after the end).

    A RuntimeError (wrong call order) and a ValueError (an action for a finished agent),
    so either ``except`` catches it."""


def format_validation_error(err: ValidationError, separator: str = "; ") -> str:
    """Each of pydantic's errors as ``key.path: what is wrong (got value)``, in order, once each,
    joined by ``separator``.

    The offending value is shown when it is a scalar and pydantic's message does not already
    speak of it (a custom rule's ``value_error`` words its own message)."""
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        what = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        suffix = f" (got {got!r})" if not isinstance(got, dict | list) and e["type"] != "value_error" else ""
        lines.append(f"{where}: {what}{suffix}")
    return separator.join(dict.fromkeys(lines))


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (multi-line reports joined with "; ")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head, rest = lines[0], lines[1:]
    return head + (" " if head.endswith(":") else "; ") + "; ".join(rest) if rest else head
