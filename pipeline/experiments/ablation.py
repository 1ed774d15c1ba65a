"""The architecture ablation at the full default budget: its variants as DVC experiments, and its table.

A variant is the default params.yaml plus its settings (experiments/ablation.yaml); it runs the
whole pipeline, trained as the default is and scored on every default test set. The baseline is
not queued: it is the default pipeline's own run (`dvc repro`): the newest finished MLflow run
with the default params, test scores and no DVC experiment, or the one named. Per test set the
table gives each run's BLEU, its 95% interval (from the run's hypotheses, as score computes it)
and the difference to the baseline with sacreBLEU's paired bootstrap p-value (the functions of
`python -m pipeline compare`); every number comes from the runs. The command:
pipeline/stages/ablation.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import params as P
from pipeline.errors import UserError
from pipeline.experiments import archive as run_archive
from pipeline.experiments import recipes, scoring
from pipeline.experiments import runs as logged
from pipeline.experiments.recipes import dvc_binary, settings, variant_params
from pipeline.experiments.runs import (
    default_params,
    differences,
    experiment_baselines,
    experiment_commit,
    newest,
    number,
    scored,
    where_ran,
)
from pipeline.machine import machine_info
from pipeline.reporting import hypotheses, runs
from pipeline.reporting.hypotheses import RunHypotheses
from pipeline.reporting.metrics import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    SIGNIFICANCE_LEVEL,
)
from pipeline.reporting.runs import RunRecord, param_text
from pipeline.reporting.tables import (
    common_prefix,
    escape_cell,
    fmt_delta,
    fmt_hms,
    fmt_p,
    fmt_score,
    fmt_whole,
    markdown_table,
)
from pipeline.tracking import store

BASELINE = "baseline"
BASELINE_CHANGE = "none: the default params.yaml (encoder-decoder 3+3, pre-LN, sinusoidal, three-way tied)"
# name -> what it changes and its settings (experiments/ablation.yaml); everything else is the default.
# experiments/ablation.yaml of the wrong shape: a UserError naming it, at import
VARIANTS = recipes.load_variants(Path(__file__).resolve().parents[2] / recipes.EXPERIMENTS / "ablation.yaml")
NOT_RUN = "not run yet (queued?)"
QUEUE_COMMAND = "python -m pipeline ablation queue"


def queue_commands(raw: dict[str, Any], names: tuple[str, ...] = ()) -> list[tuple[str, list[str]]]:
    """Each variant named (all where none) with its `dvc exp run --queue`; every one checked before any."""
    names = names or tuple(VARIANTS)
    for name in names:  # refuse a variant params.py would refuse before queueing any
        variant_params(raw, VARIANTS[name].changes)
    commands = []
    for name in names:
        args = [dvc_binary(), "exp", "run", "--queue", "-n", name]
        for setting in settings(VARIANTS[name].changes):
            args += ["-S", setting]
        commands.append((name, args))
    return commands


# --- the runs ----------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table: a variant, its run (None if there is none yet) and its scores per test set."""

    variant: str
    change: str
    record: RunRecord | None = None
    status: str = NOT_RUN  # "finished" for a row with a run
    tags: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)  # the run's train/summary.json
    hyps: RunHypotheses | None = None
    ci95: dict[str, tuple[float, float]] = field(default_factory=dict)  # by test set: BLEU's
    delta: dict[str, float] = field(default_factory=dict)
    p: dict[str, float | None] = field(default_factory=dict)

    def bleu(self, name: str) -> float:
        return self.record.metrics.get(runs.test_column(name), math.nan) if self.record else math.nan


@dataclass
class Ablation:
    rows: list[Row]  # the baseline first
    tests: list[str]
    notes: list[str]
    machine: dict[str, str]  # where the table was made (the runs' own hosts are in their tags)
    baseline_ref: str | None = None  # --baseline, if the baseline was named

    def to_json(self) -> dict[str, Any]:
        return {
            "tests": self.tests,
            "bootstrap": {"n": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED, "test": "paired bootstrap"},
            "baseline_ref": self.baseline_ref,
            "rows": [row_json(r, self.tests) for r in self.rows],
            "notes": self.notes,
            "machine": self.machine,
        }


