"""The report page: `render_report` is a pure function of `ReportInputs`, one Markdown section each.

Sections, in order: scores with their sacreBLEU signatures, the experiments
table (this run marked), training, BLEU by source length, sample translations,
cross-attention heatmaps, what cleaning dropped, and every param. Tables are
made here (pandas' `to_markdown` needs tabulate, which the project does not
depend on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pandas as pd

from pipeline import params as P
from pipeline.reporting.runs import group_seeds
from pipeline.reporting.tables import experiments_markdown, fmt, fmt_hms, fmt_score, markdown_table

N_SAMPLES = 3
MIN_SAMPLE_WORDS = 4  # chrF of very short sentences says little; keep them out of best/worst
HEATMAP_WORDS = (5, 15)  # source words of the heatmap sentences: enough context, still legible cells
SCORE_NAMES = {"bleu": "BLEU", "chrf": "chrF", "ter": "TER"}

EXPERIMENTS_SHOWN = 15  # table rows in the report (plus this run if lower); the command lists all


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
        [split, *(_score_cell(metrics[split], m) for m in SCORE_NAMES), fmt(metrics[split].get("n_lines"))]
        for split in splits
    ]
    out = ["## Scores", "", markdown_table(["split", *SCORE_NAMES.values(), "lines"], rows, "lrrrr")]
    bootstraps = {_bootstrap_text(metrics[s]["bootstrap"]) for s in splits if "bootstrap" in metrics[s]}
    if bootstraps:
        how = "; ".join(sorted(bootstraps))
        out += ["", f"In parentheses: the 95% confidence interval, by sacreBLEU's bootstrap ({how})."]
    signatures: dict[str, list[str]] = {}
    for split in splits:
        for metric, sig in metrics[split].get("signature", {}).items():
            if sig not in signatures.setdefault(metric, []):
                signatures[metric].append(sig)
    if signatures:
        out += ["", "sacreBLEU signatures:", ""]
        out += [f"- {SCORE_NAMES.get(m, m)}: `{s}`" for m, sigs in signatures.items() for s in sigs]
    return "\n".join(out)


def _score_cell(scores: dict[str, Any], metric: str) -> str:
    """The score, then its 95% interval where score wrote one."""
    interval = (scores.get("ci95") or {}).get(metric)
    text = fmt_score(scores.get(metric))
    return f"{text} ({fmt_score(interval[0])}–{fmt_score(interval[1])})" if interval else text


def _bootstrap_text(bootstrap: dict[str, Any]) -> str:
    return f"{fmt(bootstrap.get('n'))} resamples, seed {bootstrap.get('seed')}"


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
        experiments_markdown(group_seeds(frame), inputs.run_id, EXPERIMENTS_SHOWN),
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
