"""Experiment runs as one table: every run of the pipeline side by side, from MLflow or from `dvc exp show`.

Both sources give one table shape: a row per run with `ID_COLUMNS`, the params
that differ between the rows (flat keys such as `model.n_layers`), then the
metrics: `test.<name>.bleu|chrf|ter` per test set found, `dev_*` for val,
size and speed, and `primary_bleu` (BLEU on the run's first data.test set, the
sort key: best first). An old run's single test set counts as `test`.

- MLflow (`mlflow_table`): every run of the params' `tracking.experiment`;
  safe inside a DVC stage, so the report stage uses this one.
- DVC (`dvc_table`, over `dvc exp show --json`): the workspace, the baseline
  commit and its experiments, queued ones included. `dvc exp show` waits for
  the lock `dvc repro` and `dvc exp run` hold while a stage runs, so only the
  `experiments` command, run by a user, calls it; a stage must never.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from pipeline import params as P
from pipeline.data import indexes
from pipeline.errors import UserError
from pipeline.params.coerce import param_text
from pipeline.tracking import store

ID_COLUMNS = ("run", "dvc_exp", "commit", "status", "started", "id")

SCORE_NAMES = ("bleu", "chrf", "ter")
# Names as train.py (train_seconds, tokens_per_s; n_params as a tag, a metric in older runs) and
# score.py (dev_* for the val set) log them to MLflow; each test set's scores are
# test.<name>.<score>, in MLflow and in `dvc exp show` alike.
FIXED_METRICS = ("dev_bleu", "dev_chrf", "dev_ter", "n_params", "train_seconds", "tokens_per_s")
PRIMARY = "primary_bleu"  # BLEU on the run's first test set: the sort key
_TEST_METRIC = re.compile(r"test\.([A-Za-z0-9][A-Za-z0-9_-]*)\.(bleu|chrf|ter)")
LEGACY_TEST = "test"  # the name of an old run's one test set (metrics test_bleu, test.bleu)
TEST_PARAM = "data.test"

SEED_PARAM = "train.seed"
SETTINGS = "settings"  # table()'s hidden column: settings_key of the run's params
GROUP_COLUMNS = ("n_runs", "members")  # group_seeds adds these, after a <metric>_sd per metric

DVC_STATES = {None: "finished", "success": "finished"}  # executor state -> status; others kept as is

DVC_TIMEOUT_S = 300


def test_column(name: str, score: str = "bleu") -> str:
    return f"test.{name}.{score}"


def delta_column(name: str) -> str:
    """BLEU difference to a baseline on test set `name` (significance.against_baseline)."""
    return f"delta.{name}"


def p_column(name: str) -> str:
    return f"p.{name}"


def metric_name(key: str) -> str | None:
    """The table's name of a metric as MLflow or flattened `dvc exp show` gives it, None if not shown.

    val.bleu (DVC) is dev_bleu (MLflow); an old run's test_bleu (MLflow) or test.bleu (DVC) is
    test.test.bleu; test.<name>.bleu and the FIXED_METRICS are themselves.
    """
    if key in FIXED_METRICS or _TEST_METRIC.fullmatch(key):
        return key
    split, _, score = (
        key.replace("_", ".", 1).partition(".") if key.startswith("test_") else key.partition(".")
    )
    if score in SCORE_NAMES and split == "val":
        return f"dev_{score}"
    if score in SCORE_NAMES and split == "test":
        return test_column(LEGACY_TEST, score)
    return None


def is_metric(column: str) -> bool:
    return column in FIXED_METRICS or column == PRIMARY or _TEST_METRIC.fullmatch(column) is not None


def metric_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if is_metric(c)]


def test_sets(frame: pd.DataFrame) -> list[str]:
    """The test sets with a BLEU column, in column order, then any with only a baseline difference."""
    scored = [m.group(1) for c in frame.columns if (m := _TEST_METRIC.fullmatch(c)) and m.group(2) == "bleu"]
    compared = [c[len("delta.") :] for c in frame.columns if c.startswith("delta.")]
    return list(dict.fromkeys([*scored, *compared]))


def listed_tests(params: dict[str, str]) -> list[str]:
    """A run's data.test param as a list of the names its sets are scored under ([] if absent or not a
    list): an index's name as its files are named (sacrebleu:wmt20 -> sacrebleu-wmt20)."""
    text = params.get(TEST_PARAM)
    try:  # param_text's [a, b], or str() of a Python list
        value = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError:
        return []
    return [indexes.safe_name(str(v)) for v in value] if isinstance(value, (list, tuple)) else []


