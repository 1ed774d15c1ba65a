"""The report page: render_report is a pure function of its inputs and says what is missing."""

from __future__ import annotations

from pipeline import params as P
from pipeline.reporting import page
from tests.support.repo import REPO
from tests.support.tables import table_rows

SIGNATURE = {"bleu": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"}
TEST_METRICS = {"bleu": 37.12, "chrf": 60.27, "ter": 45.0, "n_lines": 8, "signature": SIGNATURE}


def test_render_is_pure_and_handles_missing_parts() -> None:
    metrics = {"test": {"t1": TEST_METRICS}}
    inputs = page.ReportInputs(params=P.load(REPO / "params.yaml").to_dict(), metrics=metrics)
    text = page.render_report(inputs)
    assert text == page.render_report(inputs)
    assert (
        "No training summary" in text and "No cleaning statistics" in text and "No download manifest" in text
    )
    assert "No test translations" in text and "37.1" in text


def test_metrics_from_before_several_test_sets_show_their_one_as_test() -> None:
    params = P.load(REPO / "params.yaml").to_dict()
    text = page.render_report(page.ReportInputs(params=params, metrics={"test": TEST_METRICS}))
    assert ["test", "37.1", "60.3", "45.0", "8"] in table_rows(text)


def test_scores_show_their_intervals_and_how_they_were_made() -> None:
    with_ci = {**TEST_METRICS, "ci95": {"bleu": [35.04, 39.3], "chrf": [58.9, 61.6]}}
    with_ci["bootstrap"] = {"n": 1000, "seed": 12345}
    params = P.load(REPO / "params.yaml").to_dict()
    text = page.render_report(page.ReportInputs(params=params, metrics={"test": {"t1": with_ci}}))
    row = next(r for r in table_rows(text) if r[0] == "t1")
    assert row[1:4] == ["37.1 (35.0–39.3)", "60.3 (58.9–61.6)", "45.0"]  # TER has none
    assert "95% confidence interval" in text and "1,000 resamples, seed 12345" in text
    plain = page.render_report(page.ReportInputs(params=params, metrics={"test": {"t1": TEST_METRICS}}))
    assert next(r for r in table_rows(plain) if r[0] == "t1")[1] == "37.1"
    assert "confidence interval" not in plain


def test_chrf_plus_plus_shows_with_its_signature_where_the_metrics_have_it() -> None:
    params = P.load(REPO / "params.yaml").to_dict()
    signature = {**SIGNATURE, "chrfpp": "nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:2.6.0"}
    metrics = {"test": {"t1": {**TEST_METRICS, "chrfpp": 58.04, "signature": signature}}}
    text = page.render_report(page.ReportInputs(params=params, metrics=metrics))
    assert ["set", "BLEU", "chrF", "chrF++", "TER", "lines"] in table_rows(text)
    assert ["t1", "37.1", "60.3", "58.0", "45.0", "8"] in table_rows(text)
    assert "- chrF++: `nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:2.6.0`" in text
    older = page.render_report(page.ReportInputs(params=params, metrics={"test": {"t1": TEST_METRICS}}))
    assert "chrF++" not in older  # metrics.json from before chrF++: no empty column


def test_training_lists_the_pairs_each_source_gives_an_epoch() -> None:
    params = P.load(REPO / "params.yaml").to_dict()
    summary = {"n_params": 10, "pairs_drawn_per_epoch": {"news": 40, "web": 50}}
    text = page.render_report(page.ReportInputs(params=params, metrics={"test": {}}, summary=summary))
    rows = table_rows(text)
    assert ["news", "40"] in rows and ["web", "50"] in rows
    old = page.render_report(page.ReportInputs(params=params, metrics={"test": {}}, summary={"n_params": 10}))
    assert "gives an epoch" not in old  # summaries from before source weights


def test_a_student_shows_beside_this_runs_model_with_each_of_its_exports() -> None:
    params = P.load(REPO / "params.yaml").to_dict()
    metrics = {"val": {**TEST_METRICS, "bleu": 41.61}, "test": {"t1": TEST_METRICS}}
    scored = {"val": {**TEST_METRICS, "bleu": 40.0}, "test": {"t1": {**TEST_METRICS, "bleu": 36.0}}}
    quantized = {"val": {**TEST_METRICS, "bleu": 39.9}, "test": {"t1": {**TEST_METRICS, "bleu": 35.8}}}
    student = {"summary": {"steps": 3570, "best_step": 3332}, "metrics": {"fp32": scored, "int8": quantized}}
    inputs = page.ReportInputs(params=params, metrics=metrics, test_sets=["t1"], student=student)
    text = page.render_report(inputs)
    rows = table_rows(text[text.index("## The student") :])
    assert rows[:4] == [
        ["system", "val", "t1"],
        ["this run's model (data/model)", "41.6", "37.1"],
        ["student, fp32", "40.0", "36.0"],
        ["student, int8", "39.9", "35.8"],
    ]
    assert "3,570 updates" in text
    assert "## The student" not in page.render_report(page.ReportInputs(params=params, metrics=metrics))
