"""Stage `report`: one Markdown page with scores, experiments, training, samples, attention, data, params.

The page is rebuilt from scratch from the other stages' outputs each time: this
module reads them and picks the samples (BLEU by length, samples and heatmaps
are of the first test set: data/raw/test/<name>.src|tgt, data/decode/test/
<name>.hyp); pipeline/reporting/page.py renders the page and
pipeline/reporting/figures.py draws the figures.

The experiments table comes from MLflow, never from `dvc exp show`: this
stage runs inside `dvc repro`/`dvc exp run`, which hold the repository lock
that `dvc exp show` waits for. It is a snapshot of the runs when the report
was made (MLflow is not a DVC dependency); `python -m pipeline experiments`
shows the runs now.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pandas as pd

from pipeline import files
from pipeline import params as P
from pipeline.errors import UserError
from pipeline.reporting import runs as E
from pipeline.reporting.figures import plot_bleu_by_length, plot_experiment_curves, plot_learning_curves
from pipeline.reporting.hypotheses import TEST_DIR, set_keys, testset_of
from pipeline.reporting.metrics import bleu_by_length, sentence_chrf
from pipeline.reporting.page import (
    HEATMAP_WORDS,
    MIN_SAMPLE_WORDS,
    N_SAMPLES,
    ReportInputs,
    Sample,
    SplitLines,
    render_report,
)
from pipeline.reporting.tables import run_label
from pipeline.stages.options import directory, load_params, params_option
from pipeline.tracking.run_file import RUN_FILE, RunFile
from pipeline.tracking.tracker import Tracker

LENGTH_BUCKETS = (10, 20, 30, 40)  # source words; fixed so reports of different runs compare
CURVES_PNG = "learning_curves.png"
LENGTH_PNG = "bleu_by_length.png"
COMPARE_PNG = "experiments_val_bleu.png"
MANIFEST = "manifest.json"  # the download stage's, in data/raw
MODEL_FILE = "model.pt"  # checkpoint.MODEL_FILE, without importing torch for every report
RUNS_COMPARED = 6  # curves in the comparison figure: this run and the best others
HEATMAP_SENTENCES = 2


# --- Markdown ------------------------------------------------------------------


# --- sections -----------------------------------------------------------------------


# --- figures ------------------------------------------------------------------------


# --- reading inputs ------------------------------------------------------------------


def select_samples(
    srcs: Sequence[str],
    refs: Sequence[str],
    hyps: Sequence[str],
    n: int = N_SAMPLES,
    min_words: int = MIN_SAMPLE_WORDS,
) -> dict[str, list[Sample]]:
    """The n best and n worst lines by sentence chrF (references of min_words+ words), and the first n."""
    chrf = sentence_chrf(hyps, refs)

    def sample(i: int) -> Sample:
        return Sample(i + 1, chrf[i], srcs[i], refs[i], hyps[i])

    candidates = [i for i, r in enumerate(refs) if len(r.split()) >= min_words]
    best = sorted(candidates, key=lambda i: (-chrf[i], i))[:n]
    worst = sorted((i for i in candidates if i not in best), key=lambda i: (chrf[i], i))[:n]
    return {
        "best": [sample(i) for i in best],
        "worst": [sample(i) for i in worst],
        "first": [sample(i) for i in range(min(n, len(refs)))],
    }


def read_tsv(path: Path) -> pd.DataFrame | None:
    """A tab-separated log with a header row; None if the file is absent."""
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path, sep="\t")
    except pd.errors.EmptyDataError:
        return None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a tab-separated table ({e}); rerun the train stage") from e


def read_json(path: Path, required: bool = False) -> dict[str, Any] | None:
    if not path.is_file():
        if required:
            raise UserError(f"{path}: no such file; run the stage that makes it first (dvc repro)")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UserError(f"{path}: not valid JSON ({e}); rerun the stage that makes it") from e


def test_set_order(manifest: dict[str, Any] | None, decode_dir: Path) -> list[str]:
    """The test sets: in the raw manifest's (data.test's) order, then any other decoded one by name."""
    listed = [str(e.get("name")) for e in ((manifest or {}).get("splits") or {}).get(TEST_DIR) or []]
    decoded = [n for k in set_keys(decode_dir, ".hyp") if (n := testset_of(k)) is not None]
    return list(dict.fromkeys([*listed, *decoded]))


def load_test_set(raw_dir: Path, decode_dir: Path, name: str) -> SplitLines | None:
    """Test set `name`, line-aligned; None without its hypotheses."""
    hyp_path = decode_dir / TEST_DIR / f"{name}.hyp"
    if not hyp_path.is_file():
        return None
    src_path, ref_path = raw_dir / TEST_DIR / f"{name}.src", raw_dir / TEST_DIR / f"{name}.tgt"
    for path in (src_path, ref_path):
        if not path.is_file():
            raise UserError(f"{path}: no such file; run the download stage")
    srcs, refs, hyps = files.read_lines(src_path), files.read_lines(ref_path), files.read_lines(hyp_path)
    if not len(srcs) == len(refs) == len(hyps):
        raise UserError(
            f"{src_path}, {ref_path} and {hyp_path} have {len(srcs)}, {len(refs)} and {len(hyps)} lines; "
            "they must be line-aligned: rerun decode (dvc repro decode)"
        )
    return SplitLines(srcs, refs, hyps)


def build_report(
    params: P.Params,
    metrics_path: Path,
    train_log: Path,
    clean_stats: Path,
    raw_dir: Path,
    decode_dir: Path,
    out: Path,
    figures_dir: Path,
    model_dir: Path | None = None,
    student_dir: Path | None = None,
) -> str:
    """Read the stage outputs, draw the figures, write the page; returns its Markdown."""
    steps, valid = read_tsv(train_log / "steps.tsv"), read_tsv(train_log / "valid.tsv")
    manifest = read_json(raw_dir / MANIFEST)
    test_sets = test_set_order(manifest, decode_dir)
    first = test_sets[0] if test_sets else None
    test = load_test_set(raw_dir, decode_dir, first) if first is not None else None
    length_rows = bleu_by_length(test.srcs, test.hyps, test.refs, LENGTH_BUCKETS) if test else []
    samples = select_samples(test.srcs, test.refs, test.hyps) if test else {}

    run_file = model_dir / RUN_FILE if model_dir is not None else None
    run_id = _run_id(run_file)
    runs, runs_note = read_experiments(params.tracking.experiment)
    compared = experiment_curves(runs, run_id) if runs is not None else []

    figures, heatmaps, heatmaps_note = draw_figures(
        figures_dir,
        out.parent,
        logs=(steps, valid),
        by_length=(length_rows, first),
        compared=(compared, _label(runs, run_id)),
        heatmaps_of=(model_dir, test.srcs if test else [], params.decode, first or TEST_DIR),
    )
    inputs = ReportInputs(
        params=params.to_dict(),
        metrics=read_json(metrics_path, required=True) or {},
        summary=read_json(train_log / "summary.json"),
        clean_stats=read_json(clean_stats),
        manifest=manifest,
        test_sets=test_sets,
        analysed=first if test else None,
        length_rows=length_rows,
        samples=samples,
        figures=figures,
        run_id=run_id,
        experiments=runs,
        experiments_note=runs_note,
        heatmaps=heatmaps,
        heatmaps_note=heatmaps_note,
        student=read_student(student_dir, params) if student_dir is not None else None,
    )
    text = render_report(inputs)
    files.write_text(out, text)
    if run_file is not None:
        with Tracker.from_run_file(run_file) as tracker:
            tracker.log_artifact(out, "report")
            tracker.log_artifacts(figures_dir, "report/figures")
    return text


def draw_figures(
    figures_dir: Path,
    page_dir: Path,
    *,
    logs: tuple[pd.DataFrame | None, pd.DataFrame | None],
    by_length: tuple[list[dict[str, Any]], str | None],
    compared: tuple[list[tuple[str, pd.DataFrame]], str | None],
    heatmaps_of: tuple[Path | None, list[str], P.DecodeParams, str],
) -> tuple[dict[str, str], list[tuple[str, str]], str | None]:
    """Draw the report's figures into figures_dir, rewritten whole so that no stale figure survives.

    logs: train's steps and valid logs; by_length: the rows and their test set; compared: the runs'
    validation curves and this run's label; heatmaps_of: (model dir, sources, decode params, set).
    Returns each figure's link from page_dir, the heatmaps' (caption, link), and why there are none.
    """

    def link(name: str) -> str:
        return Path(os.path.relpath(figures_dir / name, page_dir)).as_posix()

    figures = {"curves": link(CURVES_PNG)}
    with files.atomic_path(figures_dir) as tmp:
        tmp.mkdir()
        plot_learning_curves(*logs, tmp / CURVES_PNG)
        rows, analysed = by_length
        if rows and analysed is not None:
            plot_bleu_by_length(rows, tmp / LENGTH_PNG, analysed)
            figures["length"] = link(LENGTH_PNG)
        curves, current = compared
        if len(curves) > 1:
            plot_experiment_curves(curves, current, tmp / COMPARE_PNG)
            figures["compare"] = link(COMPARE_PNG)
        model_dir, srcs, decode, name = heatmaps_of
        heatmaps, note = draw_heatmaps(model_dir, srcs, tmp, decode, name)
    return figures, [(caption, link(name)) for caption, name in heatmaps], note


def read_experiments(experiment: str) -> tuple[pd.DataFrame | None, str | None]:
    """The MLflow runs of `experiment` as experiments.table(), or None and why; never fails the report."""
    try:
        return E.mlflow_table(experiment), None
    except E.ExperimentsUnavailable as e:
        return None, f"No experiments table: {e}."


def experiment_curves(runs: pd.DataFrame, current: str | None) -> list[tuple[str, pd.DataFrame]]:
    """Validation BLEU histories of this run and the best others, by rank and labelled; [] if MLflow fails."""
    ids: list[str] = list(runs["id"])
    others = [i for i in ids if i != current][: RUNS_COMPARED - 1]
    picked = others + ([current] if current is not None and current in ids else [])
    try:
        histories = E.mlflow_histories(picked, "val_bleu")
    except E.ExperimentsUnavailable:
        return []
    return [(_ranked_label(runs, i), histories[i]) for i in sorted(picked, key=ids.index) if i in histories]


def _label(runs: pd.DataFrame | None, run_id: str | None) -> str | None:
    """A run's name in legends: rank and name, "(this run)" for the report's own."""
    if runs is None or run_id is None or run_id not in set(runs["id"]):
        return None
    return _ranked_label(runs, run_id)


def _ranked_label(runs: pd.DataFrame, run_id: str) -> str:
    """_label of a run that is one of `runs`."""
    rank = list(runs["id"]).index(run_id)
    return f"{rank + 1}. {run_label(runs.iloc[rank])}"


def draw_heatmaps(
    model_dir: Path | None,
    sources: Sequence[str],
    figures_dir: Path,
    decode: P.DecodeParams | None = None,
    test_set: str = TEST_DIR,
) -> tuple[list[tuple[str, str]], str | None]:
    """Cross-attention PNGs of fixed sentences of `test_set` (its `sources`) into `figures_dir`:
    ([(caption, file name)], why none)."""
    if importlib.util.find_spec("pipeline.reporting.heatmaps") is None:
        return [], "No attention heatmaps: this version has no pipeline/reporting/heatmaps.py."
    if model_dir is None or not (model_dir / MODEL_FILE).is_file():
        return [], "No attention heatmaps: no trained model was given (--model)."
    lines = heatmap_lines(sources)
    if not lines:
        low, high = HEATMAP_WORDS
        return [], f"No attention heatmaps: no sentence of {test_set} has {low}-{high} words."
    # Imported here: torch and the model load only when there is a model to draw.
    from pipeline.decoding.translator import Translator
    from pipeline.reporting import heatmaps

    # The decode stage's settings, so the heatmaps show the translations the scores are about.
    translator = Translator.from_dir(model_dir, device="cpu", settings=decode)
    try:
        paths = heatmaps.plot_cross_attention(translator, [sources[i - 1] for i in lines], figures_dir)
    except UserError as e:  # a decoder-only model has no cross-attention
        return [], f"No attention heatmaps: {e}."
    captions = [f"Cross-attention of line {line} of {test_set}, heads averaged" for line in lines]
    return [(caption, path.name) for caption, path in zip(captions, paths)], None


def heatmap_lines(sources: Sequence[str], n: int = HEATMAP_SENTENCES) -> list[int]:
    """The first n test lines (from 1) of HEATMAP_WORDS source words: the same sentences in every run."""
    low, high = HEATMAP_WORDS
    return [i + 1 for i, s in enumerate(sources) if low <= len(s.split()) <= high][:n]


def read_student(student_dir: Path, params: P.Params) -> dict[str, Any] | None:
    """The student stage's logs and scores (reports/student); None while distillation is off."""
    summary = read_json(student_dir / "summary.json", required=True) or {}
    if summary.get("enabled") is False:
        return None
    metrics = {"fp32": read_json(student_dir / "metrics.json", required=True) or {}}
    q = params.distill.student.quantization
    if q != "none":
        metrics[q] = read_json(student_dir / f"metrics-{q}.json", required=True) or {}
    return {"summary": summary, "metrics": metrics}


