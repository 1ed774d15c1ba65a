"""The report page: `render_report` is a pure function of `ReportInputs`, one Markdown section each.

Sections, in order: scores of val and of each test set with their sacreBLEU
signatures, the distilled student's beside them (with distillation on), the
experiments table (this run marked), training, BLEU by source
length, sample translations and cross-attention heatmaps (these three on the
first test set), the data (sources from data/raw/manifest.json, what cleaning
dropped per source and reason from data/clean/stats.json), and every param.
Tables are made here (pandas' `to_markdown` needs tabulate, which the project
does not depend on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pandas as pd

from pipeline import params as P
from pipeline.reporting.hypotheses import VAL, key_of, label, metrics_of, testset_of
from pipeline.reporting.runs import group_seeds
from pipeline.reporting.tables import experiments_markdown, fmt, fmt_hms, fmt_score, markdown_table

N_SAMPLES = 3
MIN_SAMPLE_WORDS = 4  # chrF of very short sentences says little; keep them out of best/worst
HEATMAP_WORDS = (5, 15)  # source words of the heatmap sentences: enough context, still legible cells
SCORE_NAMES = {"bleu": "BLEU", "chrf": "chrF", "chrfpp": "chrF++", "ter": "TER"}
OPTIONAL_SCORES = {"chrfpp"}  # shown when the metrics have it (score writes it since chrF++ was added)
# data/clean/stats.json's drop reasons, in the order the clean stage applies them.
# Drop reasons the cleaning table always shows; others (the web-data rules'), where a count is not 0
DROP_REASONS = ("empty", "heldout_overlap", "too_long", "ratio", "duplicate")

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
    """A test set's sources, references and hypotheses, line-aligned."""

    srcs: list[str]
    refs: list[str]
    hyps: list[str]


@dataclass(frozen=True)
class ReportInputs:
    """Everything the page shows, already read and computed."""

    params: dict[str, Any]
    metrics: dict[str, Any]  # reports/metrics.json: {"val": {...}, "test": {"<name>": {...}}}
    summary: dict[str, Any] | None = None
    clean_stats: dict[str, Any] | None = None
    manifest: dict[str, Any] | None = None  # data/raw/manifest.json
    test_sets: list[str] = field(default_factory=list)  # names in data.test order
    analysed: str | None = None  # the test set of the lengths, samples and heatmaps: the first
    length_rows: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[str, list[Sample]] = field(default_factory=dict)  # best, worst, first
    figures: dict[str, str] = field(default_factory=dict)  # curves, length, compare -> link from the page
    run_id: str | None = None
    experiments: pd.DataFrame | None = None  # experiments.table() of the MLflow runs
    experiments_note: str | None = None  # why there is no table
    heatmaps: list[tuple[str, str]] = field(default_factory=list)  # (caption, link)
    heatmaps_note: str | None = None  # why there are no heatmaps
    # the student stage's: {"summary": summary.json, "metrics": {"fp32": metrics.json, "<quantization>": ...}}
    student: dict[str, Any] | None = None


def render_report(inputs: ReportInputs) -> str:
    """The whole report page as Markdown."""
    shown = inputs.analysed or "test"
    sections = [
        _title(inputs),
        _scores(inputs.metrics, inputs.test_sets),
        *([_student(inputs.student, inputs.metrics, inputs.test_sets)] if inputs.student else []),
        _experiments(inputs),
        _training(inputs.summary, inputs.figures.get("curves")),
        _lengths(inputs.length_rows, inputs.figures.get("length"), shown),
        _samples(inputs.samples, shown),
        _attention(inputs.heatmaps, inputs.heatmaps_note, shown),
        _data(inputs.manifest, inputs.clean_stats),
        _params(inputs.params),
    ]
    return "\n\n".join(s.strip() for s in sections) + "\n"


def _title(inputs: ReportInputs) -> str:
    data = inputs.manifest or inputs.params.get("data", {})
    pair = f"{data.get('src_lang', '?')}→{data.get('tgt_lang', '?')}"
    train = ", ".join(_source_names(inputs.manifest, inputs.params, "train"))
    lines = [f"# Translation report: {pair}" + (f" ({train})" if train else "")]
    if inputs.run_id:
        lines.append(f"\nMLflow run: `{inputs.run_id}`")
    return "\n".join(lines)


def _source_names(manifest: dict[str, Any] | None, params: dict[str, Any], split: str) -> list[str]:
    """The names of a split's sources: from the raw manifest, else from params data.<split> if a list."""
    if manifest is not None:
        return [str(e.get("name")) for e in (manifest.get("splits") or {}).get(split) or []]
    listed = params.get("data", {}).get(split)
    return [str(n) for n in listed] if isinstance(listed, (list, tuple)) else []


