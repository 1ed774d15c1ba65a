"""sacreBLEU metrics: sentence chrF and BLEU by source length."""

from __future__ import annotations

import pytest

from pipeline.errors import UserError
from pipeline.reporting import metrics


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