def collect(
    params: P.Params, refs_dir: Path, baseline_ref: str | None = None, archive: Path | None = None
) -> Ablation:
    """The baseline's and each variant's run, with intervals and paired tests on params' test sets:
    the runs in MLflow and those kept in `archive` (MLflow's winning for a run both hold)."""
    uri = store.tracking_uri()
    records, kept, notes = run_archive.with_mlflow(params.tracking.experiment, uri, archive)
    base = Row(
        BASELINE, BASELINE_CHANGE, pick_baseline(records, default_params(params), baseline_ref), "finished"
    )
    rows = [base, *(variant_row(records, name) for name in VARIANTS)]
    notes += [note for row in rows[1:] for note in param_notes(row, base)]
    notes += experiment_commits(rows, experiment_baselines())
    for row in rows:
        if row.record is not None:
            notes += read_run(row, uri, params.data.test, kept)
    notes += score_sets(rows, refs_dir, list(params.data.test))
    import torch  # here, not at the top: `queue` needs no torch

    here = machine_info("torch threads", torch.get_num_threads())
    return Ablation(rows, list(params.data.test), notes, here, baseline_ref)


def keep_runs(ablation: Ablation, archive: Path) -> None:
    """Save each row's run, with its tags, summary and hypotheses, for a table made without its MLflow."""
    for row in ablation.rows:
        if row.record is not None:
            run_archive.keep(
                archive, row.variant, run_archive.ArchivedRun(row.record, row.tags, row.summary, row.hyps)
            )


def pick_baseline(records: list[RunRecord], defaults: dict[str, str], ref: str | None) -> RunRecord:
    """The run `ref` names (run id or DVC experiment), else the newest scored default run of no experiment."""
    if ref is not None and hypotheses.is_run_id(ref):
        found = [r for r in records if r.id == ref]
        what = f"run {ref}"
    elif ref is not None:
        found = [r for r in records if r.dvc_exp == ref and scored(r)]
        what = f"finished run of DVC experiment {ref!r} with test scores"
    else:
        plain = [r for r in records if r.dvc_exp is None and scored(r)]
        found = [r for r in plain if not differences(r.params, defaults)]
        what = "finished run of the default params.yaml with test scores (and no DVC experiment)"
        if plain and not found:
            near = newest(plain)
            diff = ", ".join(
                f"{k} {a} (default {b})" for k, (a, b) in differences(near.params, defaults).items()
            )
            what += f"; the newest such run of other params, {near.id}, has {diff}"
    if not found:
        raise UserError(
            f"no {what} in MLflow at {store.tracking_uri()} (nor kept in the archive): run the default "
            "pipeline (`dvc repro`) and wait for its score stage, or name the baseline with --baseline "
            "RUN_ID|EXPERIMENT"
        )
    return newest(found)


def variant_row(records: list[RunRecord], name: str) -> Row:
    """The variant's newest finished run with test scores; else a row that says why there is none."""
    change = VARIANTS[name].what
    mine = [r for r in records if r.dvc_exp == name]
    done = [r for r in mine if scored(r)]
    if done:
        return Row(name, change, newest(done), "finished")
    if not mine:
        return Row(name, change)
    last = newest(mine)
    state = "finished, not scored" if last.status == "finished" else last.status
    return Row(name, change, status=f"no scored run yet (latest {str(last.id)[:8]}: {state})")


def experiment_commits(rows: list[Row], baselines: dict[str, set[str]]) -> list[str]:
    """A DVC experiment's row takes its experiment's baseline as commit (where there is one baseline);
    a note where the run's own git_commit tag said otherwise."""
    notes = []
    for row in rows:
        if row.record is not None:
            row.record, note = experiment_commit(row.variant, row.record, baselines)
            notes += [note] if note else []
    return notes


def param_notes(row: Row, base: Row) -> list[str]:
    """Where a variant's run differs from the baseline's in more, or other, than its changes."""
    if row.record is None or base.record is None:
        return []
    changes = {k: param_text(v) for k, v in VARIANTS[row.variant].changes.items()}
    notes = [
        f"{row.variant} also differs from the baseline in {key} ({mine} vs {theirs})"
        for key, (mine, theirs) in differences(row.record.params, base.record.params).items()
        if key not in changes
    ]
    notes += [
        f"{row.variant} ran with {key}={row.record.params[key]}, not {value}"
        for key, value in changes.items()
        if key in row.record.params and row.record.params[key] != value
    ]
    return notes