class ExperimentsUnavailable(Exception):
    """The runs cannot be read (no database yet, server down); the message says why."""


@dataclass(frozen=True)
class RunRecord:
    """One run as either source describes it; params as params.yaml spells them."""

    run: str
    id: str | None = None  # MLflow run id, or the git rev of a DVC experiment
    dvc_exp: str | None = None
    commit: str | None = None  # the git commit whose code ran
    status: str = "finished"
    started: pd.Timestamp | None = None
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def table(records: Iterable[RunRecord]) -> pd.DataFrame:
    """Runs as rows: ID_COLUMNS, the params that differ between runs, the metrics; best BLEU first."""
    records = list(records)
    varied = differing_params([r.params for r in records])
    names = test_set_names(records)
    metrics = [*(test_column(n, s) for n in names for s in SCORE_NAMES), *FIXED_METRICS, PRIMARY]
    rows = [
        {
            **{c: getattr(r, c) for c in ID_COLUMNS},
            SETTINGS: settings_key(r.params),
            **{k: r.params.get(k) for k in varied},
            **{m: r.metrics.get(m, math.nan) for m in metrics[:-1]},
            PRIMARY: primary_bleu(r, names),
        }
        for r in records
    ]
    frame = pd.DataFrame(rows, columns=[*ID_COLUMNS, SETTINGS, *varied, *metrics])
    frame[metrics] = frame[metrics].astype(float)
    return best_first(frame)


def test_set_names(records: list[RunRecord]) -> list[str]:
    """The test sets any run was scored on: in the order the newest runs' data.test lists them, then the
    rest by name."""
    scored = {m.group(1) for r in records for k in r.metrics if (m := _TEST_METRIC.fullmatch(k))}
    newest = sorted(records, key=lambda r: r.started or pd.Timestamp.min, reverse=True)
    listed = [n for r in newest for n in listed_tests(r.params) if n in scored]
    return list(dict.fromkeys([*listed, *sorted(scored)]))


def primary_bleu(record: RunRecord, names: list[str]) -> float:
    """BLEU on the first test set of the run's data.test that it was scored on, else on the first of
    `names` it was scored on; NaN if none."""
    for name in [*listed_tests(record.params), *names]:
        if test_column(name) in record.metrics:
            return record.metrics[test_column(name)]
    return math.nan


def best_first(frame: pd.DataFrame) -> pd.DataFrame:
    """Best primary_bleu first, then val BLEU; newest first among equals and among unscored runs (last)."""
    frame = frame.sort_values("started", ascending=False, na_position="last", kind="stable")
    frame = frame.sort_values([PRIMARY, "dev_bleu"], ascending=False, na_position="last", kind="stable")
    return frame.reset_index(drop=True)


def settings_key(params: dict[str, str]) -> str:
    """Every param but train.seed, as one string: runs with equal keys differ only in their seed."""
    return json.dumps({k: v for k, v in sorted(params.items()) if k != SEED_PARAM})


def is_derived(column: str) -> bool:
    """A column table(), group_seeds or against_baseline adds: settings, <metric>_sd, n_runs, members,
    delta.<name>, p.<name>."""
    sd = column.endswith("_sd") and is_metric(column[: -len("_sd")])
    return sd or column in (SETTINGS, *GROUP_COLUMNS) or column.startswith(("delta.", "p."))


def param_columns(frame: pd.DataFrame) -> list[str]:
    """The columns of a table() that hold params (the ones that differ between runs)."""
    return [c for c in frame.columns if c not in ID_COLUMNS and not is_metric(c) and not is_derived(c)]


