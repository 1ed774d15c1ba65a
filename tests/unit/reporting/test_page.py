"""The report page: render_report is a pure function of its inputs and says what is missing."""

from __future__ import annotations

from pipeline import params as P
from pipeline.reporting import page
from tests.helpers import REPO

SIGNATURE = {"bleu": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"}
TEST_METRICS = {"bleu": 37.12, "chrf": 60.27, "ter": 45.0, "n_lines": 8, "signature": SIGNATURE}


def test_render_is_pure_and_handles_missing_parts() -> None:
    inputs = page.ReportInputs(params=P.load(REPO / "params.yaml").to_dict(), metrics={"test": TEST_METRICS})
    text = page.render_report(inputs)
    assert text == page.render_report(inputs)
    assert "No training summary" in text and "No cleaning statistics" in text
    assert "No test translations" in text and "37.1" in text
