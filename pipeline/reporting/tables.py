"""Markdown tables for the report and the experiments command, and the experiments table itself."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from pipeline.reporting import runs
from pipeline.reporting.metrics import SIGNIFICANCE_LEVEL

SCORE_DIGITS = 1  # BLEU, chrF, TER as papers and sacreBLEU print them

_MARKDOWN_SPECIAL = "\\`*|<>"  # not "_": GitHub ignores it inside words, where it is common


def escape_cell(value: Any) -> str:
    """Text safe inside a Markdown table cell: one line, Markdown characters escaped."""
    text = " ".join(str(value).split())
    return "".join("\\" + c if c in _MARKDOWN_SPECIAL else c for c in text)


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "", escape: bool = True
) -> str:
    """A GitHub Markdown table; `align` has one letter per column (l or r), default left.

    With escape False the rows' cells go in as they are (the caller escaped what needs it).
    """
    align = align.ljust(len(header), "l")
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [_row(header), _row(rule, escape=False)]
    lines += [_row(r, escape) for r in rows]
    return "\n".join(lines)


def _row(cells: Sequence[Any], escape: bool = True) -> str:
    return "| " + " | ".join(escape_cell(c) if escape else str(c) for c in cells) + " |"


def fmt(value: Any, digits: int = 2) -> str:
    """Numbers for tables: floats with `digits` decimals, ints with thousands separators."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def fmt_score(value: Any) -> str:
    return fmt(value, SCORE_DIGITS)


def fmt_whole(value: Any) -> str:
    """A count or rate with thousands separators and no decimals."""
    return fmt(value, 0)


def fmt_hms(seconds: Any) -> str:
    """Seconds as h:mm:ss."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or math.isnan(seconds):
        return fmt(seconds)
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


# Columns of the experiments table after the test sets' BLEU: (DataFrame column, header, format).
# Val chrF and TER stay in the DataFrame and the command's CSV: the page has enough columns.
EXPERIMENT_METRICS = (
    ("dev_bleu", "val BLEU", fmt_score),
    ("n_params", "parameters", fmt_whole),
    ("train_seconds", "train time", fmt_hms),
    ("tokens_per_s", "tokens/s", fmt_whole),
)
PREFIX_ENDS = "-_"  # a shared prefix of test-set names is cut after one of these


def experiments_markdown(frame: pd.DataFrame, current: str | None = None, limit: int | None = None) -> str:
    """An experiments table() as Markdown: rank, run, what differs, BLEU per test set, val BLEU, size, speed.

    `current` is marked. With one test set its chrF and TER show too; with
    several only BLEU (the CSV has the rest). Rows of runs.group_seeds show
    mean ± standard deviation and a count; with against_baseline's columns,
    each test set's BLEU is followed by (Δ, p).
    """
    if frame.empty:
        return "No runs yet."
    mark = _marked_row(frame, current)
    shown = list(range(len(frame) if limit is None else min(limit, len(frame))))
    if mark is not None and mark not in shown:
        shown.append(mark)  # this run always shows, even below the limit
    columns = _metric_columns(frame)
    header, align = _experiment_columns(frame, columns)
    rows = [_experiment_row(frame, i, i == mark, header, columns) for i in shown]
    return markdown_table(header, rows, align) + _notes(frame, header, mark, current, len(shown))


def _notes(frame: pd.DataFrame, header: list[str], mark: int | None, current: str | None, shown: int) -> str:
    names = runs.test_sets(frame)
    notes = []
    if mark is not None:
        notes.append(f"→ this report's run, {mark + 1} of {len(frame)} by BLEU on its first test set.")
    elif current:
        notes.append("This report's run is not among them (MLflow was unreachable while it trained?).")
    prefix = common_prefix(names)
    if prefix:
        notes.append(f"Test sets named without their common prefix `{prefix}`.")
    if len(names) > 1:
        notes.append(
            "chrF and TER per test set: `python -m pipeline experiments --out runs.csv`, or `compare`."
        )
    if "n" in header:
        notes.append(
            "Runs that differ only in train.seed share a row: mean ± standard deviation over n runs."
        )
    if any(c.startswith("delta.") for c in frame.columns):
        notes.append(
            "In parentheses: BLEU difference to the baseline on that test set and the p-value of a paired "
            f"test; * marks p < {SIGNIFICANCE_LEVEL}."
        )
    if shown < len(frame):
        hidden = len(frame) - shown
        notes.append(f"{hidden} more runs not shown; `python -m pipeline experiments` lists all.")
    return "\n\n" + " ".join(notes) if notes else ""


def common_prefix(names: Sequence[str]) -> str:
    """The prefix two or more test-set names share, up to and with its last - or _; "" if none."""
    if len(names) < 2:
        return ""
    shared = min(names)  # the shortest-sorting name's prefix shared by all, character by character
    while not all(n.startswith(shared) for n in names):
        shared = shared[:-1]
    cut = max(shared.rfind(c) for c in PREFIX_ENDS) + 1
    return shared[:cut]


def _marked_row(frame: pd.DataFrame, current: str | None) -> int | None:
    """The row of run id `current`: its own, or its seed group's."""
    if current is None:
        return None
    members = frame["members"] if "members" in frame else frame["id"].map(lambda i: (i,))
    found = [i for i, (run_id, group) in enumerate(zip(frame["id"], members)) if current in (run_id, *group)]
    return found[0] if found else None