def read_run(
    row: Row, uri: str, tests: tuple[str, ...], kept: dict[str, run_archive.ArchivedRun]
) -> list[str]:
    """Fill the row's tags, train summary and test-set hypotheses from the archive, else from MLflow;
    notes on what is missing."""
    assert row.record is not None and row.record.id is not None
    if (old := kept.get(str(row.record.id))) is not None:
        row.tags, row.summary, row.hyps = old.tags, old.summary, old.hyps
        return []
    found = logged.read_run(row.record.id, uri, row.variant, tests)
    row.tags, row.summary, row.hyps = found.tags, found.summary, found.hyps
    return [] if found.problem is None else [f"{row.variant}: {found.problem}"]


# --- the statistics ------------------------------------------------------------------


def score_sets(rows: list[Row], refs_dir: Path, tests: list[str]) -> list[str]:
    """Each run's BLEU interval per test set, and each variant's paired test against the baseline."""
    hyps = {row.variant: row.hyps for row in rows if row.hyps is not None}
    scored = scoring.score_sets(hyps, BASELINE, refs_dir, tests)
    for row in rows:
        row.ci95 = {
            test: (ci["bleu"][0], ci["bleu"][1]) for test, ci in scored.ci95.get(row.variant, {}).items()
        }
        row.delta = {test: d["bleu"] for test, d in scored.delta.get(row.variant, {}).items()}
        row.p = {test: p["bleu"] for test, p in scored.p.get(row.variant, {}).items()}
    return scored.notes


# --- the table -----------------------------------------------------------------------


def row_json(row: Row, tests: list[str]) -> dict[str, Any]:
    r = row.record
    out: dict[str, Any] = {"variant": row.variant, "change": row.change, "status": row.status}
    out["settings"] = settings(VARIANTS[row.variant].changes) if row.variant in VARIANTS else []
    if r is None:
        return out
    out |= {"run_id": r.id, "commit": r.commit, "started": str(r.started)}
    out |= {m: number(r.metrics.get(m)) for m in ("n_params", "train_seconds", "tokens_per_s")}
    out |= {k: row.summary.get(k) for k in ("epochs", "steps", "stopped", "best_step")}
    out["tests"] = {
        name: {
            "bleu": number(row.bleu(name)),
            "ci95": list(row.ci95[name]) if name in row.ci95 else None,
            "delta": row.delta.get(name),
            "p": row.p.get(name),
            "significant": _p(row, name) < SIGNIFICANCE_LEVEL,
        }
        for name in tests
    }
    return out


def render(ab: Ablation) -> str:
    prefix = common_prefix(ab.tests)
    short = {name: name[len(prefix) :] for name in ab.tests}
    base = ab.rows[0].record
    assert base is not None
    lines = [
        "# Ablation: architecture variants at the full default budget",
        "",
        *method(ab, base, prefix),
        "",
        summary_table(ab, short),
        "",
        f"BLEU per test set (Δ: the difference to the baseline, p: {TEST_TEXT}; * marks p < "
        f"{SIGNIFICANCE_LEVEL}). Train time includes validation; tokens/s are target tokens per second "
        "of updates.",
    ]
    for name in ab.tests:
        lines += ["", f"## {short[name] or name}", "", test_table(ab, name)]
    if ab.notes:
        lines += ["", "## Notes", "", *(f"- {escape_cell(n)}" for n in ab.notes)]
    return "\n".join(lines) + "\n"


TEST_TEXT = (
    f"sacreBLEU's paired bootstrap resampling, {BOOTSTRAP_RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}"
)


