"""Finished runs kept in git, so that a table (the pairs', the ablation's, the noise report's)
outlives the MLflow store its runs were logged to.

The MLflow store (a local SQLite file, not in git) and the DVC cache belong to one checkout; a sweep
spans sessions and machines. Each table therefore saves each finished run
it tabulates as one JSON file, `<archive>/<experiment>.json`: the run as MLflow described it
(params, metrics, commit, start time), its tags, its train summary, and, for a full-budget run, its
hypotheses on the pair's test sets with the sha256 of the references they were scored on. That is
everything the table needs to recompute intervals and paired tests later; the next table reads
MLflow and the archive together, MLflow's newer run winning for an experiment both hold.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline import files
from pipeline.errors import UserError
from pipeline.reporting import runs
from pipeline.reporting.hypotheses import RunHypotheses
from pipeline.reporting.runs import RunRecord

FORMAT = 1


@dataclass
class ArchivedRun:
    record: RunRecord
    tags: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    hyps: RunHypotheses | None = None


def path_of(archive: Path, name: str) -> Path:
    return archive / f"{name}.json"


def save(archive: Path, name: str, run: ArchivedRun) -> Path:
    """Write (or replace) experiment `name`'s archived run; the file is written whole or not at all."""
    record = run.record
    body: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "record": {
            "run": record.run,
            "id": record.id,
            "dvc_exp": record.dvc_exp,
            "commit": record.commit,
            "status": record.status,
            "started": None if record.started is None else record.started.isoformat(),
            "params": record.params,
            "metrics": record.metrics,
        },
        "tags": run.tags,
        "summary": run.summary,
        "hyps": None if run.hyps is None else run.hyps.hyps,
        "refs_sha256": None if run.hyps is None else run.hyps.refs_sha256,
    }
    out = path_of(archive, name)
    files.write_json(out, body)
    return out


def load(path: Path) -> ArchivedRun:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if body.get("format") != FORMAT:
            raise ValueError(f"format {body.get('format')!r}, expected {FORMAT}")
        r = body["record"]
        started = None if r["started"] is None else pd.Timestamp(r["started"])
        record = RunRecord(
            run=r["run"],
            id=r["id"],
            dvc_exp=r["dvc_exp"],
            commit=r["commit"],
            status=r["status"],
            started=started,
            params={str(k): str(v) for k, v in r["params"].items()},
            metrics={str(k): float(v) for k, v in r["metrics"].items()},
        )
        hyps = None
        if body["hyps"] is not None:
            hyps = RunHypotheses(body["name"], body["hyps"], body["refs_sha256"] or {})
        return ArchivedRun(record, dict(body["tags"]), dict(body["summary"]), hyps)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(
            f"{path}: not an archived run ({e}); restore it from git (`git checkout -- {path}`) or delete it"
        ) from None


def load_all(archive: Path) -> dict[str, ArchivedRun]:
    """Every archived run by experiment name (none if the folder does not exist)."""
    if not archive.is_dir():
        return {}
    return {p.stem: load(p) for p in sorted(archive.glob("*.json"))}


def repo_relative(value: Any, root: Path | None = None) -> Any:
    """`value` (a string, or dicts and lists of them) with the absolute paths of this checkout (the cwd),
    and of a queued run's copy of it under .dvc/tmp/exps, made relative to it: the files `table` writes
    are committed, and name no machine's folders."""
    base = re.escape(str((root or Path.cwd()).resolve()))
    exps = re.escape("/".join((".dvc", "tmp", "exps")))  # DVC's copies of the repo for queued runs
    inside = re.compile(base + r"/(?:" + exps + r"/(?:standalone/)?[^/\s\"'\],]+/)?")

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return inside.sub("", v)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(value)


def keep(archive: Path, name: str, run: ArchivedRun) -> Path:
    """Save `run` as experiment `name`'s, with the paths of this checkout in it made relative."""
    record = replace(run.record, params=repo_relative(run.record.params))
    return save(
        archive, name, ArchivedRun(record, repo_relative(run.tags), repo_relative(run.summary), run.hyps)
    )


def with_mlflow(
    experiment: str, uri: str, archive: Path | None
) -> tuple[list[RunRecord], dict[str, ArchivedRun], list[str]]:
    """The runs of MLflow experiment `experiment` with those kept in `archive` that MLflow lacks; the
    kept runs by run id; a note where MLflow is unavailable (refused where nothing is kept either)."""
    kept = {str(a.record.id): a for a in load_all(archive).values()} if archive is not None else {}
    notes = []
    try:
        records = runs.mlflow_records(experiment, uri)
    except runs.ExperimentsUnavailable as e:
        if not kept:
            raise UserError(str(e)) from None
        records = []
        notes.append(f"MLflow unavailable ({e}): the runs are those archived in {archive}")
    logged = {str(r.id) for r in records}
    return records + [a.record for run_id, a in kept.items() if run_id not in logged], kept, notes
