"""Stage `score`: sacreBLEU BLEU, chrF, chrF++ and TER of val and of each test set, with signatures and
95% intervals (of BLEU and chrF).

Hypotheses are data/decode/val.hyp and test/<name>.hyp, references the same
paths in data/raw (.tgt); reports/metrics.json is {"val": {...}, "test":
{"<name>": {...}}}, so DVC shows `test.<name>.bleu`. The metrics are
pipeline/reporting/metrics.py. The scores go to the training run in MLflow too
(`dev_*` for val, `test.<name>.*`), with the hypotheses (decode/<key>.hyp), the
sha256 of their references (tags refs_sha256.*) and any decode.ensemble members
(tags ensemble*), so `python -m pipeline compare` can test runs later,
every corpus source of data/raw/manifest.json as a dataset input of the run,
and the model as an MLflow pyfunc model (registered if tracking.register_model
names it). That is all MLflow sees after training, here and not in the train
stage: a change to the MLflow code, or to the tracking settings, reruns this
stage and retrains nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline import params as P
from pipeline.errors import UserError
from pipeline.reporting.hypotheses import (
    HYPS_ARTIFACT_DIR,
    TEST_DIR,
    VAL,
    label,
    metrics_of,
    refs_tag,
    set_keys,
    testset_of,
)
from pipeline.reporting.metrics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    confidence_intervals,
    corpus_scores,
)
from pipeline.stages.options import directory, load_params
from pipeline.tracking.metadata import manifest_datasets, read_manifest
from pipeline.tracking.run_file import RUN_FILE
from pipeline.tracking.tracker import Tracker

SCORE_NAMES = ("bleu", "chrf", "chrfpp", "ter")


def score(
    decode_dir: Path,
    refs_dir: Path,
    out: Path,
    model_dir: Path | None = None,
    bootstrap: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    params: P.Params | None = None,
    prefix: str = "",
) -> dict[str, Any]:
    """Score val and every test set with a hypothesis file; write `out` atomically and return the scores.

    Per set: bleu, chrf, chrfpp (chrF++), ter, n_lines, signature; then ci95 (bleu and chrf),
    bootstrap (its resamples and seed) and refs_sha256. With `prefix`, the MLflow names of the
    scores and hypotheses begin with it: another decoding of the run's model (its int8 export),
    beside the run's own; neither the datasets nor the model are logged again.
    """
    keys = set_keys(decode_dir, ".hyp")
    if not keys:
        raise UserError(
            f"no hypotheses in {decode_dir} (expected val.hyp or {TEST_DIR}/<name>.hyp); "
            "run the decode stage first"
        )
    results: dict[str, Any] = {}
    for key in keys:
        scores = score_set(decode_dir / f"{key}.hyp", refs_dir / f"{key}.tgt", bootstrap, seed)
        name = testset_of(key)
        if name is None:
            results[VAL] = scores
        else:
            results.setdefault(TEST_DIR, {})[name] = scores
    files.write_json(out, results)
    if model_dir is not None:
        manifest = None if prefix else refs_dir / "manifest.json"
        log_final_scores(model_dir / RUN_FILE, results, decode_dir, manifest, prefix)
        if params is not None and not prefix:
            log_trained_model(model_dir, params, read_examples(refs_dir / f"{VAL}.src"))
    return results


def read_examples(path: Path, n: int = 2) -> list[str]:
    """The first non-empty source lines of val: the logged model's input example."""
    lines = [line for line in files.read_lines(path) if line.strip()] if path.is_file() else []
    return lines[:n] or ["Hello."]


def log_trained_model(model_dir: Path, params: P.Params, example: list[str]) -> None:
    """Log the model directory to its training's MLflow run as a pyfunc model; best effort."""
    with Tracker.from_run_file(model_dir / RUN_FILE) as tracker:
        if not tracker.enabled:
            return
        from pipeline.serving import pyfunc  # mlflow and torch: only when there is a run to log to

        spec = pyfunc.model_spec(model_dir, example, backend=params.tracking.serve_backend)
        tracker.log_model("model", spec, register_as=params.tracking.register_model)


def score_set(hyp_path: Path, ref_path: Path, bootstrap: int, seed: int) -> dict[str, Any]:
    """One set's scores, intervals and references' sha256; UserError if the files do not line up."""
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
    return {
        **corpus_scores(hyps, refs),
        **confidence_intervals(hyps, refs, bootstrap, seed),
        "refs_sha256": sha256(ref_path),
    }


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mlflow_metric(key: str, name: str) -> str:
    """The MLflow name of a final score: dev_bleu for val (never mixed with training's val_* curves),
    test.<name>.bleu for a test set (the same string as its DVC metric)."""
    test = testset_of(key)
    return f"dev_{name}" if test is None else f"{TEST_DIR}.{test}.{name}"


