"""Report stage: one Markdown page with scores, experiments, training, samples, attention, data, params.

The page is rebuilt from scratch from the other stages' outputs each time;
`render_report` is a pure function of `ReportInputs`, the figures are drawn
by the `plot_*` functions. Tables are made here (pandas' `to_markdown` needs
tabulate, which the project does not depend on).

The experiments table comes from MLflow, never from `dvc exp show`: this
stage runs inside `dvc repro`/`dvc exp run`, which hold the repository lock
that `dvc exp show` waits for. It is a snapshot of the runs when the report
was made (MLflow is not a DVC dependency); `python -m pipeline experiments`
shows the runs now.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import click
import matplotlib
import pandas as pd

from pipeline import files
from pipeline import params as P
from pipeline.errors import UserError
from pipeline.reporting import runs as E
from pipeline.reporting.metrics import bleu_by_length, sentence_chrf
from pipeline.reporting.tables import (
    experiments_markdown,
    fmt,
    fmt_hms,
    fmt_score,
    markdown_table,
    run_label,
)
from pipeline.stages.options import load_params, params_option
from pipeline.tracking import RUN_FILE, Tracker

matplotlib.use("Agg")  # files only: no display on servers and in DVC runs
import matplotlib.pyplot as plt

LENGTH_BUCKETS = (10, 20, 30, 40)  # source words; fixed so reports of different runs compare
N_SAMPLES = 3
MIN_SAMPLE_WORDS = 4  # chrF of very short sentences says little; keep them out of best/worst
CURVES_PNG = "learning_curves.png"
LENGTH_PNG = "bleu_by_length.png"
COMPARE_PNG = "experiments_val_bleu.png"
MODEL_FILE = "model.pt"  # checkpoint.MODEL_FILE, without importing torch for every report
DPI = 110
SCORE_NAMES = {"bleu": "BLEU", "chrf": "chrF", "ter": "TER"}
EXPERIMENTS_SHOWN = 15  # table rows in the report (plus this run if lower); the command lists all
RUNS_COMPARED = 6  # curves in the comparison figure: this run and the best others
HEATMAP_SENTENCES = 2
HEATMAP_WORDS = (5, 15)  # source words of the heatmap sentences: enough context, still legible cells


@dataclass(frozen=True)
class Sample:
    """One test sentence shown in the report; `line` counts from 1."""

    line: int
    chrf: float
    src: str
    ref: str
    hyp: str


class SplitLines(NamedTuple):
    """The test split's sources, references and hypotheses, line-aligned."""

    srcs: list[str]
    refs: list[str]
    hyps: list[str]


@dataclass(frozen=True)
class ReportInputs:
    """Everything the page shows, already read and computed."""

    params: dict[str, Any]
    metrics: dict[str, Any]
    summary: dict[str, Any] | None = None
    clean_stats: dict[str, Any] | None = None
    length_rows: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[str, list[Sample]] = field(default_factory=dict)  # best, worst, first
    figures: dict[str, str] = field(default_factory=dict)  # curves, length, compare -> link from the page
    run_id: str | None = None
    experiments: pd.DataFrame | None = None  # experiments.table() of the MLflow runs
    experiments_note: str | None = None  # why there is no table
    heatmaps: list[tuple[str, str]] = field(default_factory=list)  # (caption, link)
    heatmaps_note: str | None = None  # why there are no heatmaps


# --- Markdown ------------------------------------------------------------------


# --- sections -----------------------------------------------------------------------


def render_report(inputs: ReportInputs) -> str:
    """The whole report page as Markdown."""
    sections = [
        _title(inputs),
        _scores(inputs.metrics),
        _experiments(inputs),
        _training(inputs.summary, inputs.figures.get("curves")),
        _lengths(inputs.length_rows, inputs.figures.get("length")),
        _samples(inputs.samples),
        _attention(inputs.heatmaps, inputs.heatmaps_note),
        _cleaning(inputs.clean_stats),
        _params(inputs.params),
    ]
    return "\n\n".join(s.strip() for s in sections) + "\n"


