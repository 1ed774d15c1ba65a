"""sacreBLEU metrics of decoded text: corpus scores with signatures, sentence chrF, BLEU by length.

Default sacreBLEU settings throughout (BLEU: 13a tokenisation, cased; chrF:
character 6-grams, beta 2; TER: tercom), so the numbers compare with published
ones; each metric's signature string goes with its score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER

from pipeline.errors import UserError


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """BLEU, chrF, TER (rounded to 2 decimals), line count and signatures of one split."""
    scores: dict[str, Any] = {}
    signatures: dict[str, str] = {}
    for name, metric in (("bleu", BLEU()), ("chrf", CHRF()), ("ter", TER())):
        scores[name] = round(float(metric.corpus_score(list(hyps), [list(refs)]).score), 2)
        signatures[name] = str(metric.get_signature())
    return {**scores, "n_lines": len(hyps), "signature": signatures}


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