def group_seeds(frame: pd.DataFrame) -> pd.DataFrame:
    """A table() with finished runs that differ only in train.seed (same commit and other params) as one row.

    The row holds the group's metric means, their sample standard deviations
    (`<metric>_sd`, NaN for one run), `n_runs`, the run ids (`members`, best
    first), the seeds in train.seed, and the run names joined in `run`.
    Unfinished runs stay rows of their own.
    """
    keys = ["commit", SETTINGS]  # all params, not only the columns shown (a key only some runs have)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, (status, *key) in enumerate(frame[["status", *keys]].itertuples(index=False)):
        groups.setdefault(tuple(key) if status == "finished" else ("unfinished", i), []).append(i)
    metrics = metric_columns(frame)
    rows = [_group_row(frame.iloc[members], metrics) for members in groups.values()]
    sds = [f"{m}_sd" for m in metrics if m != PRIMARY]
    return best_first(pd.DataFrame(rows, columns=[*frame.columns, *sds, *GROUP_COLUMNS]))


def _group_row(runs: pd.DataFrame, metrics: list[str]) -> dict[str, Any]:
    row = runs.iloc[0].to_dict()
    row.update({f"{m}_sd": runs[m].std() if len(runs) > 1 else math.nan for m in metrics if m != PRIMARY})
    row.update({"n_runs": len(runs), "members": tuple(runs["id"])})
    if len(runs) == 1:
        return row
    row.update({m: runs[m].mean() for m in metrics})
    labels = [e if isinstance(e, str) else r for e, r in zip(runs["dvc_exp"], runs["run"])]
    row.update({"run": ", ".join(labels), "dvc_exp": None})
    if SEED_PARAM in runs:
        row[SEED_PARAM] = ", ".join(sorted(map(str, runs[SEED_PARAM]), key=_seed_order))
    for column in runs.columns:
        # A mean difference over seeds; one p-value per seed does not add up to one, so none is shown.
        if column.startswith("delta."):
            row[column] = runs[column].mean()
        elif column.startswith("p."):
            row[column] = math.nan
    return row


def _seed_order(seed: str) -> tuple[int, float, str]:
    try:
        return (0, float(seed), seed)
    except ValueError:
        return (1, 0.0, seed)


def differing_params(params: list[dict[str, str]]) -> list[str]:
    """Flat keys that every run has and whose value is not the same in all; sorted.

    A key only some runs have is a setting added or removed between versions of
    params.yaml, not an experiment's change: showing it would give runs of an older
    version a column for each such key.
    """
    shared = set.intersection(*(set(p) for p in params)) if params else set()
    return [k for k in sorted(shared) if len({p[k] for p in params}) > 1]


def mlflow_table(experiment: str, uri: str | None = None) -> pd.DataFrame:
    """Every active run of `experiment` in MLflow; raises ExperimentsUnavailable if it cannot be read."""
    return table(mlflow_records(experiment, uri))


def mlflow_records(experiment: str, uri: str | None = None) -> list[RunRecord]:
    uri = uri or store.tracking_uri()
    db = store.sqlite_path(uri)
    if db is not None and not db.is_file():
        # Opening it would create an empty database: say there are no runs instead.
        raise ExperimentsUnavailable(f"no MLflow database at {db} yet (no run has been tracked)")
    try:
        with store.quick_http():
            return [_mlflow_record(run) for run in _search_all(experiment, uri)]
    except Exception as e:
        raise ExperimentsUnavailable(f"MLflow at {uri} could not be read ({store.reason(e)})") from e


def _search_all(experiment: str, uri: str) -> Iterator[Any]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = store.with_lock_retries(lambda: client.get_experiment_by_name(experiment))
    if found is None:
        return
    token = None
    while True:
        page = store.with_lock_retries(
            lambda token=token: client.search_runs([found.experiment_id], max_results=1000, page_token=token)
        )
        yield from page
        token = page.token
        if not token:
            return


def mlflow_histories(run_ids: Sequence[str], key: str, uri: str | None = None) -> dict[str, pd.DataFrame]:
    """Each run's logged `key` by step (columns step, value); runs that never logged it are left out."""
    uri = uri or store.tracking_uri()
    try:
        from mlflow import MlflowClient

        with store.quick_http():
            client = MlflowClient(tracking_uri=uri)
            out = {}
            for run_id in run_ids:
                history = store.with_lock_retries(lambda r=run_id: client.get_metric_history(r, key))
                if history:
                    points = sorted((m.step, m.timestamp, m.value) for m in history)
                    frame = pd.DataFrame(points, columns=["step", "time", "value"])
                    # A resumed run can log a step again: its latest value wins.
                    out[run_id] = frame.drop_duplicates("step", keep="last")[["step", "value"]]
            return out
    except Exception as e:
        raise ExperimentsUnavailable(f"MLflow at {uri} could not be read ({store.reason(e)})") from e


