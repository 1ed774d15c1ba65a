"""A small sweep of runs in MLflow, for the runs and experiments tests (conftest's store fixture)."""

from __future__ import annotations

import os
from typing import Any

import yaml

from pipeline.tracking.tracker import Tracker
from tests.support.repo import REPO

COMMIT = "0123456789abcdef0123456789abcdef01234567"


# Two test sets, as score.py names their metrics in MLflow (test.<name>.<score>).
SWEEP_TESTS = ("multi30k-test_2016_flickr", "multi30k-test_2017_mscoco")
T16, T17 = (f"test.{name}" for name in SWEEP_TESTS)

# A small sweep: (DVC experiment, params changed, final metrics or None for a run that failed).
SWEEP = [
    (
        "exp-two",
        {"model": {"n_layers": 2}},
        {
            f"{T16}.bleu": 30.55,
            f"{T16}.chrf": 52.5,
            f"{T16}.ter": 58.0,
            f"{T17}.bleu": 24.0,
            f"{T17}.chrf": 47.0,
            f"{T17}.ter": 63.0,
            "dev_bleu": 29.5,
            "dev_chrf": 51.0,
            "dev_ter": 59.0,
            "n_params": 2_012_345,
            "train_seconds": 3723.4,
            "tokens_per_s": 15000.0,
        },
    ),
    (
        "exp-four",
        {"model": {"n_layers": 4, "dropout": 0.3}},
        {
            f"{T16}.bleu": 35.25,
            f"{T16}.chrf": 57.0,
            f"{T16}.ter": 52.5,
            f"{T17}.bleu": 26.5,
            f"{T17}.chrf": 49.0,
            f"{T17}.ter": 61.0,
            "dev_bleu": 34.0,
            "dev_chrf": 56.0,
            "dev_ter": 53.0,
            "n_params": 4_012_345,
            "train_seconds": 7446.8,
            "tokens_per_s": 9000.0,
        },
    ),
    ("exp-six", {"model": {"n_layers": 6}}, None),
]


def sweep_params(change: dict[str, dict[str, Any]]) -> dict[str, Any]:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for section, values in change.items():
        params[section].update(values)
    return params


def log_run(name: str, change: dict, final: dict | None, experiment: str = "nmt") -> str:
    """One training run as train.py and score.py log it: curves by step, then totals and scores."""
    os.environ["DVC_EXP_NAME"] = name
    run = Tracker.start(sweep_params(change), experiment, f"de-en encoder_decoder {name}")
    for step in range(100, 600, 100):
        run.log_metrics({"train_loss": 5.0 - step / 200, "val_bleu": step / 20}, step=step)
    if final is not None:
        totals = ("n_params", "train_seconds", "tokens_per_s")
        run.log_metrics({k: final[k] for k in totals}, step=500)
        run.log_metrics({k: v for k, v in final.items() if k not in totals}, step=0)
    run.end("FINISHED" if final is not None else "FAILED")
    return run.run_id
