"""The benchmark harness's pure helpers: what they compute from a hub's figures."""

from __future__ import annotations

import math

from bench.harness.hub import histogram_quantile


def test_a_quantile_is_read_between_the_bounds_of_its_bucket() -> None:
    # 40 % of observations at or below 1 ms, 90 % at or below 2 ms, all at or below 4 ms.
    shares = {"0.001": 0.4, "0.002": 0.9, "0.004": 1.0, "+Inf": 1.0}
    assert math.isclose(histogram_quantile(shares, 0.2), 0.0005)
    assert math.isclose(histogram_quantile(shares, 0.5), 0.0012)
    assert math.isclose(histogram_quantile(shares, 0.99), 0.0038)
    assert histogram_quantile(shares, 0.9) == 0.002


def test_a_quantile_skips_empty_buckets_and_any_key_order() -> None:
    # Nothing between 1 and 2 ms: the 75 % point lies in the next bucket that holds any.
    shares = {"+Inf": 1.0, "0.004": 1.0, "0.002": 0.5, "0.001": 0.5}
    assert math.isclose(histogram_quantile(shares, 0.75), 0.003)
    assert histogram_quantile(shares, 0.5) == 0.001


def test_a_quantile_past_the_last_bound_or_of_nothing_is_unknown() -> None:
    assert math.isnan(histogram_quantile({"0.001": 0.5, "+Inf": 1.0}, 0.99))
    assert math.isnan(histogram_quantile({}, 0.5))