def _title(inputs: ReportInputs) -> str:
    data = inputs.params.get("data", {})
    pair = f"{data.get('src_lang', '?')}→{data.get('tgt_lang', '?')}"
    corpus = data.get("corpus", "?")
    if corpus == "multi30k" and data.get("multi30k_test"):
        corpus = f"multi30k, test set {data['multi30k_test']}"
    lines = [f"# Translation report: {pair} ({corpus})"]
    if inputs.run_id:
        lines.append(f"\nMLflow run: `{inputs.run_id}`")
    return "\n".join(lines)


def _scores(metrics: dict[str, Any]) -> str:
    splits = [s for s in ("val", "test") if s in metrics] + [s for s in metrics if s not in ("val", "test")]
    rows = [
        [split, *(fmt_score(metrics[split].get(m)) for m in SCORE_NAMES), fmt(metrics[split].get("n_lines"))]
        for split in splits
    ]
    out = ["## Scores", "", markdown_table(["split", *SCORE_NAMES.values(), "lines"], rows, "lrrrr")]
    signatures: dict[str, list[str]] = {}
    for split in splits:
        for metric, sig in metrics[split].get("signature", {}).items():
            if sig not in signatures.setdefault(metric, []):
                signatures[metric].append(sig)
    if signatures:
        out += ["", "sacreBLEU signatures:", ""]
        out += [f"- {SCORE_NAMES.get(m, m)}: `{s}`" for m, sigs in signatures.items() for s in sigs]
    return "\n".join(out)


def _training(summary: dict[str, Any] | None, curves: str | None) -> str:
    out = ["## Training", ""]
    if summary is None:
        out.append("No training summary (reports/train/summary.json) was found.")
    else:
        rows = [
            ["parameters", _count(summary.get("n_params"))],
            ["training time", _duration(summary.get("train_seconds"))],
            ["tokens/s", fmt(summary.get("tokens_per_s"), 0)],
            ["device", fmt(summary.get("device"))],
            ["precision", fmt(summary.get("precision"))],
            ["steps", fmt(summary.get("steps"))],
            ["epochs", fmt(summary.get("epochs"), 0)],
            ["best step", fmt(summary.get("best_step"))],
            ["best val BLEU (greedy)", fmt_score(summary.get("best_val_bleu"))],
            ["stopped", fmt(summary.get("stopped"))],
        ]
        out.append(markdown_table(["", "value"], rows, "lr"))
    if curves:
        out += ["", f"![Learning curves: loss, validation BLEU and learning rate by update step]({curves})"]
    return "\n".join(out)


def _count(n: Any) -> str:
    if not isinstance(n, int):
        return fmt(n)
    return f"{n / 1e6:.2f} M ({n:,})" if n >= 1e5 else f"{n:,}"


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return fmt(seconds)
    return f"{fmt_hms(seconds)} ({seconds:,.1f} s)"


def _experiments(inputs: ReportInputs) -> str:
    out = ["## Experiments", ""]
    frame = inputs.experiments
    if frame is None:
        return "\n".join([*out, inputs.experiments_note or "No experiments table."])
    experiment = inputs.params.get("tracking", {}).get("experiment", "?")
    if frame.empty:
        return "\n".join([*out, f"No runs in the MLflow experiment `{experiment}` yet."])
    out += [
        f"Runs of the MLflow experiment `{experiment}` when this report was made, best test BLEU first, "
        "named by their DVC experiment if they have one; the columns after commit are the params that "
        "differ between runs. `python -m pipeline experiments` lists the runs now.",
        "",
        experiments_markdown(frame, inputs.run_id, EXPERIMENTS_SHOWN),
    ]
    if inputs.figures.get("compare"):
        caption = "Validation BLEU by update step of this run and the best others"
        out += ["", f"![{caption}]({inputs.figures['compare']})"]
    return "\n".join(out)


def _lengths(rows: list[dict[str, Any]], chart: str | None) -> str:
    if not rows:
        return "## BLEU by source length\n\nNo test translations to analyse."
    table = markdown_table(
        ["source words", "lines", "BLEU"],
        [[r["bucket"], fmt(r["n_lines"]), fmt_score(r["bleu"])] for r in rows],
        "lrr",
    )
    out = ["## BLEU by source length (test)", "", table]
    if chart:
        out += ["", f"![BLEU by source length]({chart})"]
    return "\n".join(out)


