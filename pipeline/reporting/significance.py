"""Runs against a baseline, per test set (and val): scores with 95% intervals, differences, paired p-values.

The references are the workspace's data/raw/val.tgt and test/<name>.tgt (an
old run's one test set, `test`, falls back to data/raw/test.tgt); a run is
compared on a set only if it has hypotheses for it, line-aligned with those
references, and (where the run recorded it) scored against references with the
same sha256. Every run or set left out is named with the reason; the
statistics are sacreBLEU's (reporting/metrics.py `paired_test`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting import runs
from pipeline.reporting.hypotheses import (
    LEGACY_TEST,
    WORKSPACE,
    RunHypotheses,
    key_of,
    label,
    ordered,
    testset_of,
)
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
    """One set (key val or test/<name>): its line count and each compared run's scores, the baseline first."""

    split: str
    n_lines: int
    scores: dict[str, dict[str, Compared]]

    @property
    def label(self) -> str:
        return label(self.split)


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
    """Test each candidate against the baseline on every set they share; UserError if none is shared."""
    n = n or (BOOTSTRAP_RESAMPLES if test == "bs" else AR_TRIALS)
    splits, skipped = [], []
    for key in ordered(k for r in (baseline, *candidates) for k in r.hyps):
        name = label(key)
        runs = [r for r in (baseline, *candidates) if key in r.hyps]
        refs_path = references_path(refs_dir, key)
        if not refs_path.is_file():
            skipped.append(f"{name}: no references at {refs_path} (run the download stage)")
            continue
        refs = files.read_lines(refs_path)
        reasons = {r.name: why for r in runs if (why := unusable(r, key, refs, refs_path)) is not None}
        if key not in baseline.hyps or baseline.name in reasons:
            why = reasons.get(baseline.name, "has no hypotheses for it")
            skipped.append(f"{name}: the baseline {baseline.name} {why}")
            continue
        skipped += [f"{name}: {run} {why}" for run, why in reasons.items()]
        skipped += [f"{name}: {r.name} has no hypotheses for it" for r in candidates if key not in r.hyps]
        systems = {r.name: r.hyps[key] for r in runs if r.name not in reasons}
        if len(systems) > 1:
            splits.append(SplitComparison(key, len(refs), paired_test(systems, refs, test, seed, n)))
    if not splits:
        raise UserError(
            "no test set to compare: "
            + "; ".join(skipped or ["the runs share no set"])
            + ". Compare runs decoded and scored on this workspace's data/raw"
        )
    return Comparison(splits, skipped, test, n, seed)


def references_path(refs_dir: Path, key: str) -> Path:
    """refs_dir/<key>.tgt; for the one test set of runs from before several (`test`), the old test.tgt
    where the workspace has no test/test.tgt."""
    path = refs_dir / f"{key}.tgt"
    if key == key_of(LEGACY_TEST) and not path.is_file():
        return refs_dir / f"{LEGACY_TEST}.tgt"
    return path


def unusable(run: RunHypotheses, key: str, refs: list[str], refs_path: Path) -> str | None:
    """Why `run`'s hypotheses of set `key` cannot be scored against `refs`, or None if they can."""
    known = run.refs_sha256.get(key)
    if known is not None and known != sha256_of(refs_path):
        return (
            f"was scored against other references (sha256 {known[:12]}…, not {refs_path}'s "
            f"{sha256_of(refs_path)[:12]}…); check out the data it used (git checkout, dvc checkout) "
            "to compare it"
        )
    if len(run.hyps[key]) != len(refs):
        return f"has {len(run.hyps[key])} lines of hypotheses but {refs_path} has {len(refs)}"
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
    """An experiments table() with delta.<name> and p.<name> per test set: BLEU against the baseline's.

    A row's run is the one of `found` named by its id (`workspace` for the
    workspace row); a test set's cells of rows whose hypotheses were not found,
    or could not be compared on it, stay NaN (shown as –). The baseline's own
    row gets 0 and no p. Only the test sets the baseline has get columns.
    """
    names = [n for k in baseline.hyps if (n := testset_of(k)) is not None]
    frame = frame.assign(**{c: math.nan for n in names for c in (runs.delta_column(n), runs.p_column(n))})
    try:
        comparison = compare(baseline, found, refs_dir, test, seed)
    except UserError:
        return frame
    for result in comparison.splits:
        name = testset_of(result.split)
        if name is None:
            continue
        for i, run_id in enumerate(frame["id"]):
            compared = result.scores.get(run_id if isinstance(run_id, str) else WORKSPACE, {}).get("bleu")
            if compared is not None:
                frame.loc[i, runs.delta_column(name)] = compared.delta
                frame.loc[i, runs.p_column(name)] = math.nan if compared.p_value is None else compared.p_value
    return frame


# --- Markdown ----------------------------------------------------------------------


def comparison_markdown(comparison: Comparison) -> str:
    """A table per split (run, BLEU and chrF with intervals, difference, p), `*` where p < 0.05."""
    what = TESTS[comparison.test]
    count = "resamples" if comparison.test == "bs" else "trials"
    out = []
    for result in comparison.splits:
        out += [
            f"## {result.label} ({result.n_lines:,} lines)",
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