def _scores(metrics: dict[str, Any], test_sets: list[str]) -> str:
    by_key = metrics_of(metrics)
    order = [VAL, *(key_of(n) for n in test_sets)]
    keys = [k for k in order if k in by_key] + [k for k in by_key if k not in order]
    shown = [m for m in SCORE_NAMES if m not in OPTIONAL_SCORES or any(m in by_key[k] for k in keys)]
    rows = [
        [label(k), *(_score_cell(by_key[k], m) for m in shown), fmt(by_key[k].get("n_lines"))] for k in keys
    ]
    header = ["set", *(SCORE_NAMES[m] for m in shown), "lines"]
    out = ["## Scores", "", markdown_table(header, rows, "l" + "r" * (len(header) - 1))]
    tests = [label(k) for k in keys if testset_of(k) is not None]
    if tests:
        sets = "the test set" if len(tests) == 1 else f"the {len(tests)} test sets"
        out += ["", f"val, then {sets} of data.test, each scored on its own."]
    bootstraps = {_bootstrap_text(by_key[k]["bootstrap"]) for k in keys if "bootstrap" in by_key[k]}
    if bootstraps:
        how = "; ".join(sorted(bootstraps))
        out += ["", f"In parentheses: the 95% confidence interval, by sacreBLEU's bootstrap ({how})."]
    signatures: dict[str, list[str]] = {}
    for key in keys:
        for metric, sig in by_key[key].get("signature", {}).items():
            if sig not in signatures.setdefault(metric, []):
                signatures[metric].append(sig)
    if signatures:
        out += ["", "sacreBLEU signatures:", ""]
        out += [f"- {SCORE_NAMES.get(m, m)}: `{s}`" for m, sigs in signatures.items() for s in sigs]
    return "\n".join(out)


def _student(student: dict[str, Any], metrics: dict[str, Any], test_sets: list[str]) -> str:
    """BLEU of the distilled student (each of its exports) beside this run's model, a set a column."""
    systems = {"this run's model (data/model)": metrics_of(metrics)}
    systems |= {f"student, {kind}": metrics_of(m) for kind, m in student["metrics"].items()}
    keys = [k for k in [VAL, *(key_of(n) for n in test_sets)] if k in systems["student, fp32"]]
    rows = [
        [name, *(_score_cell(scores.get(k, {}), "bleu") for k in keys)] for name, scores in systems.items()
    ]
    summary = student["summary"]
    return "\n".join(
        [
            "## The student",
            "",
            f"A smaller model trained on its teachers' translations ({fmt(summary.get('steps'))} updates, "
            f"best val BLEU at step {fmt(summary.get('best_step'))}): BLEU, each system at the beam its "
            "settings give (decode.beam; distill.student.decode.beam). Its logs and scores: "
            "reports/student/; its teachers: data/distill/teachers.json (docs/distillation.md).",
            "",
            markdown_table(["system", *map(label, keys)], rows, "l" + "r" * len(keys)),
        ]
    )


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
        drawn = summary.get("pairs_drawn_per_epoch") or {}
        if drawn:
            out += [
                "",
                "Pairs each training source gives an epoch (train.source_weights, train.source_temperature):",
                "",
            ]
            out.append(
                markdown_table(["source", "pairs an epoch"], [[n, fmt(d)] for n, d in drawn.items()], "lr")
            )
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
        f"Runs of the MLflow experiment `{experiment}` when this report was made, best first by BLEU on "
        "their first test set, "
        "named by their DVC experiment if they have one; the columns after commit are the params that "
        "differ between runs. `python -m pipeline experiments` lists the runs now.",
        "",
        experiments_markdown(group_seeds(frame), inputs.run_id, EXPERIMENTS_SHOWN),
    ]
    if inputs.figures.get("compare"):
        caption = "Validation BLEU by update step of this run and the best others"
        out += ["", f"![{caption}]({inputs.figures['compare']})"]
    return "\n".join(out)


def _lengths(rows: list[dict[str, Any]], chart: str | None, test_set: str) -> str:
    if not rows:
        return "## BLEU by source length\n\nNo test translations to analyse."
    table = markdown_table(
        ["source words", "lines", "BLEU"],
        [[r["bucket"], fmt(r["n_lines"]), fmt_score(r["bleu"])] for r in rows],
        "lrr",
    )
    out = [f"## BLEU by source length ({test_set})", "", _first_set_note(test_set), "", table]
    if chart:
        out += ["", f"![BLEU by source length]({chart})"]
    return "\n".join(out)


def _first_set_note(test_set: str) -> str:
    return f"On the first test set, {test_set}."


