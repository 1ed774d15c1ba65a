"""The corpus draws: each source's factor from its weight and the temperature (over language pairs
where there are several), and the seeded, reproducible draws of an epoch."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.data.draws import draw_sources, source_factors


def test_source_factors_natural_weighted_and_tempered() -> None:
    assert source_factors([300, 100], [1.0, 1.0], 1.0) == pytest.approx([1.0, 1.0])
    assert source_factors([300, 100], [1.0, 2.0], 1.0) == pytest.approx([1.0, 2.0])
    # T -> large: equal shares of the same 400 pairs, i.e. 200 each
    assert source_factors([300, 100], [1.0, 1.0], 1e9) == pytest.approx([200 / 300, 200 / 100])
    # T = 2: shares ∝ sqrt(0.75), sqrt(0.25)
    shares = np.sqrt([0.75, 0.25]) / np.sqrt([0.75, 0.25]).sum()
    assert source_factors([300, 100], [1.0, 1.0], 2.0) == pytest.approx((400 * shares / [300, 100]).tolist())
    assert source_factors([0, 10], [1.0, 1.0], 1.0) == [0.0, 1.0]


def test_draw_sources_draws_whole_copies_and_a_seeded_rest() -> None:
    sizes, factors = [10, 20, 5], [2.5, 0.3, 0.0]
    ids = draw_sources(sizes, factors, seed=1, epoch=3)
    counts = np.bincount(ids, minlength=35)
    assert counts[:10].sum() == 25 and set(counts[:10].tolist()) == {2, 3}  # each twice, 5 of them thrice
    assert counts[10:30].sum() == 6 and set(counts[10:30].tolist()) <= {0, 1}  # 30%, no repeats
    assert counts[30:].sum() == 0
    assert np.array_equal(ids, draw_sources(sizes, factors, seed=1, epoch=3))  # reproducible
    assert not np.array_equal(ids, draw_sources(sizes, factors, seed=1, epoch=4))  # other epoch, other draws
    assert np.array_equal(draw_sources([4, 3], [1.0, 1.0], 1, 1), np.arange(7))  # natural: every id once


def test_with_several_pairs_the_temperature_is_over_the_pairs_and_a_pairs_share_goes_by_size() -> None:
    sizes, pairs = [200, 100, 100], ["en-ms", "en-ms", "en-id"]
    # T = 1 keeps natural proportions with or without pairs
    assert source_factors(sizes, [1.0] * 3, 1.0, pairs) == pytest.approx([1.0, 1.0, 1.0])
    # T -> large: each pair half of the 400 pairs; en-ms's half split 2:1 between its sources
    factors = source_factors(sizes, [1.0] * 3, 1e9, pairs)
    drawn = [f * n for f, n in zip(factors, sizes)]
    assert drawn == pytest.approx([200 * 2 / 3, 200 / 3, 200])
    # per source, T -> large would give each source a third instead
    assert source_factors(sizes, [1.0] * 3, 1e9) == pytest.approx(
        [400 / 3 / 200, 400 / 3 / 100, 400 / 3 / 100]
    )
    assert source_factors(sizes, [1.0] * 3, 1e9, ["en-ms"] * 3) == source_factors(sizes, [1.0] * 3, 1e9)
