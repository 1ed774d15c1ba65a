"""sacreBLEU metrics: sentence chrF, BLEU by source length, confidence intervals and paired tests."""

from __future__ import annotations

import os

import pytest
from sacrebleu.metrics import BLEU

from pipeline.errors import UserError
from pipeline.reporting import metrics
from tests.support.tables import garble, references


def test_sentence_chrf_per_line() -> None:
    values = metrics.sentence_chrf(["the cat sat", "xyz"], ["the cat sat", "the cat sat"])
    assert values[0] == 100.0 and values[1] < 10.0
    with pytest.raises(UserError):
        metrics.sentence_chrf(["a"], ["a", "b"])


def test_bleu_by_length_buckets_lines_by_source_words() -> None:
    srcs = ["one two", "one two three", "w " * 15, "w " * 45]
    hyps = ["a b c d", "a b c d", "x y z w", "p q r s"]
    refs = ["a b c d", "a b c d", "k l m n", "p q r s"]
    rows = metrics.bleu_by_length(srcs, hyps, refs, buckets=[10, 20, 30])
    assert [r["bucket"] for r in rows] == ["1-10", "11-20", "21-30", "31+"]
    assert [r["n_lines"] for r in rows] == [2, 1, 0, 1]
    assert rows[0]["bleu"] == 100.0 and rows[1]["bleu"] == 0.0
    assert rows[2]["bleu"] is None and rows[3]["bleu"] == 100.0


# --- confidence intervals and paired tests: sacreBLEU's, seeded --------------------------


def test_intervals_are_the_same_for_the_same_input_and_seed() -> None:
    refs = references(200)
    hyps = garble(refs, 0.3)
    first = metrics.confidence_intervals(hyps, refs, n=300, seed=7)
    assert metrics.confidence_intervals(hyps, refs, n=300, seed=7) == first
    assert first["bootstrap"] == {"n": 300, "seed": 7}


def test_the_seed_is_the_one_given_not_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    refs = references(200)
    hyps = garble(refs, 0.3)
    seeded = metrics.confidence_intervals(hyps, refs, n=300, seed=7)
    monkeypatch.setenv("SACREBLEU_SEED", "99")
    assert metrics.confidence_intervals(hyps, refs, n=300, seed=7) == seeded
    assert metrics.confidence_intervals(hyps, refs, n=300, seed=8) != seeded  # the seed is used
    assert os.environ["SACREBLEU_SEED"] == "99"  # and the user's setting is back


def test_the_interval_holds_the_score_and_narrows_with_more_lines() -> None:
    refs = references(2000)
    hyps = garble(refs, 0.3)
    widths = {}
    for n_lines in (50, 2000):
        result = metrics.confidence_intervals(hyps[:n_lines], refs[:n_lines], n=300)
        scores = metrics.corpus_scores(hyps[:n_lines], refs[:n_lines])
        for name in ("bleu", "chrf"):
            low, high = result["ci95"][name]
            assert low < scores[name] < high, (n_lines, name, low, scores[name], high)
            widths[n_lines, name] = high - low
    for name in ("bleu", "chrf"):
        # sqrt(40) ~ 6 times more lines: about 6 times narrower.
        assert widths[2000, name] < widths[50, name] / 3


def test_the_interval_is_sacrebleus_mean_plus_minus_half_the_percentile_range() -> None:
    refs = references(100)
    hyps = garble(refs, 0.3)
    result = metrics.confidence_intervals(hyps, refs, n=200, seed=5)
    with metrics.sacrebleu_seed(5):
        score = BLEU().corpus_score(hyps, [refs], n_bootstrap=200)
    low, high = result["ci95"]["bleu"]
    assert (low + high) / 2 == pytest.approx(score._mean, abs=0.01)
    assert (high - low) / 2 == pytest.approx(score._ci, abs=0.01)


def test_seed_zero_is_refused_as_sacrebleu_would_not_seed() -> None:
    with pytest.raises(ValueError, match="positive"):
        metrics.confidence_intervals(["a b"], ["a b"], seed=0)


def test_a_clearly_better_system_is_significant_and_an_equally_good_one_is_not() -> None:
    refs = references(300)
    worse, better = garble(refs, 0.5, seed=1), garble(refs, 0.2, seed=2)
    equal = garble(refs, 0.5, seed=3)  # as many errors as the baseline, in other places
    for test in ("bs", "ar"):
        result = metrics.paired_test({"base": worse, "better": better, "equal": equal}, refs, test, n=300)
        assert result["base"]["bleu"].p_value is None and result["base"]["bleu"].delta == 0
        assert result["better"]["bleu"].significant and result["better"]["chrf"].significant
        assert result["better"]["bleu"].delta > 10
        assert abs(result["equal"]["bleu"].delta) < 2, result["equal"]
        assert result["equal"]["bleu"].p_value > 0.05 and result["equal"]["chrf"].p_value > 0.05


def test_the_paired_test_is_deterministic_and_matches_the_plain_score() -> None:
    refs = references(100)
    systems = {"a": garble(refs, 0.4, seed=1), "b": garble(refs, 0.35, seed=2)}
    first = metrics.paired_test(systems, refs, seed=3, n=200)
    assert metrics.paired_test(systems, refs, seed=3, n=200) == first
    assert first["b"]["bleu"].score == metrics.corpus_scores(systems["b"], refs)["bleu"]
    low, high = first["b"]["bleu"].ci95
    assert low < first["b"]["bleu"].score < high


def test_hypotheses_identical_to_the_baselines_are_not_significant() -> None:
    # sacreBLEU alone gives identical systems its smallest p (no resampled difference exceeds 0).
    refs = references(100)
    hyps = garble(refs, 0.3)
    for test in ("bs", "ar"):
        same = metrics.paired_test({"a": hyps, "b": list(hyps)}, refs, test, n=200)["b"]["bleu"]
        assert same.p_value == 1.0 and not same.significant and same.delta == 0


def test_the_paired_test_refuses_misaligned_hypotheses() -> None:
    with pytest.raises(UserError, match="hypotheses of b"):
        metrics.paired_test({"a": ["x y", "z"], "b": ["x y"]}, ["x y", "z"])


def test_intervals_of_a_system_whose_resamples_sometimes_score_zero():
    # a few lines match a little, most not at all: some resamples score BLEU 0.0 (a float), others float32
    refs = [f"the cat sat on mat number {i}" for i in range(25)]
    hyps = ["the cat sat on mat number 0", *(["xyz qqq"] * 24)]
    ci = metrics.confidence_intervals(hyps, refs, n=200, seed=7)["ci95"]
    low, high = ci["bleu"]
    assert low < high and all(isinstance(x, float) for x in (*ci["bleu"], *ci["chrf"]))  # mean ± half-width
