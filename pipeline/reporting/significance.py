"""Runs against a baseline, per test set: scores with 95% intervals, differences and paired p-values.

The references are the workspace's data/raw/<split>.tgt; a run is compared on
a split only if it has hypotheses for it, line-aligned with those references,
and (where the run recorded it) scored against references with the same
sha256. Every run or split left out is named with the reason; the statistics
are sacreBLEU's (reporting/metrics.py `paired_test`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting.hypotheses import SPLITS, WORKSPACE, RunHypotheses
from pipeline.reporting.metrics import (
    AR_TRIALS,
    BOOTSTRAP_RESAMPLES,
    SIGNIFICANCE_LEVEL,
    TESTS,
    Compared,
    paired_test,
)
from pipeline.reporting.tables import escape_cell, markdown_table

METRIC_NAMES = {"bleu": "BLEU", "chrf": "chrF"}


@dataclass(frozen=True)
class SplitComparison:
    """One test set: its line count and each compared run's scores, the baseline first."""

    split: str
    n_lines: int
    scores: dict[str, dict[str, Compared]]


@dataclass(frozen=True)
class Comparison:
    """Every split that could be compared, the reasons for what was left out, and how it was tested."""

    splits: list[SplitComparison]
    skipped: list[str]
    test: str
    n: int
    seed: int


def compare(
    baseline: RunHypotheses,
    candidates: list[RunHypotheses],
    refs_dir: Path,
    test: str = "bs",
    seed: int = 12345,
    n: int | None = None,
) -> Comparison:
    """Test each candidate against the baseline on every split they share; UserError if none is shared."""
    n = n or (BOOTSTRAP_RESAMPLES if test == "bs" else AR_TRIALS)
    splits, skipped = [], []
    for split in SPLITS:
        runs = [r for r in (baseline, *candidates) if split in r.hyps]
        if not runs:
            continue
        refs_path = refs_dir / f"{split}.tgt"
        if not refs_path.is_file():
            skipped.append(f"{split}: no references at {refs_path} (run the download stage)")
            continue
        refs = files.read_lines(refs_path)
        reasons = {r.name: why for r in runs if (why := unusable(r, split, refs, refs_path)) is not None}
        if split not in baseline.hyps or baseline.name in reasons:
            why = reasons.get(baseline.name, "has no hypotheses for it")
            skipped.append(f"{split}: the baseline {baseline.name} {why}")
            continue
        skipped += [f"{split}: {name} {why}" for name, why in reasons.items()]
        skipped += [f"{split}: {r.name} has no hypotheses for it" for r in candidates if split not in r.hyps]
        systems = {r.name: r.hyps[split] for r in runs if r.name not in reasons}
        if len(systems) > 1:
            splits.append(SplitComparison(split, len(refs), paired_test(systems, refs, test, seed, n)))
    if not splits:
        raise UserError(
            "no test set to compare: "
            + "; ".join(skipped or ["the runs share no split"])
            + ". Compare runs decoded and scored on this workspace's data/raw"
        )
    return Comparison(splits, skipped, test, n, seed)


def unusable(run: RunHypotheses, split: str, refs: list[str], refs_path: Path) -> str | None:
    """Why `run`'s hypotheses of `split` cannot be scored against `refs`, or None if they can."""
    known = run.refs_sha256.get(split)
    if known is not None and known != sha256_of(refs_path):
        return (
            f"was scored against other references (sha256 {known[:12]}…, not {refs_path}'s "
            f"{sha256_of(refs_path)[:12]}…); check out the data it used (git checkout, dvc checkout) "
            "to compare it"
        )
    if len(run.hyps[split]) != len(refs):
        return f"has {len(run.hyps[split])} lines of hypotheses but {refs_path} has {len(refs)}"
    return None


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def against_baseline(
    frame: pd.DataFrame,
    baseline: RunHypotheses,
    found: list[RunHypotheses],
    refs_dir: Path,
    test: str = "bs",
    seed: int = 12345,
) -> pd.DataFrame:
    """An experiments table() with delta_bleu and p_bleu: test BLEU against the baseline's, paired test.

    A row's run is the one of `found` named by its id (`workspace` for the
    workspace row); rows whose hypotheses were not found, or could not be
    compared on test, keep NaN (shown as –). The baseline's own row gets 0 and no p.
    """
    frame = frame.assign(delta_bleu=math.nan, p_bleu=math.nan)
    try:
        comparison = compare(baseline, found, refs_dir, test, seed)
    except UserError:
        return frame
    scores = next((s.scores for s in comparison.splits if s.split == "test"), {})
    for i, run_id in enumerate(frame["id"]):
        compared = scores.get(run_id if isinstance(run_id, str) else WORKSPACE, {}).get("bleu")
        if compared is not None:
            frame.loc[i, "delta_bleu"] = compared.delta
            frame.loc[i, "p_bleu"] = math.nan if compared.p_value is None else compared.p_value
    return frame


# --- Markdown ----------------------------------------------------------------------


def comparison_markdown(comparison: Comparison) -> str:
    """A table per split (run, BLEU and chrF with intervals, difference, p), `*` where p < 0.05."""
    what = TESTS[comparison.test]
    count = "resamples" if comparison.test == "bs" else "trials"
    out = []
    for result in comparison.splits:
        out += [
            f"## {result.split} ({result.n_lines:,} lines)",
            "",
            split_table(result),
            "",
        ]
    out.append(
        f"p: sacreBLEU's {what} against the baseline ({comparison.n:,} {count}, seed {comparison.seed}); "
        f"* marks p < {SIGNIFICANCE_LEVEL}. Intervals: 95%, bootstrap."
    )
    if comparison.skipped:
        out += ["", "Skipped:", "", *(f"- {escape_cell(s)}" for s in comparison.skipped)]
    return "\n".join(out)


def split_table(result: SplitComparison) -> str:
    header = ["run"]
    for name in METRIC_NAMES.values():
        header += [name, "95% CI", f"Δ {name}", "p"]
    rows = []
    for i, (run, scores) in enumerate(result.scores.items()):
        row = [escape_cell(run) + (" (baseline)" if i == 0 else "")]
        for metric in METRIC_NAMES:
            row += compared_cells(scores[metric])
        rows.append(row)
    return markdown_table(header, rows, "l" + "rrrr" * len(METRIC_NAMES), escape=False)


def compared_cells(c: Compared) -> list[str]:
    """Score, interval, difference and p-value (– for the baseline) of one metric."""
    if c.p_value is None:
        return [f"{c.score:.1f}", f"{c.ci95[0]:.1f}–{c.ci95[1]:.1f}", "–", "–"]
    return [f"{c.score:.1f}", f"{c.ci95[0]:.1f}–{c.ci95[1]:.1f}", f"{c.delta:+.1f}", p_text(c)]


def p_text(c: Compared) -> str:
    assert c.p_value is not None
    return f"{c.p_value:.4f}" + (" *" if c.significant else "")
