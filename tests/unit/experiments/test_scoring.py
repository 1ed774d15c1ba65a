"""pipeline/experiments/scoring.py: intervals for every run on the sets its hypotheses fit, paired tests
against the baseline only, and a note, not a score, for a set a run cannot be scored on."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import files
from pipeline.experiments.scoring import score_sets
from pipeline.reporting.hypotheses import RunHypotheses, key_of
from pipeline.reporting.metrics import confidence_intervals, paired_test

REFS = [f"a small dog number {i} runs across the green field" for i in range(40)]


def garbled(every: int) -> list[str]:
    """The references with every `every`-th line's words reversed."""
    return [" ".join(reversed(r.split())) if i % every == 0 else r for i, r in enumerate(REFS)]


@pytest.fixture
def refs_dir(tmp_path: Path) -> Path:
    files.write_lines(tmp_path / "test" / "a.tgt", REFS)
    files.write_lines(tmp_path / "test" / "b.tgt", REFS)
    return tmp_path


def run(name: str, **sets: list[str]) -> RunHypotheses:
    return RunHypotheses(name, {key_of(test): lines for test, lines in sets.items()})


def test_each_run_gets_the_score_stages_interval_and_the_others_the_paired_test(refs_dir: Path) -> None:
    base, better = run("base", a=garbled(2), b=garbled(2)), run("better", a=garbled(5), b=garbled(5))
    scored = score_sets({"base": base, "better": better}, "base", refs_dir, ["a", "b"])
    assert scored.notes == []
    assert scored.ci95["base"]["a"] == confidence_intervals(garbled(2), REFS)["ci95"]
    assert set(scored.ci95) == {"base", "better"} and set(scored.delta) == set(scored.p) == {"better"}
    expected = paired_test({"base": garbled(2), "better": garbled(5)}, REFS)["better"]["bleu"]
    assert scored.delta["better"]["a"]["bleu"] == pytest.approx(expected.delta) and expected.delta > 0
    assert scored.p["better"]["a"]["bleu"] == pytest.approx(expected.p_value)


def test_a_set_a_run_lacks_or_that_does_not_fit_is_a_note_not_a_score(refs_dir: Path) -> None:
    base = run("base", a=garbled(2), b=garbled(2))
    short = run("short", a=garbled(3)[:-1])  # a line missing on a, no b at all
    scored = score_sets({"base": base, "short": short}, "base", refs_dir, ["a", "b"])
    assert "short" not in scored.ci95 and "short" not in scored.delta
    assert [note.split(":")[0] for note in scored.notes] == ["a", "b"]
    assert all(note.split(": ", 1)[1].startswith("short ") for note in scored.notes)


def test_without_a_baseline_only_intervals_are_made(refs_dir: Path) -> None:
    scored = score_sets({"x": run("x", a=garbled(2)), "y": run("y", a=garbled(4))}, None, refs_dir, ["a"])
    assert set(scored.ci95) == {"x", "y"} and scored.delta == {} and scored.p == {}