def _samples(samples: dict[str, list[Sample]]) -> str:
    titles = {
        "best": f"Best {N_SAMPLES} by sentence chrF (references of {MIN_SAMPLE_WORDS}+ words)",
        "worst": f"Worst {N_SAMPLES} by sentence chrF (references of {MIN_SAMPLE_WORDS}+ words)",
        "first": f"First {N_SAMPLES} lines of test",
    }
    out = ["## Sample translations (test)"]
    if not any(samples.values()):
        return out[0] + "\n\nNo test translations to show."
    for kind, title in titles.items():
        rows = [[s.line, fmt(s.chrf, 1), s.src, s.ref, s.hyp] for s in samples.get(kind, [])]
        if rows:
            header = ["line", "chrF", "source", "reference", "hypothesis"]
            out += ["", f"### {title}", "", markdown_table(header, rows, "rr")]
    return "\n".join(out)


def _attention(heatmaps: list[tuple[str, str]], note: str | None) -> str:
    out = ["## Cross-attention (test)", ""]
    if not heatmaps:
        return "\n".join([*out, note or "No attention heatmaps."])
    out.append(
        "Decoder-to-encoder attention while translating the first test sentences of "
        f"{HEATMAP_WORDS[0]}-{HEATMAP_WORDS[1]} words (the same in every run), one panel per decoder "
        "layer: a row per output piece (the last one predicts the end), a column per source piece."
    )
    for caption, link in heatmaps:
        out += ["", f"![{caption}]({link})"]
    return "\n".join(out)


def _cleaning(stats: dict[str, Any] | None) -> str:
    if not stats:
        return "## Data cleaning\n\nNo cleaning statistics were found."
    return "## Data cleaning\n\n" + stats_table(stats)


def stats_table(stats: dict[str, Any]) -> str:
    """Per-split counters as one row per split; anything else as key/value rows."""
    if all(isinstance(v, dict) for v in stats.values()):
        flat = {split: P.flatten(v) for split, v in stats.items()}
        columns = list(dict.fromkeys(k for v in flat.values() for k in v))
        rows = [[split, *(fmt(v.get(c)) for c in columns)] for split, v in flat.items()]
        return markdown_table(["split", *columns], rows, "l" + "r" * len(columns))
    rows = [[k, fmt(v)] for k, v in P.flatten(stats).items()]
    return markdown_table(["", "value"], rows, "lr")


def _params(params: dict[str, Any]) -> str:
    out = ["## Params", "", "<details><summary>params.yaml, as resolved</summary>"]
    for section, values in params.items():
        flat = P.flatten(values) if isinstance(values, dict) else {section: values}
        rows = [[k, _yaml_value(v)] for k, v in flat.items()]
        out += ["", f"**{section}**", "", markdown_table(["key", "value"], rows)]
    out += ["", "</details>"]
    return "\n".join(out)


