"""The frontier figure and the `frontier` command's words (issue 53, point 4): a title that fits, a y axis that
reads 0 when every exploitability is 0, labels that do not overlap; an exploitability said as a lower bound."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from experiments.studies.frontier import exploitability_words
from experiments.viewing import plots
from experiments.viewing.plots import welfare_exploitability


def test_the_figure_fits_its_title_and_reads_zero(tmp_path: Path, monkeypatch):
    """Nine allocators on one scenario, every exploitability 0 (no code beat truthful), welfare close together."""
    kept: list[Figure] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.append(fig) or Path(path))
    rows = [{"scenario": "own", "allocator": name, "welfare": 100.0 + i, "welfare_ci95": 2.0,
             "exploitability": 0.0 if i % 2 else 1e-17, "exploitability_ci95": 0.0}
            for i, name in enumerate(["random", "equal_split", "proportional", "fifo", "edf", "best_fit",
                                      "max_min_fair", "drf", "planner"])]
    welfare_exploitability(rows, tmp_path / "f.png", title="Welfare and exploitability; line: the scripted frontier "
                                                          "(allocators and pairwise mixtures)")
    fig = kept[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width = fig.bbox.width
    title = fig._suptitle.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= width  # not clipped
    ax = fig.axes[0]
    assert ax.get_ylim() == (-1.0, 1.0) and ax.yaxis.get_offset_text().get_text() == ""
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == 9
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_the_exploitability_is_said_as_a_lower_bound():
    assert exploitability_words(0.0, "safety") == ("exploitability at least 0: no searched code beat truthful in any "
                                                  "seat (a lower bound)")
    assert "at least 12.5 (robotics" in exploitability_words(12.5, "robotics")
