"""sacreBLEU metrics of decoded text: corpus scores with signatures and confidence intervals,
paired significance tests, sentence chrF, BLEU by length.

Default sacreBLEU settings throughout (BLEU: 13a tokenisation, cased; chrF:
character 6-grams, beta 2; chrF++: the same with word bigrams; TER: tercom), so
the numbers compare with published ones; each metric's signature goes with its score.

The statistics are sacreBLEU's own (`--confidence`, `--paired-bs`,
`--paired-ar`), never reimplemented here; its resampling takes its seed from
SACREBLEU_SEED, which `sacrebleu_seed` sets for the call so every interval and
p-value is reproducible and its seed recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric, Score
from sacrebleu.significance import PairedTest, Result

from pipeline.errors import UserError


class _FloatScores:
    """A sacreBLEU metric whose every score is a Python float.

    A resampled corpus with no match at all scores 0.0 (a float) while the others
    score numpy float32s, and sacreBLEU's estimate_ci (statistics.mean) refuses the
    mix ("don't know how to coerce float and float32"). The statistics stay
    sacreBLEU's: only the score's type changes.
    """

    def _compute_score_from_stats(self, stats: Any) -> Any:
        score = super()._compute_score_from_stats(stats)  # type: ignore[misc]
        score.score = float(score.score)
        return score


class _BLEU(_FloatScores, BLEU):
    pass


class _CHRF(_FloatScores, CHRF):
    pass


BOOTSTRAP_RESAMPLES = 1000  # sacreBLEU's default for --confidence and --paired-bs
BOOTSTRAP_SEED = 12345  # sacreBLEU's default SACREBLEU_SEED
AR_TRIALS = 10000  # sacreBLEU's default for --paired-ar
SIGNIFICANCE_LEVEL = 0.05
TESTS = {"bs": "paired bootstrap resampling", "ar": "approximate randomization"}


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """BLEU, chrF, chrF++ (chrfpp), TER (rounded to 2 decimals), line count and signatures of one split.

    chrF++ is chrF with word bigrams too (word_order=2), the score OPUS-MT's tables give beside BLEU.
    """
    scores: dict[str, Any] = {}
    signatures: dict[str, str] = {}
    metrics = (("bleu", BLEU()), ("chrf", CHRF()), ("chrfpp", CHRF(word_order=2)), ("ter", TER()))
    for name, metric in metrics:
        scores[name] = round(float(metric.corpus_score(list(hyps), [list(refs)]).score), 2)
        signatures[name] = str(metric.get_signature())
    return {**scores, "n_lines": len(hyps), "signature": signatures}


def confidence_intervals(
    hyps: Sequence[str], refs: Sequence[str], n: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> dict[str, Any]:
    """95% bootstrap intervals of BLEU and chrF (sacreBLEU's --confidence), with the resamples and seed.

    Returns {"ci95": {"bleu": [lo, hi], "chrf": [lo, hi]}, "bootstrap": {"n": n, "seed": seed}}: sacreBLEU's
    mean of the resampled scores plus and minus half the width of their 2.5-97.5 percentile range.
    """
    intervals = {}
    with sacrebleu_seed(seed):
        for name, metric in (("bleu", _BLEU()), ("chrf", _CHRF())):
            score = metric.corpus_score(list(hyps), [list(refs)], n_bootstrap=n)
            intervals[name] = list(interval(score, metric))
    return {"ci95": intervals, "bootstrap": {"n": n, "seed": seed}}


def interval(score: Score, metric: Metric) -> tuple[float, float]:
    """(low, high) of a bootstrapped sacreBLEU score, from the mean and half-width its JSON form states."""
    shown = json.loads(score.format(width=6, signature=str(metric.get_signature()), is_json=True))
    if "confidence_mean" not in shown:  # sacreBLEU omits it when every resample scored 0
        return (round(float(score.score), 2),) * 2
    mean, half = shown["confidence_mean"], shown["confidence_var"]
    return round(mean - half, 2), round(mean + half, 2)


@contextlib.contextmanager
def sacrebleu_seed(seed: int) -> Iterator[None]:
    """Seed sacreBLEU's resampling for this block: it reads SACREBLEU_SEED at each call."""
    if seed <= 0:
        # PairedTest passes `seed or None` on to numpy: 0 would mean an unseeded, unrepeatable test.
        raise ValueError(f"the bootstrap seed must be a positive integer, not {seed}")
    saved = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = saved


@dataclass(frozen=True)
class Compared:
    """A system's score on one metric, its 95% interval, its difference to the baseline and the p-value
    of the paired test (None for the baseline itself)."""

    score: float
    ci95: tuple[float, float]
    delta: float
    p_value: float | None

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < SIGNIFICANCE_LEVEL


def paired_test(
    systems: Mapping[str, Sequence[str]],
    refs: Sequence[str],
    test: str = "bs",
    seed: int = BOOTSTRAP_SEED,
    n: int | None = None,
) -> dict[str, dict[str, Compared]]:
    """sacreBLEU's paired test of each system against the first (the baseline), on BLEU and chrF.

    `systems` maps a name to its hypotheses, baseline first; `test` is "bs"
    (paired bootstrap, `n` resamples, default 1000) or "ar" (approximate
    randomization, `n` trials, default 10000; intervals from 1000 bootstrap
    resamples). Returns {system: {"bleu": Compared, "chrf": Compared}}.
    """
    if test not in TESTS:
        raise ValueError(f"unknown paired test {test!r}; expected one of {sorted(TESTS)}")
    names = list(systems)
    for name in names:
        check_aligned(len(systems[name]), len(refs), f"hypotheses of {name}", "references")
    metrics: dict[str, Metric] = {"bleu": _BLEU(), "chrf": _CHRF()}
    with sacrebleu_seed(seed):
        run = PairedTest(
            [(name, list(systems[name])) for name in names],
            metrics,
            [list(refs)],
            test_type=test,
            n_samples=n or (BOOTSTRAP_RESAMPLES if test == "bs" else AR_TRIALS),
            n_ar_confidence=BOOTSTRAP_RESAMPLES,
        )
        _, columns = run()
    # PairedTest names its columns by the metrics' own names (BLEU, chrF2), in the order given.
    results = [columns[key] for key in columns if key != "System"]
    out: dict[str, dict[str, Compared]] = {name: {} for name in names}
    # sacreBLEU counts resampled differences *above* the observed one: for hypotheses identical to the
    # baseline's every difference is 0, none is above, and p comes out at its minimum, 1/(n+1). There is
    # nothing to test, so such a system gets p = 1.
    same = {name for name in names[1:] if list(systems[name]) == list(systems[names[0]])}
    for metric, column in zip(metrics, results):
        base = _result(column[0]).score
        for name, result in zip(names, column):
            out[name][metric] = _compared(_result(result), base, identical=name in same)
    return out


def _result(value: Any) -> Result:
    assert isinstance(value, Result), f"sacreBLEU's PairedTest gave {value!r}, not a Result"
    return value


def _compared(result: Result, baseline: float, identical: bool = False) -> Compared:
    score = float(result.score)
    if result.mean is None or result.ci is None:
        ci = (score, score)
    else:
        ci = (round(float(result.mean - result.ci), 2), round(float(result.mean + result.ci), 2))
    p = None if result.p_value is None else 1.0 if identical else float(result.p_value)
    return Compared(round(score, 2), ci, round(score - baseline, 2), p)


def sentence_chrf(hyps: Sequence[str], refs: Sequence[str]) -> list[float]:
    """Sentence-level chrF of each hypothesis against its reference."""
    check_aligned(len(hyps), len(refs), "hypotheses", "references")
    chrf = CHRF()
    return [float(chrf.sentence_score(h, [r]).score) for h, r in zip(hyps, refs)]


def bleu_by_length(
    srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[str], buckets: Sequence[int]
) -> list[dict[str, Any]]:
    """Corpus BLEU per source-length bucket (words); `buckets` are upper bounds, plus an open last one.

    E.g. buckets (10, 20) give rows for 1-10, 11-20 and 21+ words (an empty
    source counts in the first); an empty bucket has n_lines 0 and bleu None.
    """
    check_aligned(len(srcs), len(hyps), "sources", "hypotheses")
    check_aligned(len(hyps), len(refs), "hypotheses", "references")
    bounds = sorted(set(int(b) for b in buckets))
    edges = list(zip([0, *bounds], [*bounds, None]))
    lengths = [len(s.split()) for s in srcs]
    rows = []
    for low, high in edges:
        picked = [i for i, n in enumerate(lengths) if (n > low or low == 0) and (high is None or n <= high)]
        label = f"{low + 1}-{high}" if high is not None else f"{low + 1}+"
        bleu = None
        if picked:
            score = BLEU().corpus_score([hyps[i] for i in picked], [[refs[i] for i in picked]])
            bleu = round(float(score.score), 2)
        rows.append({"bucket": label, "n_lines": len(picked), "bleu": bleu})
    return rows


def check_aligned(n_a: int, n_b: int, what_a: str, what_b: str) -> None:
    if n_a != n_b:
        raise UserError(f"{n_a} {what_a} but {n_b} {what_b}; they must be line-aligned")
