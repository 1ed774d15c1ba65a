"""Experiments' runs read back for their tables (the pairs' and the ablation's): from the MLflow runs
the pipeline logged (`scored`, `newest`, `read_run`), with the commit each ran from
(`experiment_baselines`, `experiment_commit`) and where it ran (`where_ran`). Queueing them, from
the settings of experiments/, is recipes.py's.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline import files
from pipeline import params as P
from pipeline.errors import UserError
from pipeline.reporting import hypotheses
from pipeline.reporting.hypotheses import RunHypotheses, key_of
from pipeline.reporting.runs import RunRecord, param_text
from pipeline.reporting.significance import unusable


def default_params(params: P.Params) -> dict[str, str]:
    """params as a run logs them to MLflow (str of each flat value), spelled as a RunRecord reads them."""
    return {k: param_text(str(v)) for k, v in P.flatten(params.to_dict()).items()}


def differences(a: dict[str, str], b: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The keys both have with different values: {key: (a's, b's)}; a key only one has is a newer setting."""
    return {k: (a[k], b[k]) for k in sorted(a.keys() & b.keys()) if a[k] != b[k]}


def scored(record: RunRecord) -> bool:
    """Finished, with BLEU on some test set (the score stage ran)."""
    return record.status == "finished" and any(
        k.startswith("test.") and k.endswith(".bleu") for k in record.metrics
    )


def newest(records: list[RunRecord]) -> RunRecord:
    return max(records, key=lambda r: r.started or pd.Timestamp.min)


@dataclass(frozen=True)
class ExperimentRef:
    """A finished DVC experiment: refs/exps/<baseline[:2]>/<baseline[2:]>/<name> -> its commit."""

    name: str
    baseline: str
    commit: str


def experiment_refs() -> list[ExperimentRef]:
    """The finished DVC experiments of this repository (the working directory's), newest first; none
    outside a git checkout."""
    listed = subprocess.run(
        ["git", "for-each-ref", "--sort=-committerdate", "--format=%(objectname) %(refname)", "refs/exps"],
        capture_output=True,
        text=True,
    )
    out = []
    for line in listed.stdout.splitlines() if listed.returncode == 0 else []:
        commit, _, ref = line.partition(" ")
        parts = ref.split("/")
        if len(parts) == 5 and len(parts[2]) == 2 and len(parts[3]) == 38:
            out.append(ExperimentRef(parts[4], parts[2] + parts[3], commit))
    return out


def experiment_names() -> set[str]:
    """The names of this repository's DVC experiments that are queued, running or finished."""
    from dvc.exceptions import NotDvcRepoError  # type: ignore[import-untyped]  # no stubs
    from dvc.repo import Repo  # type: ignore[import-untyped]

    names = {ref.name for ref in experiment_refs()}
    try:
        with Repo(".") as repo:
            queue = repo.experiments.celery_queue
            return names | {e.name for e in (*queue.iter_queued(), *queue.iter_active()) if e.name}
    except NotDvcRepoError:
        return names


def experiment_file(name: str, path: str) -> str | None:
    """File `path` as the newest finished DVC experiment `name` committed it (an output DVC does not cache,
    e.g. reports/reverse/summary.json); None where there is no such experiment or file."""
    ref = next((r for r in experiment_refs() if r.name == name), None)
    if ref is None:
        return None
    shown = subprocess.run(["git", "show", f"{ref.commit}:{path}"], capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def experiment_baselines() -> dict[str, set[str]]:
    """Each finished DVC experiment's name and its baseline commit(s)."""
    out: dict[str, set[str]] = {}
    for ref in experiment_refs():
        out.setdefault(ref.name, set()).add(ref.baseline)
    return out


def experiment_commit(
    label: str, record: RunRecord, baselines: dict[str, set[str]]
) -> tuple[RunRecord, str | None]:
    """A DVC experiment's run with its experiment's baseline as commit (where there is one baseline),
    and a note where the run's own git_commit tag said otherwise."""
    if record.dvc_exp is None or len(baselines.get(record.dvc_exp, ())) != 1:
        return record, None
    (baseline,) = baselines[record.dvc_exp]
    if record.commit == baseline:
        return record, None
    note = (
        f"{label}: commit {baseline[:7]} is its DVC experiment's baseline (refs/exps); "
        f"its MLflow run's git_commit tag, {(record.commit or '?')[:7]}, is the workspace's HEAD "
        "when the run started (the tag of runs made before tracking read the stage's own checkout)"
    )
    return replace(record, commit=baseline), note


@dataclass
class RunData:
    """What `read_run` found of one MLflow run: its tags, train/summary.json, hypotheses of the sets asked."""

    tags: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    hyps: RunHypotheses | None = None
    problem: str | None = None  # why there are no hypotheses


def read_run(run_id: str, uri: str, label: str, tests: tuple[str, ...] | list[str]) -> RunData:
    """The run's tags, train summary and the hypotheses of test sets `tests` (named `label`) from MLflow."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    out = RunData(tags=dict(client.get_run(run_id).data.tags))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            out.summary = json.loads(
                Path(client.download_artifacts(run_id, "train/summary.json", tmp)).read_text()
            )
        except Exception:  # noqa: BLE001 - an older run without it, or a store that lost it: show –
            out.summary = {}
    try:
        found = hypotheses.from_mlflow(run_id, uri)
    except UserError as e:
        out.problem = e.message
        return out
    keys = [key_of(name) for name in tests]
    out.hyps = RunHypotheses(label, {k: found.hyps[k] for k in keys if k in found.hyps}, found.refs_sha256)
    return out


def set_problem(run: RunHypotheses, key: str, refs_path: Path) -> str | None:
    """Why `run` cannot be scored on set `key` (no hypotheses, no references, other references), or None."""
    if key not in run.hyps:
        return "has no hypotheses for it"
    if not refs_path.is_file():
        return f"cannot be scored: no references at {refs_path} (run the download stage)"
    return unusable(run, key, files.read_lines(refs_path), refs_path)


def where_ran(tags: dict[str, str]) -> str:
    """Host, device, torch and its threads, from the sys.* tags the train stage sets."""
    host, device, torch, threads = (
        tags.get(f"sys.{k}", "?") for k in ("hostname", "device", "torch", "torch_threads")
    )
    return f"{host}, {device}, torch {torch}, torch threads {threads}"


def number(value: float | None) -> float | None:
    """None for a missing or NaN metric (JSON has no NaN)."""
    return None if value is None or math.isnan(value) else value
