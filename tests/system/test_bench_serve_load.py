"""bench/serve_load.py end to end on a tiny model: a real `mlflow models serve`, concurrent clients,
a client that hangs up mid-request and a bad-load client; what it measures is checked for sense, not
speed (speed is the benchmark's business, never a test's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import serve_load, serving
from tests.support.models import make_model_dir

pytestmark = pytest.mark.slow

SENTENCES = [  # 3 clients x 2 requests x 2 lines: each sentence twice
    "der hund läuft",
    "ein kind spielt",
    "die katze springt",
    "zwei männer",
    "eine frau",
    "ein ball",
]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    model_dir = make_model_dir(tmp_path_factory.mktemp("serve") / "model")
    shape = serving.Shape(clients=3, requests=2, lines=2, bad=True, time_limit=300, loads=2)
    rows, detail = serving.run_load(model_dir, SENTENCES, "torch", shape)
    return {r["metric"]: r["value"] for r in rows}, detail


def test_every_request_is_answered_in_full_and_none_is_lost(measured) -> None:
    value, detail = measured
    assert value["errors"] == 0, detail["errors"]
    assert value["differs_from_offline"] == 0  # each line as the same model translates it offline
    assert detail["unsent_sentences"] == 0  # the client that hung up stalled nothing
    assert value["sentences_per_s"] > 0 and value["offline_sentences_per_s"] > 0
    assert 0 < value["p50_s"] <= value["p99_s"]


def test_each_load_is_measured_and_the_rows_are_their_medians(measured) -> None:
    value, detail = measured
    loads = detail["loads"]
    assert len(loads) == 2
    mean = lambda f: sum(map(f, loads)) / 2  # the median of two
    served, alone = "sentences_per_s", "offline_sentences_per_s"
    rounds = "offline_rounds_sentences_per_s"
    for metric, ratio in [
        ("throughput_ratio_to_offline", lambda ld: ld[served] / ld[alone]),
        ("throughput_ratio_to_offline_rounds", lambda ld: ld[served] / ld[rounds]),
        ("offline_rounds_ratio_to_offline", lambda ld: ld[rounds] / ld[alone]),
    ]:
        assert value[metric] == pytest.approx(mean(ratio), rel=0.01, abs=2e-3), metric  # rounded rates
    assert value[served] == pytest.approx(mean(lambda ld: ld[served]), abs=0.01)
    assert value["p99_s"] <= max(load["max_s"] for load in loads)
    assert detail["bad_sent"] == 2 * len(serving.bad_requests())  # the bad-load client in each load


def test_the_rounds_are_every_clients_rth_request_together() -> None:
    chunks = serving.chunks_of([f"s{i}" for i in range(12)], clients=3, requests=2, lines=2)
    assert serving.rounds_of(chunks) == [
        ["s0", "s1", "s4", "s5", "s8", "s9"],
        ["s2", "s3", "s6", "s7", "s10", "s11"],
    ]


def test_every_kind_of_bad_request_is_refused_4xx_naming_the_problem(measured) -> None:
    value, detail = measured
    kinds = {what for what, _, _ in serving.bad_requests()}
    assert {b["request"] for b in detail["bad"]} == kinds
    for b in detail["bad"]:
        assert 400 <= b["status"] < 500 and b["refused"], b
    assert value["bad_not_refused"] == 0


def test_the_section_shows_the_rows(measured, tmp_path: Path) -> None:
    value, detail = measured
    rows = [
        {"system": "mlflow-serve-torch", "task": "serve", "metric": m, "value": v} for m, v in value.items()
    ]
    text = serve_load.section(rows, detail, {"CPU": "test"})
    assert text.startswith(serve_load.SERVE_START) and text.endswith(serve_load.SERVE_END)
    assert "mlflow-serve-torch" in text and "10,000 sentences: HTTP 400" in text


def test_an_answer_is_an_error_unless_complete_and_a_changed_line_is_counted(monkeypatch) -> None:
    answers = iter(
        [
            (200, {"predictions": ["A", "b"]}),  # complete; its second line differs from offline
            (500, {"message": "boom"}),
            (200, {"predictions": ["A"]}),  # one line short
            (200, {"predictions": ["A", 3]}),  # not a string
            (200, {"predictions": ["A", "B"]}),
        ]
    )
    monkeypatch.setattr(serving, "request", lambda port, body, **kw: next(answers))
    load = serving.Load()
    chunks = [["a", "b"]] * 5
    serving.client(0, chunks, {"a": "A", "b": "B"}, deadline=float("inf"), load=load)
    assert (load.sent, load.answered, load.differ) == (10, 4, 1)
    kinds = [e.split(":")[0] for e in load.errors]
    assert kinds == ["HTTP 500", "not one translation per line", "not a translation per line"]
    assert len(load.latencies) == 5
