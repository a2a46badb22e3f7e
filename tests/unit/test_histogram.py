"""The log-scale histograms behind the insights' percentiles: buckets, merging, and how far
an estimated percentile may be from the exact one. Pure: no database."""

from __future__ import annotations

import math
import random

import pytest

from pgflow.core import histogram as h


def percentile_cont(values: list[float], fraction: float) -> float:
    """PostgreSQL's percentile_cont, the exact figure the estimates stand for."""
    ordered = sorted(values)
    rank = fraction * (len(ordered) - 1)
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (rank - below) * (ordered[above] - ordered[below])


def test_the_buckets_have_eight_per_doubling_from_one_millisecond():
    assert h.bucket(0) == h.bucket(-3) == h.ZERO == -1
    assert h.bucket(0.0004) == h.bucket(0.000999) == 0
    assert h.bucket(0.001) == 1
    assert h.bucket(0.002) == 1 + 8
    assert h.bucket(1.0) == 1 + math.floor(8 * math.log2(1000))
    assert h.bounds(h.ZERO) == (0.0, 0.0)
    assert h.bounds(0) == (0.0, 0.001)
    assert h.bounds(1) == pytest.approx((0.001, 0.001 * 2 ** (1 / 8)))
    assert h.MAX_RELATIVE_ERROR == pytest.approx(2 ** (1 / 8) - 1)


def test_every_value_lies_inside_the_bounds_of_its_bucket():
    rng = random.Random(7)
    for _ in range(5_000):
        value = 10 ** rng.uniform(-5, 7)  # 10 µs to four months
        low, high = h.bounds(h.bucket(value))
        # A value on an edge may be rounded into either neighbour; the estimate stays as close.
        assert low * (1 - 1e-12) <= value <= high * (1 + 1e-12), value


def test_an_empty_histogram_has_no_percentiles():
    assert h.quantiles({}, (0.5, 0.95)) == [None, None]
    assert h.quantiles({3: 0}, (0.5,)) == [None]


def test_exact_zeros_stay_exact():
    assert h.quantiles(h.of([0, 0, 0]), (0.5, 0.95)) == [0.0, 0.0]
    p50, p95 = h.quantiles(h.of([0.0] * 10 + [2.0] * 10), (0.5, 0.95))
    assert p50 == pytest.approx(percentile_cont([0.0] * 10 + [2.0] * 10, 0.5), rel=h.MAX_RELATIVE_ERROR)
    assert p95 == pytest.approx(2.0, rel=h.MAX_RELATIVE_ERROR)


@pytest.mark.parametrize("seed", range(20))
def test_estimates_are_within_the_stated_error_of_percentile_cont(seed):
    rng = random.Random(seed)
    shape = rng.choice(["uniform", "lognormal", "few", "spiky"])
    size = rng.choice([1, 2, 3, 7, 50, 1_000])
    if shape == "uniform":
        values = [rng.uniform(0.002, 30) for _ in range(size)]
    elif shape == "lognormal":
        values = [rng.lognormvariate(0, 3) + 0.001 for _ in range(size)]
    elif shape == "few":
        values = [rng.choice([0.05, 1.5, 86_400.0]) for _ in range(size)]
    else:
        values = [rng.choice([0.0, 0.0, 0.003, 4.0, rng.uniform(1, 10)]) for _ in range(size)]
    counted = h.of(values)
    for fraction, estimate in zip((0.0, 0.5, 0.95, 1.0), h.quantiles(counted, (0.0, 0.5, 0.95, 1.0)), strict=True):
        exact = percentile_cont(values, fraction)
        assert estimate == pytest.approx(exact, rel=h.MAX_RELATIVE_ERROR, abs=1e-12), (shape, size, fraction)


def test_under_a_millisecond_the_error_is_under_a_millisecond():
    values = [0.0001, 0.0002, 0.0009]
    (p50,) = h.quantiles(h.of(values), (0.5,))
    assert abs(p50 - 0.0002) < h.FLOOR


def test_the_error_bound_is_nearly_reached_when_values_crowd_a_bucket_edge():
    """Linear interpolation spreads a bucket's values evenly: if they all sit on its lower
    edge, the 95th percentile is placed near the upper one (so the stated bound is not loose)."""
    low, _high = h.bounds(40)
    (p95,) = h.quantiles({40: 1_000}, (0.95,))
    error = (p95 - low) / low
    assert 0.9 * h.MAX_RELATIVE_ERROR < error < h.MAX_RELATIVE_ERROR


def test_merging_the_histograms_of_parts_gives_the_histogram_of_the_whole():
    rng = random.Random(3)
    values = [rng.expovariate(0.2) for _ in range(3_000)]
    parts = [values[i::7] for i in range(7)]
    merged: h.Histogram = {}
    for part in parts:
        h.merge(merged, h.of(part))
    assert merged == h.of(values)
    assert h.quantiles(merged, (0.5, 0.95)) == h.quantiles(h.of(values), (0.5, 0.95))


def test_json_round_trip_is_sparse_and_ordered():
    counted = {12: 3, -1: 2, 0: 0, 5: 1}
    document = h.to_json(counted)
    assert list(document) == ["-1", "5", "12"]
    assert h.from_json(document) == {-1: 2, 5: 1, 12: 3}


def test_a_fraction_outside_0_to_1_is_refused_naming_the_range():
    with pytest.raises(ValueError, match=r"between 0 and 1, got 1\.5"):
        h.quantiles({1: 1}, (1.5,))


def test_the_sql_expression_is_the_same_rule():
    sql = h.sql_bucket("x")
    assert sql.startswith("CASE WHEN (x) <= 0 THEN -1 WHEN (x) < 0.001 THEN 0 ELSE floor(8 * ln((x) / 0.001)")