def _yaml_value(value: Any) -> str:
    """A param as params.yaml spells it (null, true, 0.001, [0.9, 0.98])."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# --- figures ------------------------------------------------------------------------


def plot_learning_curves(steps: pd.DataFrame | None, valid: pd.DataFrame | None, path: Path) -> None:
    """Three panels by update step: train and val loss; val BLEU; learning rate. PNG at `path`."""
    fig, (ax_loss, ax_bleu, ax_lr) = plt.subplots(1, 3, figsize=(12, 3.5))
    steps = None if steps is None or steps.empty else steps  # an empty log draws as no log
    valid = None if valid is None or valid.empty else valid
    has_steps, has_valid = steps is not None, valid is not None

    # The train loss is label-smoothed, the val loss is not: the gap is not overfitting.
    if steps is not None:
        ax_loss.plot(steps["step"], steps["loss"], label="train (label-smoothed)", linewidth=1.2)
    if valid is not None and valid["val_loss"].notna().any():
        ax_loss.plot(valid["step"], valid["val_loss"], "o-", label="val", markersize=3)
    _finish(ax_loss, "Loss", "cross-entropy per target token (nats)", has_steps or has_valid)
    if has_steps or has_valid:
        ax_loss.legend(frameon=False)

    bleu = valid if valid is not None and "val_bleu" in valid and valid["val_bleu"].notna().any() else None
    if bleu is not None:
        ax_bleu.plot(bleu["step"], bleu["val_bleu"], "o-", color="tab:green", markersize=3)
        best = bleu.loc[bleu["val_bleu"].idxmax()]
        ax_bleu.plot([best["step"]], [best["val_bleu"]], "*", color="black", markersize=10)
        ax_bleu.annotate(
            f"best {best['val_bleu']:.1f}",
            (best["step"], best["val_bleu"]),
            textcoords="offset points",
            xytext=(0, 7),
            ha="center",
            fontsize=8,
        )
        ax_bleu.margins(y=0.15)  # room for the label above the best point
    _finish(ax_bleu, "Validation BLEU (greedy)", "BLEU", bleu is not None)

    lr_label = "learning rate"
    if steps is not None:
        # Scaled into [1, 10): matplotlib's own offset text ("1e-3") lands on the title.
        scale = _power_of_ten(steps["lr"].max())
        ax_lr.plot(steps["step"], steps["lr"] / 10.0**scale, color="tab:orange", linewidth=1.2)
        lr_label += f" ($\\times 10^{{{scale}}}$)" if scale else ""
    _finish(ax_lr, "Learning rate", lr_label, has_steps)

    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _power_of_ten(value: float) -> int:
    """The exponent that scales `value` into [1, 10) (0 for zero or NaN)."""
    if not value or math.isnan(value):
        return 0
    return math.floor(math.log10(abs(value)))


def plot_bleu_by_length(rows: list[dict[str, Any]], path: Path) -> None:
    """Bar chart of BLEU per source-length bucket, each bar labelled with its BLEU and line count."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [r["bucket"] for r in rows]
    values = [r["bleu"] if r["bleu"] is not None else 0.0 for r in rows]
    bars = ax.bar(labels, values, color="tab:blue")
    for bar, row in zip(bars, rows):
        text = f"{row['bleu']:.1f}\n{row['n_lines']:,} lines" if row["bleu"] is not None else "no lines"
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            textcoords="offset points",
            xytext=(0, 2),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("BLEU")
    ax.set_title("Test BLEU by source length")
    ax.set_ylim(0, max([*values, 1.0]) * 1.25)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_experiment_curves(curves: list[tuple[str, pd.DataFrame]], current: str | None, path: Path) -> None:
    """Validation BLEU by update step, a line per (label, frame of step and value); `current` in black."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for label, frame in curves:
        mine = label == current
        style = {"linewidth": 2.2, "color": "black", "zorder": 3} if mine else {"linewidth": 1.2}
        ax.plot(
            frame["step"],
            frame["value"],
            "o-",
            markersize=2.5,
            label=f"{label} (this run)" if mine else label,
            **style,
        )
    _finish(ax, "Validation BLEU (greedy): this run and the best others", "BLEU", bool(curves))
    if curves:
        ax.legend(frameon=False, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _finish(ax: Any, title: str, ylabel: str, has_data: bool) -> None:
    ax.set_title(title)
    ax.set_xlabel("update step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    if not has_data:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")


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


def load_test_split(raw_dir: Path, decode_dir: Path) -> SplitLines | None:
    """The test split, line-aligned; None without test.hyp."""
    hyp_path = decode_dir / "test.hyp"
    if not hyp_path.is_file():
        return None
    src_path, ref_path = raw_dir / "test.src", raw_dir / "test.tgt"
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
) -> str:
    """Read the stage outputs, draw the figures, write the page; returns its Markdown."""
    steps, valid = read_tsv(train_log / "steps.tsv"), read_tsv(train_log / "valid.tsv")
    test = load_test_split(raw_dir, decode_dir)
    length_rows = bleu_by_length(test.srcs, test.hyps, test.refs, LENGTH_BUCKETS) if test else []
    samples = select_samples(test.srcs, test.refs, test.hyps) if test else {}

    run_file = model_dir / RUN_FILE if model_dir is not None else None
    run_id = _run_id(run_file)
    runs, runs_note = read_experiments(params.tracking.experiment)
    compared = experiment_curves(runs, run_id) if runs is not None else []

    def link(name: str) -> str:
        return Path(os.path.relpath(figures_dir / name, out.parent)).as_posix()

    figures = {"curves": link(CURVES_PNG)}
    with files.atomic_path(figures_dir) as tmp:  # the whole folder, so no stale figure survives
        tmp.mkdir()
        plot_learning_curves(steps, valid, tmp / CURVES_PNG)
        if length_rows:
            plot_bleu_by_length(length_rows, tmp / LENGTH_PNG)
            figures["length"] = link(LENGTH_PNG)
        if len(compared) > 1:
            plot_experiment_curves(compared, _label(runs, run_id), tmp / COMPARE_PNG)
            figures["compare"] = link(COMPARE_PNG)
        heatmaps, heatmaps_note = draw_heatmaps(model_dir, test.srcs if test else [], tmp, params.decode)
        heatmaps = [(caption, link(name)) for caption, name in heatmaps]

    inputs = ReportInputs(
        params=params.to_dict(),
        metrics=read_json(metrics_path, required=True) or {},
        summary=read_json(train_log / "summary.json"),
        clean_stats=read_json(clean_stats),
        length_rows=length_rows,
        samples=samples,
        figures=figures,
        run_id=run_id,
        experiments=runs,
        experiments_note=runs_note,
        heatmaps=heatmaps,
        heatmaps_note=heatmaps_note,
    )
    text = render_report(inputs)
    files.write_text(out, text)
    if run_file is not None:
        with Tracker.from_run_file(run_file) as tracker:
            tracker.log_artifact(out, "report")
            tracker.log_artifacts(figures_dir, "report/figures")
    return text


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
) -> tuple[list[tuple[str, str]], str | None]:
    """Cross-attention PNGs of fixed test sentences into `figures_dir`: ([(caption, file name)], why none)."""
    if importlib.util.find_spec("pipeline.decoding.heatmaps") is None:
        return [], "No attention heatmaps: this version has no pipeline/decoding/heatmaps.py."
    if model_dir is None or not (model_dir / MODEL_FILE).is_file():
        return [], "No attention heatmaps: no trained model was given (--model)."
    lines = heatmap_lines(sources)
    if not lines:
        low, high = HEATMAP_WORDS
        return [], f"No attention heatmaps: no test sentence has {low}-{high} words."
    # Imported here: torch and the model load only when there is a model to draw.
    from pipeline.decoding import heatmaps
    from pipeline.decoding.translator import Translator

    # The decode stage's settings, so the heatmaps show the translations the scores are about.
    translator = Translator.from_dir(model_dir, device="cpu", settings=decode)
    try:
        paths = heatmaps.plot_cross_attention(translator, [sources[i - 1] for i in lines], figures_dir)
    except UserError as e:  # a decoder-only model has no cross-attention
        return [], f"No attention heatmaps: {e}."
    captions = [f"Cross-attention of test line {line}, heads averaged" for line in lines]
    return [(caption, path.name) for caption, path in zip(captions, paths)], None


def heatmap_lines(sources: Sequence[str], n: int = HEATMAP_SENTENCES) -> list[int]:
    """The first n test lines (from 1) of HEATMAP_WORDS source words: the same sentences in every run."""
    low, high = HEATMAP_WORDS
    return [i + 1 for i, s in enumerate(sources) if low <= len(s.split()) <= high][:n]


def _run_id(run_file: Path | None) -> str | None:
    """The MLflow run id in mlflow_run.json, or None; the report never fails over it."""
    if run_file is None:
        return None
    try:
        run_id = json.loads(run_file.read_text(encoding="utf-8")).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return str(run_id) if run_id else None


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
@click.option(
    "--raw",
    "raw_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory with test.src and test.tgt.",
)
@click.option(
    "--decode",
    "decode_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory with test.hyp.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The Markdown report to write.",
)
@click.option(
    "--figures",
    "figures_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for the report's PNG figures (rewritten whole).",
)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Model dir: its model draws the attention heatmaps; if it holds mlflow_run.json, "
    "the report is logged to that MLflow run and marked in the experiments table.",
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
    )
    click.echo(f"wrote {out} and {figures_dir}/")