def _samples(samples: dict[str, list[Sample]], test_set: str) -> str:
    titles = {
        "best": f"Best {N_SAMPLES} by sentence chrF (references of {MIN_SAMPLE_WORDS}+ words)",
        "worst": f"Worst {N_SAMPLES} by sentence chrF (references of {MIN_SAMPLE_WORDS}+ words)",
        "first": f"First {N_SAMPLES} lines of {test_set}",
    }
    out = [f"## Sample translations ({test_set})"]
    if not any(samples.values()):
        return "## Sample translations\n\nNo test translations to show."
    out += ["", _first_set_note(test_set)]
    for kind, title in titles.items():
        rows = [[s.line, fmt(s.chrf, 1), s.src, s.ref, s.hyp] for s in samples.get(kind, [])]
        if rows:
            header = ["line", "chrF", "source", "reference", "hypothesis"]
            out += ["", f"### {title}", "", markdown_table(header, rows, "rr")]
    return "\n".join(out)


def _attention(heatmaps: list[tuple[str, str]], note: str | None, test_set: str) -> str:
    out = [f"## Cross-attention ({test_set})", ""]
    if not heatmaps:
        return "\n".join([*out, note or "No attention heatmaps."])
    out.append(
        f"Decoder-to-encoder attention while translating the first sentences of {test_set} (the first "
        f"test set) of {HEATMAP_WORDS[0]}-{HEATMAP_WORDS[1]} words (the same in every run), one panel per "
        "decoder layer: a row per output piece (the last one predicts the end), a column per source piece."
    )
    for caption, link in heatmaps:
        out += ["", f"![{caption}]({link})"]
    return "\n".join(out)


def _data(manifest: dict[str, Any] | None, stats: dict[str, Any] | None) -> str:
    out = ["## Data", ""]
    if manifest is None:
        out.append("No download manifest (data/raw/manifest.json) was found.")
    else:
        out += ["Sources, as downloaded (data/raw/manifest.json):", "", sources_table(manifest)]
        heldout = manifest.get("heldout")
        if heldout:
            out += ["", f"Held out of the training data: {_plain(heldout)}."]
    out += ["", "### Cleaning", ""]
    if not stats:
        out.append("No cleaning statistics were found.")
    elif isinstance(stats.get("train"), dict) and "lines_in" in stats["train"]:
        out += [
            "Lines in and out of the clean stage (data/clean/stats.json), and the pairs dropped per reason. "
            "heldout_overlap: training pairs whose source or target occurs in a val or test set "
            "(decontamination).",
            "",
            cleaning_table(stats),
        ]
    else:
        out.append(stats_table(stats))
    return "\n".join(out)


def sources_table(manifest: dict[str, Any]) -> str:
    """A row per source of each split: its name, lines kept and where it came from."""
    rows = []
    for split, entries in (manifest.get("splits") or {}).items():
        for entry in entries or []:
            origin = (
                "catalog"
                if entry.get("catalog")
                else ", ".join(str(f.get("source")) for f in entry.get("files") or [])
            )
            rows.append([split, entry.get("name"), fmt(entry.get("lines")), origin or "–"])
    return markdown_table(["split", "source", "lines", "from"], rows, "llrl")


def cleaning_table(stats: dict[str, Any]) -> str:
    """Lines in, out and dropped per reason: each train source, train in all, val, each test set."""
    train = stats.get("train") or {}
    named = [(f"train: {n}", s) for n, s in (train.get("sources") or {}).items()]
    named += [("train, all", train)]
    if isinstance(stats.get("val"), dict):
        named.append(("val", stats["val"]))
    named += [(f"test: {n}", s) for n, s in (stats.get("test") or {}).items() if isinstance(s, dict)]
    found = [r for s in (s for _, s in named) for r in (s.get("dropped") or {})]
    counted = {r for _, s in named for r, n in (s.get("dropped") or {}).items() if n}
    reasons = [r for r in DROP_REASONS if r in found] + [
        r for r in dict.fromkeys(found) if r not in DROP_REASONS and r in counted
    ]
    rows = [
        [
            name,
            fmt(s.get("lines_in")),
            fmt(s.get("lines_out")),
            *(fmt((s.get("dropped") or {}).get(r)) for r in reasons),
        ]
        for name, s in named
    ]
    header = ["", "lines in", "lines out", *(f"dropped: {r}" for r in reasons)]
    return markdown_table(header, rows, "l" + "r" * (len(header) - 1))


def _plain(value: Any) -> str:
    """A small JSON value as `key value, ...` text."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_plain(v)}" for k, v in value.items())
    return fmt(value)


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