TAG_METRICS = ("n_params",)  # constants train.py logs as tags


def _mlflow_record(run: Any) -> RunRecord:
    info, data = run.info, run.data
    tagged = {k: data.tags[k] for k in TAG_METRICS if k in data.tags}
    return RunRecord(
        run=info.run_name or info.run_id,
        id=info.run_id,
        dvc_exp=data.tags.get("dvc_exp"),
        commit=data.tags.get("git_commit"),
        status=str(info.status).lower(),
        started=pd.Timestamp(info.start_time, unit="ms") if info.start_time else None,
        params={k: param_text(v) for k, v in data.params.items()},
        metrics={
            name: float(v) for k, v in (tagged | data.metrics).items() if (name := metric_name(k)) is not None
        },
    )


def dvc_table(shown: list[dict[str, Any]]) -> pd.DataFrame:
    """The table from `dvc exp show --json`'s parsed output (DVC 3: baselines with their experiments)."""
    return table(dvc_records(shown))


def dvc_records(shown: list[dict[str, Any]]) -> list[RunRecord]:
    records = []
    for baseline in shown:
        rev = baseline.get("rev")
        is_workspace = rev == "workspace"
        name = "workspace" if is_workspace else baseline.get("name") or str(rev)[:7]
        commit = None if is_workspace else rev
        records.append(_dvc_record(baseline, name, None, commit, _dvc_status(baseline, None)))
        for exp in baseline.get("experiments") or []:
            executor = exp.get("executor") or {}
            for exp_rev in exp.get("revs") or []:
                exp_name = exp.get("name") or exp_rev.get("name") or str(exp_rev.get("rev"))[:7]
                status = _dvc_status(exp_rev, executor.get("state"))
                records.append(_dvc_record(exp_rev, exp_name, exp_name, commit, status))
    return records


def _dvc_record(
    entry: dict[str, Any], name: str, exp: str | None, commit: str | None, status: str
) -> RunRecord:
    data = entry.get("data") or {}
    params: dict[str, str] = {}
    for source in (data.get("params") or {}).values():  # one entry per params file
        params.update({k: param_text(v) for k, v in P.flatten((source or {}).get("data") or {}).items()})
    metrics: dict[str, float] = {}
    for source in (data.get("metrics") or {}).values():  # one entry per metrics file
        for key, value in P.flatten((source or {}).get("data") or {}).items():
            column = metric_name(key)
            if column is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[column] = float(value)
    stamp = data.get("timestamp")
    return RunRecord(
        run=name,
        id=None if entry.get("rev") == "workspace" else entry.get("rev"),
        dvc_exp=exp,
        commit=commit,
        status=status,
        started=pd.Timestamp(stamp) if stamp else None,
        params=params,
        metrics=metrics,
    )


def _dvc_status(entry: dict[str, Any], state: str | None) -> str:
    if entry.get("error"):
        return "error"
    return DVC_STATES.get(state, str(state))


def dvc_exp_show(repo: Path, all_commits: bool = False) -> list[dict[str, Any]]:
    """Run `dvc exp show --json` in `repo` and parse it; not inside a stage (see the module docstring)."""
    args = [_dvc_binary(), "exp", "show", "--json", *(["--all-commits"] if all_commits else [])]
    try:
        done = subprocess.run(args, cwd=repo, capture_output=True, text=True, timeout=DVC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(
            f"`dvc exp show` took over {DVC_TIMEOUT_S} s; wait for the DVC command holding the lock to end"
        ) from None
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[-500:] or f"exit status {done.returncode}"
        raise UserError(
            f"`dvc exp show --json` failed in {repo}: {detail}. Run this in the project's repository "
            "(git + DVC), and not while `dvc repro` or `dvc exp run` holds its lock"
        )
    try:
        return json.loads(done.stdout or "[]")
    except ValueError as e:
        raise UserError(f"`dvc exp show --json` printed something that is not JSON ({e})") from e


def _dvc_binary() -> str:
    """The dvc beside this Python (the project's venv), else the one on PATH."""
    beside = Path(sys.executable).parent / "dvc"
    return str(beside) if beside.is_file() else shutil.which("dvc") or "dvc"
