"""The benchmarks' seeds share one draw of runs over days and statuses: benchmarks/dashboard.py
writes it (``DATED_RUNS``) and benchmarks/search_runs.py uses that, so the two histories
spread and end their runs alike. Read as text: importing a benchmark sets its environment."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
DRAW = "FROM (SELECT i, random() AS r FROM generate_series(1, %(runs)s) AS i) AS draw"


def test_the_dated_runs_are_written_once_in_the_dashboard_seed():
    written = {path.name: path.read_text().count(DRAW) for path in sorted(BENCHMARKS.glob("*.py"))}
    assert {name: count for name, count in written.items() if count} == {"dashboard.py": 1}


def test_the_search_seed_uses_the_dashboard_seeds_dated_runs():
    source = (BENCHMARKS / "search_runs.py").read_text()
    assert "from benchmarks.dashboard import DATED_RUNS" in source
    assert "{DATED_RUNS}" in source
