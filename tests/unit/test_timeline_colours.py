"""Every timeline series has its own colour, told apart from every other and from both of
the admin's themes' backgrounds (the two waiting series and queued/throttled used to share one)."""

from __future__ import annotations

from itertools import combinations

from pgflow_dashboard.timeline import SERIES

BACKGROUNDS = {"light": "#ffffff", "dark": "#121212"}


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def distance(a: str, b: str) -> float:
    return sum((x - y) ** 2 for x, y in zip(rgb(a), rgb(b), strict=True)) ** 0.5


def test_any_two_series_differ():
    close = [(a, b) for a, b in combinations(SERIES, 2) if distance(SERIES[a][0], SERIES[b][0]) < 80]
    assert close == []


def test_each_series_stands_off_both_themes():
    faint = [
        (name, theme)
        for name, (colour, _label) in SERIES.items()
        for theme, background in BACKGROUNDS.items()
        if name != "paused" and distance(colour, background) < 120
    ]
    assert faint == []
