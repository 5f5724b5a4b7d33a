"""The one table writer: rows (dicts with the same keys) as CSV and as a markdown table.

Every command that writes a table goes through here (``evaluate``, ``tournament``, the
checkpoint comparison, ``exploit``, the best-response report, the training-seeds
aggregate, the need-gap measurement), so a table looks the same whichever command wrote
it: floats with three decimals below 10 and one above, ``nan`` for a missing number, any
other value (a string already formatted by its caller) as it is.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from commons_arena.files import write_file


def format_cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of ``rows`` (columns: the first row's keys); "" for no rows."""
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(format_cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def csv_text(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """``rows`` as CSV text; columns: ``columns``, or every key in first-seen order."""
    fields = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_csv(rows: Sequence[Mapping[str, Any]], path: Path, columns: Sequence[str] | None = None) -> Path:
    """``rows`` as CSV at ``path`` (through :func:`commons_arena.files.write_file`)."""
    return write_file(path, csv_text(rows, columns))


def write_table(rows: Sequence[Mapping[str, Any]], out: Path, name: str, preamble: str = "") -> list[Path]:
    """``<out>/<name>.csv`` and ``<out>/<name>.md`` (``preamble`` above the markdown table);
    nothing for no rows. Returns the paths written."""
    if not rows:
        return []
    csv_path = write_csv(rows, out / f"{name}.csv")
    md_path = write_file(out / f"{name}.md", preamble + markdown_table(rows) + "\n")
    return [csv_path, md_path]


__all__ = ["csv_text", "format_cell", "markdown_table", "write_csv", "write_table"]