def log_final_scores(
    run_file: Path,
    results: dict[str, Any],
    decode_dir: Path | None = None,
    manifest: Path | None = None,
    prefix: str = "",
) -> None:
    """Add the scores to the training run as final metrics (dev_bleu, test.<name>.bleu, ...); best effort.

    With `decode_dir`, each scored set's hypotheses go along as artifacts
    (decode/val.hyp, decode/test/<name>.hyp) and its references' sha256 as a tag. With
    `manifest` (data/raw/manifest.json), every corpus source becomes a dataset input of the run.
    """
    by_key = metrics_of(results)
    # No offline dir: the model dir is another stage's output and must not change here.
    with Tracker.from_run_file(run_file) as tracker:
        metrics = {
            prefix + mlflow_metric(k, n): s[n] for k, s in by_key.items() for n in SCORE_NAMES if n in s
        }
        tracker.log_metrics(metrics, step=0)
        signatures = next(iter(by_key.values()))["signature"]
        tracker.set_tags({f"sacrebleu.{name}": sig for name, sig in signatures.items()})
        tracker.set_tags({refs_tag(k): s["refs_sha256"] for k, s in by_key.items()})
        if decode_dir is not None:
            tracker.set_tags(ensemble_tags(decode_dir))
            for key in by_key:
                folder = prefix + (HYPS_ARTIFACT_DIR if key == VAL else f"{HYPS_ARTIFACT_DIR}/{TEST_DIR}")
                tracker.log_artifact(decode_dir / f"{key}.hyp", folder)
        if manifest is not None:  # logged here, not by train: a new test set must not retrain
            sources = read_manifest(manifest)
            tracker.log_datasets(manifest_datasets(sources) if sources else [])


def ensemble_tags(decode_dir: Path) -> dict[str, str]:
    """The decode stage's ensemble (stats.json), as tags of the run whose scores it made: the run's own
    model is one member, and its logged model decodes alone."""
    stats = decode_dir / "stats.json"
    members = json.loads(stats.read_text(encoding="utf-8")).get("ensemble", []) if stats.is_file() else []
    if not members:
        return {}
    return {
        "ensemble": ",".join(m["path"] for m in members),
        "ensemble_sha256": ",".join(m["model_sha256"] for m in members),
    }


def summary_lines(results: dict[str, Any]) -> list[str]:
    """One line per set: val first, then each test set."""
    lines = []
    for key, s in metrics_of(results).items():
        bleu_ci, chrf_ci = s["ci95"]["bleu"], s["ci95"]["chrf"]
        lines.append(
            f"{label(key)}: BLEU {s['bleu']:.2f} [{bleu_ci[0]:.2f}, {bleu_ci[1]:.2f}]  "
            f"chrF {s['chrf']:.2f} [{chrf_ci[0]:.2f}, {chrf_ci[1]:.2f}]  "
            + (f"chrF++ {s['chrfpp']:.2f}  " if "chrfpp" in s else "")
            + f"TER {s['ter']:.2f}  "
            f"({s['n_lines']} lines)"
        )
    return lines


@click.command("score")
@click.option(
    "--params",
    "params_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="params.yaml: with --model, log the model to its MLflow run (registered as "
    "tracking.register_model, if set).",
)
@directory(
    "decode",
    required=True,
    help="Directory with val.hyp and test/<name>.hyp (the decode stage's output).",
)
@directory(
    "refs",
    required=True,
    help="Directory with the references val.tgt and test/<name>.tgt (data/raw).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The metrics JSON to write (DVC metrics).",
)
@directory(
    "model",
    default=None,
    help="Model dir; if it holds mlflow_run.json, the scores are logged to that MLflow run.",
)
@click.option(
    "--prefix",
    default="",
    help="With --model: begin the MLflow names of the scores and hypotheses with this (e.g. int8.), "
    "for another decoding of the run's model logged beside its own.",
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
    params_file: Path | None,
    decode_dir: Path,
    refs_dir: Path,
    out: Path,
    model_dir: Path | None,
    prefix: str,
    bootstrap: int,
    seed: int,
) -> None:
    """Score val and each test set with sacreBLEU (BLEU, chrF, chrF++, TER; intervals of BLEU and chrF)."""
    params = load_params(params_file) if params_file is not None else None
    results = score(decode_dir, refs_dir, out, model_dir, bootstrap, seed, params, prefix)
    for line in summary_lines(results):
        click.echo(line)