def _run_id(run_file: Path | None) -> str | None:
    """The MLflow run id in mlflow_run.json, or None; the report never fails over it."""
    return RunFile.read_or_empty(run_file).run_id if run_file is not None else None


@click.command("report")
@params_option
@click.option(
    "--metrics",
    "metrics_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The score stage's metrics JSON.",
)
@click.option(
    "--train-log",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The train stage's logs: steps.tsv, valid.tsv, summary.json.",
)
@click.option(
    "--clean-stats",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The clean stage's stats.json.",
)
@directory(
    "raw",
    required=True,
    help="Directory with test/<name>.src and .tgt, and manifest.json (data/raw).",
)
@directory(
    "decode",
    required=True,
    help="Directory with test/<name>.hyp (data/decode).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The Markdown report to write.",
)
@directory(
    "figures",
    required=True,
    help="Directory for the report's PNG figures (rewritten whole).",
)
@directory(
    "model",
    default=None,
    help="Model dir: its model draws the attention heatmaps; if it holds mlflow_run.json, "
    "the report is logged to that MLflow run and marked in the experiments table.",
)
@directory(
    "student",
    default=None,
    help="The student stage's logs and scores (reports/student): the student beside this run's model.",
)
def command(
    params_file: Path,
    metrics_path: Path,
    train_log: Path,
    clean_stats: Path,
    raw_dir: Path,
    decode_dir: Path,
    out: Path,
    figures_dir: Path,
    model_dir: Path | None,
    student_dir: Path | None,
) -> None:
    """Write the Markdown report: scores, experiments, training curves, samples, attention."""
    build_report(
        load_params(params_file),
        metrics_path,
        train_log,
        clean_stats,
        raw_dir,
        decode_dir,
        out,
        figures_dir,
        model_dir,
        student_dir,
    )
    click.echo(f"wrote {out} and {figures_dir}/")
