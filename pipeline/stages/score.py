"""Stage `score`: sacreBLEU BLEU, chrF and TER of the decoded splits, with signatures and 95% intervals.

The metrics are pipeline/reporting/metrics.py. The final scores, the
hypotheses and the sha256 of the references they were scored against also go
to the training run in MLflow, so `python -m pipeline compare` can test runs
against each other later (pipeline/reporting/hypotheses.py finds them).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting.hypotheses import HYPS_ARTIFACT_DIR, REFS_TAG
from pipeline.reporting.metrics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    confidence_intervals,
    corpus_scores,
)
from pipeline.tracking import RUN_FILE, Tracker

SPLITS = ("val", "test")
# MLflow names of the final scores: "dev" for val, so they never mix with the
# per-validation val_* curves that training logs under its own names.
MLFLOW_SPLIT_NAMES = {"val": "dev", "test": "test"}


def score(
    decode_dir: Path,
    refs_dir: Path,
    out: Path,
    model_dir: Path | None = None,
    bootstrap: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Any]:
    """Score every split with a hypothesis file; write `out` atomically and return the scores.

    Per split: bleu, chrf, ter, n_lines, signature; then ci95 (bleu and chrf),
    bootstrap (its resamples and seed) and refs_sha256.
    """
    results: dict[str, Any] = {}
    for split in SPLITS:
        hyp_path = decode_dir / f"{split}.hyp"
        if not hyp_path.is_file():
            continue
        ref_path = refs_dir / f"{split}.tgt"
        if not ref_path.is_file():
            raise UserError(f"{ref_path}: no such file, needed to score {hyp_path}; run the download stage")
        hyps, refs = files.read_lines(hyp_path), files.read_lines(ref_path)
        if len(hyps) != len(refs):
            raise UserError(
                f"{hyp_path} has {len(hyps)} lines but {ref_path} has {len(refs)}; "
                "they must be line-aligned: rerun decode for this data (dvc repro decode)"
            )
        if not hyps:
            raise UserError(f"{hyp_path} and {ref_path} are empty; nothing to score")
        results[split] = {
            **corpus_scores(hyps, refs),
            **confidence_intervals(hyps, refs, bootstrap, seed),
            "refs_sha256": sha256(ref_path),
        }
    if not results:
        raise UserError(
            f"no hypotheses in {decode_dir} (expected {' or '.join(s + '.hyp' for s in SPLITS)}); "
            "run the decode stage first"
        )
    files.write_json(out, results)
    if model_dir is not None:
        log_final_scores(model_dir / RUN_FILE, results, decode_dir)
    return results


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def log_final_scores(run_file: Path, results: dict[str, Any], decode_dir: Path | None = None) -> None:
    """Add the scores to the training run as final metrics (test_bleu, dev_chrf, ...); best effort.

    With `decode_dir`, each scored split's hypotheses go along as artifacts
    (decode/<split>.hyp) and its references' sha256 as a tag (refs_sha256.<split>).
    """
    # No offline dir: the model dir is another stage's output and must not change here.
    with Tracker.from_run_file(run_file) as tracker:
        metrics = {
            f"{MLFLOW_SPLIT_NAMES[split]}_{name}": scores[name]
            for split, scores in results.items()
            for name in ("bleu", "chrf", "ter")
        }
        tracker.log_metrics(metrics, step=0)
        signatures = next(iter(results.values()))["signature"]
        tracker.set_tags({f"sacrebleu.{name}": sig for name, sig in signatures.items()})
        tracker.set_tags({REFS_TAG.format(split=split): s["refs_sha256"] for split, s in results.items()})
        if decode_dir is not None:
            for split in results:
                tracker.log_artifact(decode_dir / f"{split}.hyp", HYPS_ARTIFACT_DIR)


@click.command("score")
@click.option(
    "--decode",
    "decode_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory with {val,test}.hyp (the decode stage's output).",
)
@click.option(
    "--refs",
    "refs_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory with the references {val,test}.tgt (data/raw).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The metrics JSON to write (DVC metrics).",
)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Model dir; if it holds mlflow_run.json, the scores are logged to that MLflow run.",
)
@click.option(
    "--bootstrap",
    type=click.IntRange(min=2),
    default=BOOTSTRAP_RESAMPLES,
    show_default=True,
    help="Bootstrap resamples for the 95% confidence intervals.",
)
@click.option(
    "--seed",
    type=click.IntRange(min=1),
    default=BOOTSTRAP_SEED,
    show_default=True,
    help="Seed of the bootstrap (SACREBLEU_SEED), recorded in the metrics.",
)
def command(
    decode_dir: Path, refs_dir: Path, out: Path, model_dir: Path | None, bootstrap: int, seed: int
) -> None:
    """Score decoded splits with sacreBLEU (BLEU, chrF, TER; 95% intervals of BLEU and chrF)."""
    results = score(decode_dir, refs_dir, out, model_dir, bootstrap, seed)
    for split, s in results.items():
        bleu_ci, chrf_ci = s["ci95"]["bleu"], s["ci95"]["chrf"]
        click.echo(
            f"{split}: BLEU {s['bleu']:.2f} [{bleu_ci[0]:.2f}, {bleu_ci[1]:.2f}]  "
            f"chrF {s['chrf']:.2f} [{chrf_ci[0]:.2f}, {chrf_ci[1]:.2f}]  TER {s['ter']:.2f}  "
            f"({s['n_lines']} lines)"
        )
