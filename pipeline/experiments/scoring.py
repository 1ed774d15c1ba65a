"""The test sets of an experiment table: each run's 95% intervals per set and its paired test against
the table's baseline, as the score stage and `python -m pipeline compare` compute them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import files
from pipeline.errors import UserError
from pipeline.experiments.runs import set_problem
from pipeline.reporting.hypotheses import RunHypotheses, key_of, testset_of
from pipeline.reporting.metrics import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, confidence_intervals
from pipeline.reporting.significance import compare, references_path

METRICS = ("bleu", "chrf")
# run -> test set -> metric -> a value
PerRun = dict[str, dict[str, dict[str, float]]]


@dataclass
class SetScores:
    ci95: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)  # [low, high]
    delta: PerRun = field(default_factory=dict)  # to the baseline; the baseline has none
    p: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)  # paired bootstrap
    notes: list[str] = field(default_factory=list)  # the sets a run could not be scored on, and why


def score_sets(
    runs: dict[str, RunHypotheses], baseline: str | None, refs_dir: Path, tests: Sequence[str]
) -> SetScores:
    """Intervals for every run (by name) on every set of `tests` its hypotheses fit (line-aligned with
    the references, and the same references where it recorded them); then each other run's paired
    test against `baseline` on the sets both have."""
    out = SetScores()
    usable: dict[str, RunHypotheses] = {}
    for name, hyps in runs.items():
        kept = {}
        for test in tests:
            key, path = key_of(test), references_path(refs_dir, key_of(test))
            why = set_problem(hyps, key, path)
            if why is not None:
                out.notes.append(f"{test}: {name} {why}")
                continue
            kept[key] = hyps.hyps[key]
            ci = confidence_intervals(kept[key], files.read_lines(path), BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
            out.ci95.setdefault(name, {})[test] = ci["ci95"]
        usable[name] = RunHypotheses(name, kept, hyps.refs_sha256)
    base = usable.get(baseline) if baseline is not None else None
    candidates = [h for name, h in usable.items() if name != baseline and h.hyps]
    if base is None or not base.hyps or not candidates:
        return out
    try:
        comparison = compare(base, candidates, refs_dir, "bs", BOOTSTRAP_SEED, BOOTSTRAP_RESAMPLES)
    except UserError:  # no set shared with the baseline: the notes above say which run lacks what
        return out
    for split in comparison.splits:
        testset = testset_of(split.split)
        if testset is None:
            continue
        for run, scores in list(split.scores.items())[1:]:  # the baseline first
            out.delta.setdefault(run, {})[testset] = {m: scores[m].delta for m in METRICS}
            out.p.setdefault(run, {})[testset] = {m: scores[m].p_value for m in METRICS}
    return out