def _metric_columns(frame: pd.DataFrame) -> list[tuple[str, str, Any]]:
    """(column, header, format) of the scores shown: BLEU per test set (chrF, TER with one), then the rest."""
    names = runs.test_sets(frame)
    prefix = common_prefix(names)
    columns = [(runs.test_column(n), f"{n[len(prefix) :]} BLEU", fmt_score) for n in names]
    if len(names) == 1:
        columns += [
            (runs.test_column(names[0], s), h, fmt_score) for s, h in (("chrf", "chrF"), ("ter", "TER"))
        ]
    return [*columns, *EXPERIMENT_METRICS]


def _experiment_columns(frame: pd.DataFrame, columns: list[tuple[str, str, Any]]) -> tuple[list[str], str]:
    """Header and alignment; a status column only if some run did not finish, n only if seeds are grouped."""
    params = runs.param_columns(frame)
    status = ["status"] if (frame["status"] != "finished").any() else []
    n = ["n"] if "n_runs" in frame and (frame["n_runs"] > 1).any() else []
    metrics = [h for _, h, _ in columns]
    header = ["#", "run", *n, "commit", *status, *params, *metrics]
    align = "rl" + "r" * len(n) + "l" + "l" * len(status)
    align += "".join("r" if _numeric(frame[p]) else "l" for p in params)
    return header, align + "r" * len(metrics)


def _experiment_row(
    frame: pd.DataFrame, i: int, marked: bool, header: list[str], columns: list[tuple[str, str, Any]]
) -> list[str]:
    row = frame.iloc[i]
    return [
        f"→ {i + 1}" if marked else str(i + 1),
        run_label(row),
        *([fmt(int(row["n_runs"]))] if "n" in header else []),
        str(row["commit"])[:7] if isinstance(row["commit"], str) else "–",
        *([row["status"]] if "status" in header else []),
        *(fmt(row[p]) for p in runs.param_columns(frame)),
        *(_metric_cell(row, column, fmt) for column, _, fmt in columns),
    ]


def _metric_cell(row: pd.Series, column: str, format_value: Any) -> str:
    """The value, ± its standard deviation over seeds for a grouped row's score, (Δ, p) against a baseline."""
    text = str(format_value(row.get(column)))
    sd = row.get(f"{column}_sd")
    if format_value is fmt_score and isinstance(sd, float) and not math.isnan(sd):
        text += f" ± {fmt_score(sd)}"
    if not (column.startswith("test.") and column.endswith(".bleu")):
        return text
    name = column.split(".")[1]
    delta, p = row.get(runs.delta_column(name)), row.get(runs.p_column(name))
    if isinstance(delta, float) and not math.isnan(delta):
        text += f" ({fmt_delta(delta)}" + (
            f", p {fmt_p(p)})" if isinstance(p, float) and not math.isnan(p) else ")"
        )
    return text


def fmt_delta(value: Any) -> str:
    """A signed difference in score points."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return fmt(value)
    return f"{value:+.{SCORE_DIGITS}f}"


def fmt_p(value: Any) -> str:
    """A p-value, starred below the significance level."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return fmt(value)
    return f"{value:.4f}" + (" *" if value < SIGNIFICANCE_LEVEL else "")


def run_label(row: pd.Series) -> str:
    """What a user calls a run: its DVC experiment name (`dvc exp apply NAME`), else its MLflow run name."""
    return str(row["dvc_exp"]) if isinstance(row["dvc_exp"], str) else str(row["run"])


def _numeric(column: pd.Series) -> bool:
    """True if every present value of a params column reads as a number (so it aligns right)."""
    values = [v for v in column if isinstance(v, str)]
    return bool(values) and all(_is_number(v) for v in values)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