def method(ab: Ablation, base: RunRecord, prefix: str) -> list[str]:
    """The note above the table: what ran, how, where, and how the numbers were made."""
    epochs, seed = base.params.get("train.max_epochs", "?"), base.params.get("train.seed", "?")
    names = f" (named below without their common prefix `{prefix}`)" if prefix else ""
    which = (
        f"named with --baseline {ab.baseline_ref}"
        if ab.baseline_ref
        else "the default pipeline's own, `dvc repro`"
    )
    ran = {where_ran(r.tags) for r in ab.rows if r.record}
    here = ", ".join(f"{k} {v}" for k, v in ab.machine.items())
    return [
        "Every variant is the default params.yaml plus the change in its row, trained as the default is "
        f"({epochs} epochs at most, early stopping as configured, train.seed {seed}) and scored on every "
        f"default test set{names}. The variants were queued with `{QUEUE_COMMAND}` (one `dvc exp run --queue "
        "-n abl-<variant> -S ...` each: the whole pipeline) and run with `dvc queue start -j 1`; the "
        f"baseline is MLflow run `{base.id}` ({which}). Each row names the commit whose code made it.",
        "",
        "BLEU: the score stage's, from MLflow. Its 95% interval: sacreBLEU's bootstrap over the run's "
        f"hypotheses (MLflow artifacts) against data/raw's references ({BOOTSTRAP_RESAMPLES:,} resamples, "
        f"seed {BOOTSTRAP_SEED}), as the score stage computes it. Δ and p: `python -m pipeline compare`'s "
        "functions. Generated by `python -m pipeline ablation table` from the runs in MLflow and those "
        "kept in git beside this table (`reports/ablation/runs/`, one JSON per run with its hypotheses).",
        "",
        f"Runs made on: {'; '.join(sorted(ran))} (their MLflow tags). This table made on: {here}.",
    ]


def summary_table(ab: Ablation, short: dict[str, str]) -> str:
    header = ["variant", "change", "commit", "parameters", "epochs", "train time", "tokens/s"]
    header += [f"{short[n] or n} BLEU" for n in ab.tests]
    rows = []
    for row in ab.rows:
        r = row.record
        cells = [escape_cell(row.variant), escape_cell(row.change)]
        if r is None:
            rows.append([*cells, escape_cell(row.status), *["–"] * (len(header) - 3)])
            continue
        cells += [(r.commit or "?")[:7], fmt_whole(_int(r.metrics.get("n_params"))), epochs_text(row.summary)]
        cells += [fmt_hms(r.metrics.get("train_seconds")), fmt_whole(r.metrics.get("tokens_per_s"))]
        cells += [bleu_cell(row, n) for n in ab.tests]
        rows.append(cells)
    return markdown_table(header, rows, "lll" + "r" * (len(header) - 3), escape=False)


def test_table(ab: Ablation, name: str) -> str:
    header = ["variant", "BLEU", "95% CI", "Δ BLEU", "p"]
    rows = []
    for row in ab.rows:
        if row.record is None:
            continue
        ci = row.ci95.get(name)
        is_base = row.variant == BASELINE
        rows.append(
            [
                escape_cell(row.variant),
                fmt_score(row.bleu(name)),
                f"{ci[0]:.1f}–{ci[1]:.1f}" if ci else "–",
                "–" if is_base else fmt_delta(row.delta.get(name, math.nan)),
                "–" if is_base else fmt_p(_p(row, name)),
            ]
        )
    return markdown_table(header, rows, "lrrrr", escape=False)


def bleu_cell(row: Row, name: str) -> str:
    """BLEU, and for a variant (Δ, p) against the baseline as the experiments table writes them."""
    text = fmt_score(row.bleu(name))
    delta = row.delta.get(name)
    if row.variant == BASELINE or delta is None:
        return text
    return f"{text} ({fmt_delta(delta)}, p {fmt_p(_p(row, name))})"


def epochs_text(summary: dict[str, Any]) -> str:
    """Epochs trained and why training stopped (train/summary.json), – if the run has no summary."""
    if summary.get("epochs") is None:
        return "–"
    stopped = {"early_stopping": "early stop", None: "?"}.get(summary.get("stopped"), summary.get("stopped"))
    return f"{summary['epochs']} ({stopped})"


def _p(row: Row, name: str) -> float:
    value = row.p.get(name)
    return math.nan if value is None else value


def _int(value: float | None) -> int | None:
    return None if value is None or math.isnan(value) else int(value)
