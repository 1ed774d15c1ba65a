"""A run's hypotheses, wherever they are kept: MLflow artifacts of its training run, or DVC outputs.

`find(ref)` resolves what a user calls a run:

- an MLflow run id (32 hex digits): the `decode/<split>.hyp` artifacts and
  `refs_sha256.<split>` tags the score stage logs to the training run;
- `workspace`: data/decode and reports/metrics.json as they are now;
- anything else, a DVC experiment name or a git revision: data/decode at
  that revision, read from the local DVC cache (`dvc exp run` caches every
  output), and the refs_sha256 of that revision's reports/metrics.json.

Errors a user can meet (an unknown run, no hypotheses kept) are UserErrors
that say what to do.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import files, tracking
from pipeline.errors import UserError

SPLITS = ("val", "test")
HYPS_ARTIFACT_DIR = "decode"  # the run's artifacts hold decode/<split>.hyp
REFS_TAG = "refs_sha256.{split}"
DECODE_DIR = "data/decode"  # as dvc.yaml names the decode stage's output
METRICS_FILE = "reports/metrics.json"
WORKSPACE = "workspace"

_RUN_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class RunHypotheses:
    """One run's decoded splits (lines), and the sha256 of the references each was scored on, if known."""

    name: str
    hyps: dict[str, list[str]]
    refs_sha256: dict[str, str] = field(default_factory=dict)


def is_run_id(ref: str) -> bool:
    return _RUN_ID.fullmatch(ref) is not None


def find(ref: str, repo: Path, uri: str | None = None) -> RunHypotheses:
    """The hypotheses of `ref`: an MLflow run id, `workspace`, a DVC experiment name or a git revision."""
    if is_run_id(ref):
        return from_mlflow(ref, uri or tracking.tracking_uri())
    return from_dvc(ref, repo)


# --- MLflow ------------------------------------------------------------------------


def from_mlflow(run_id: str, uri: str) -> RunHypotheses:
    """The hypothesis artifacts and references tags of an MLflow run."""
    db = tracking.sqlite_path(uri)
    if db is not None and not db.is_file():
        raise UserError(f"no MLflow database at {db}; set MLFLOW_TRACKING_URI to the store holding {run_id}")
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        with tracking._quick_http():
            run = tracking._with_lock_retries(lambda: client.get_run(run_id))
            names = [a.path for a in client.list_artifacts(run_id, HYPS_ARTIFACT_DIR)]
            hyps = _download(client, run_id, names)
    except Exception as e:  # noqa: BLE001 - whatever MLflow raises (unknown id, store down), the user's fix is one
        raise UserError(
            f"MLflow run {run_id} could not be read at {uri} ({tracking._reason(e)}); "
            "check the id (`python -m pipeline experiments` lists them) and MLFLOW_TRACKING_URI"
        ) from None
    if not hyps:
        raise UserError(
            f"MLflow run {run_id} has no hypotheses ({HYPS_ARTIFACT_DIR}/<split>.hyp artifacts); runs scored "
            "before they were kept have none: name its DVC experiment or git revision instead"
        )
    tags = run.data.tags
    refs = {s: tags[REFS_TAG.format(split=s)] for s in hyps if REFS_TAG.format(split=s) in tags}
    return RunHypotheses(run_id, hyps, refs)


def _download(client: Any, run_id: str, paths: list[str]) -> dict[str, list[str]]:
    wanted = {f"{HYPS_ARTIFACT_DIR}/{split}.hyp": split for split in SPLITS}
    hyps = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            if path in wanted:
                local = client.download_artifacts(run_id, path, tmp)
                hyps[wanted[path]] = files.read_lines(local)
    return {split: hyps[split] for split in SPLITS if split in hyps}


# --- DVC ---------------------------------------------------------------------------


def from_dvc(rev: str, repo: Path) -> RunHypotheses:
    """data/decode/<split>.hyp and the references' sha256 at a DVC experiment or git revision."""
    from dvc.api import DVCFileSystem  # type: ignore[import-untyped]  # no stubs; pyproject lists none for dvc

    try:
        fs = DVCFileSystem(str(repo), rev=None if rev == WORKSPACE else rev)
        fs.ls("/", detail=False)  # opens the revision: an unknown one fails here (exists() would say False)
    except Exception as e:  # noqa: BLE001 - DVC and scmrepo raise many kinds for an unknown revision
        raise UserError(
            f"{rev!r} is not an MLflow run id, a DVC experiment or a git revision of {repo} ({_short(e)}); "
            "`dvc exp show` and `python -m pipeline experiments` list them"
        ) from None
    hyps, problems = {}, []
    for split in SPLITS:
        path = f"{DECODE_DIR}/{split}.hyp"
        try:
            if fs.exists(path):
                hyps[split] = _lines(fs.read_bytes(path))
        except Exception as e:  # noqa: BLE001 - listed in dvc.lock but not in the cache, and the like
            problems.append(f"{path}: {_short(e)}")
    if not hyps:
        why = f" ({'; '.join(problems)})" if problems else ""
        raise UserError(
            f"no hypotheses at {rev!r}{why}: {DECODE_DIR}/<split>.hyp is not in this revision or not in the "
            "local DVC cache; `dvc exp run` it, or `dvc pull` its outputs"
        )
    refs = {s: sha for s in hyps if (sha := _refs_sha256(fs, s)) is not None}
    return RunHypotheses(rev, hyps, refs)


def _refs_sha256(fs: Any, split: str) -> str | None:
    """The references' sha256 the score stage recorded in this revision's metrics, if it did."""
    try:
        metrics = json.loads(fs.read_bytes(METRICS_FILE))
        sha = metrics[split]["refs_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return sha if isinstance(sha, str) else None


def _lines(data: bytes) -> list[str]:
    """Lines as files.read_lines splits them: on LF only."""
    text = data.decode("utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else (text.split("\n") if text else [])


def _short(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
