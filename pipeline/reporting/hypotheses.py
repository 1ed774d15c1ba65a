"""A run's hypotheses, wherever they are kept: MLflow artifacts of its training run, or DVC outputs.

Decoded sets are keyed as data/decode lays them out: `val`, and `test/<name>`
per test set; the key names the hypotheses (<key>.hyp), the references in
data/raw (<key>.tgt) and the artifact (decode/<key>.hyp). `find(ref)` resolves:

- an MLflow run id (32 hex digits): the `decode/<key>.hyp` artifacts and the
  `refs_sha256.val` / `refs_sha256.test.<name>` tags the score stage logs;
- `workspace`: data/decode and reports/metrics.json as they are now;
- anything else, a DVC experiment name or a git revision: data/decode at that
  revision from the local DVC cache, and the refs_sha256 of its metrics.json.

A run from before several test sets (one `test.hyp`) counts as having one test
set named `test`. Errors a user can meet are UserErrors that say what to do.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import files
from pipeline.errors import UserError
from pipeline.tracking import store

VAL = "val"
TEST_DIR = "test"  # data/decode/test/<name>.hyp, data/raw/test/<name>.tgt
LEGACY_TEST = "test"  # the one test set of a run from before several: test.hyp, test.tgt
HYPS_ARTIFACT_DIR = "decode"  # the run's artifacts hold decode/<key>.hyp
REFS_TAG_PREFIX = "refs_sha256."
DECODE_DIR = "data/decode"  # as dvc.yaml names the decode stage's output
METRICS_FILE = "reports/metrics.json"
WORKSPACE = "workspace"

_RUN_ID = re.compile(r"[0-9a-f]{32}")


def key_of(name: str) -> str:
    """The key of test set `name`: test/<name>."""
    return f"{TEST_DIR}/{name}"


def testset_of(key: str) -> str | None:
    """The test set's name of a key, None for val."""
    return key.split("/", 1)[1] if key.startswith(f"{TEST_DIR}/") else None


def label(key: str) -> str:
    """A set as a reader names it: val, or the test set's name."""
    return testset_of(key) or key


def ordered(keys: Iterable[str]) -> list[str]:
    """val first, then the test sets by name."""
    return sorted(set(keys), key=lambda k: (k != VAL, k))


def refs_tag(key: str) -> str:
    """The MLflow tag holding the sha256 of a set's references: refs_sha256.val, refs_sha256.test.<name>."""
    return REFS_TAG_PREFIX + key.replace("/", ".")


def set_keys(directory: Path, suffix: str) -> list[str]:
    """The sets with a <key><suffix> file in `directory` (val.hyp, test/<name>.hyp, ...), val first."""
    keys = [VAL] if (directory / f"{VAL}{suffix}").is_file() else []
    test_dir = directory / TEST_DIR
    if test_dir.is_dir():
        keys += sorted(key_of(p.name[: -len(suffix)]) for p in test_dir.glob(f"*{suffix}") if p.is_file())
    return keys


def metrics_of(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """reports/metrics.json by set key: {"val": {...}, "test/<name>": {...}}; an old one's single test
    split ({"test": {"bleu": ...}}) as test/test."""
    out = {VAL: metrics[VAL]} if isinstance(metrics.get(VAL), dict) else {}
    tests = metrics.get(TEST_DIR)
    if isinstance(tests, dict) and isinstance(tests.get("bleu"), (int, float)):
        tests = {LEGACY_TEST: tests}
    for name, scores in (tests or {}).items() if isinstance(tests, dict) else ():
        if isinstance(scores, dict):
            out[key_of(name)] = scores
    return out


@dataclass(frozen=True)
class RunHypotheses:
    """One run's sets' lines by key, and the sha256 of the references each was scored on if known."""

    name: str
    hyps: dict[str, list[str]]
    refs_sha256: dict[str, str] = field(default_factory=dict)


def is_run_id(ref: str) -> bool:
    return _RUN_ID.fullmatch(ref) is not None


def find(ref: str, repo: Path, uri: str | None = None) -> RunHypotheses:
    """The hypotheses of `ref`: an MLflow run id, `workspace`, a DVC experiment name or a git revision."""
    if is_run_id(ref):
        return from_mlflow(ref, uri or store.tracking_uri())
    return from_dvc(ref, repo)


# --- MLflow ------------------------------------------------------------------------


def from_mlflow(run_id: str, uri: str) -> RunHypotheses:
    """The hypothesis artifacts and references tags of an MLflow run."""
    db = store.sqlite_path(uri)
    if db is not None and not db.is_file():
        raise UserError(f"no MLflow database at {db}; set MLFLOW_TRACKING_URI to the store holding {run_id}")
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        with store.quick_http():
            run = store.with_lock_retries(lambda: client.get_run(run_id))
            hyps = _download(client, run_id)
    except Exception as e:  # noqa: BLE001 - whatever MLflow raises (unknown id, store down), the user's fix is one
        raise UserError(
            f"MLflow run {run_id} could not be read at {uri} ({store.reason(e)}); "
            "check the id (`python -m pipeline experiments` lists them) and MLFLOW_TRACKING_URI"
        ) from None
    if not hyps:
        raise UserError(
            f"MLflow run {run_id} has no hypotheses ({HYPS_ARTIFACT_DIR}/<set>.hyp artifacts); runs scored "
            "before they were kept have none: name its DVC experiment or git revision instead"
        )
    tags = run.data.tags
    legacy = tags.get(REFS_TAG_PREFIX + LEGACY_TEST)  # refs_sha256.test of a run with one test set
    refs = {k: tags.get(refs_tag(k)) or (legacy if k == key_of(LEGACY_TEST) else None) for k in hyps}
    return RunHypotheses(run_id, hyps, {k: sha for k, sha in refs.items() if sha})


def _download(client: Any, run_id: str) -> dict[str, list[str]]:
    """decode/val.hyp and decode/test/<name>.hyp (an old run's decode/test.hyp as test/test), by key."""
    top = HYPS_ARTIFACT_DIR
    paths = [a.path for a in client.list_artifacts(run_id, top)]
    if f"{top}/{TEST_DIR}" in paths:
        paths += [a.path for a in client.list_artifacts(run_id, f"{top}/{TEST_DIR}")]
    wanted = {f"{top}/{VAL}.hyp": VAL, f"{top}/{LEGACY_TEST}.hyp": key_of(LEGACY_TEST)}
    wanted |= {p: p[len(top) + 1 : -len(".hyp")] for p in paths if p.startswith(f"{top}/{TEST_DIR}/")}
    hyps = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            if path in wanted and path.endswith(".hyp"):
                local = client.download_artifacts(run_id, path, tmp)
                hyps[wanted[path]] = files.read_lines(local)
    return {key: hyps[key] for key in ordered(hyps)}


# --- DVC ---------------------------------------------------------------------------


def from_dvc(rev: str, repo: Path) -> RunHypotheses:
    """data/decode/<key>.hyp and the references' sha256 at a DVC experiment or git revision."""
    from dvc.api import DVCFileSystem  # type: ignore[import-untyped]  # no stubs; pyproject lists none for dvc

    try:
        fs = DVCFileSystem(str(repo), rev=None if rev == WORKSPACE else rev)
        fs.ls("/", detail=False)  # opens the revision: an unknown one fails here (exists() would say False)
    except Exception as e:  # noqa: BLE001 - DVC and scmrepo raise many kinds for an unknown revision
        raise UserError(
            f"{rev!r} is not an MLflow run id, a DVC experiment or a git revision of {repo} ({_short(e)}); "
            "`dvc exp show` and `python -m pipeline experiments` list them"
        ) from None
    hyps: dict[str, list[str]] = {}
    problems: list[str] = []
    for key, path in _dvc_hyp_paths(fs, problems).items():
        try:
            if fs.exists(path):
                hyps[key] = _lines(fs.read_bytes(path))
        except Exception as e:  # noqa: BLE001 - listed in dvc.lock but not in the cache, and the like
            problems.append(f"{path}: {_short(e)}")
    if not hyps:
        why = f" ({'; '.join(problems)})" if problems else ""
        raise UserError(
            f"no hypotheses at {rev!r}{why}: {DECODE_DIR}/val.hyp and {DECODE_DIR}/{TEST_DIR}/<name>.hyp are "
            "not in this revision or not in the local DVC cache; `dvc exp run` it, or `dvc pull` its outputs"
        )
    shas = _refs_sha256(fs)
    return RunHypotheses(rev, hyps, {k: shas[k] for k in hyps if k in shas})


def _dvc_hyp_paths(fs: Any, problems: list[str]) -> dict[str, str]:
    """Where each set's hypotheses would be at this revision, by key (an old test.hyp as test/test)."""
    paths = {VAL: f"{DECODE_DIR}/{VAL}.hyp", key_of(LEGACY_TEST): f"{DECODE_DIR}/{LEGACY_TEST}.hyp"}
    test_dir = f"{DECODE_DIR}/{TEST_DIR}"
    try:
        names = fs.ls(test_dir, detail=False) if fs.isdir(test_dir) else []
    except Exception as e:  # noqa: BLE001 - the folder's listing not in the cache
        problems.append(f"{test_dir}: {_short(e)}")
        names = []
    for path in names:
        name = str(path).rstrip("/").rsplit("/", 1)[-1]
        if name.endswith(".hyp"):
            paths[key_of(name[: -len(".hyp")])] = f"{test_dir}/{name}"
    return {key: paths[key] for key in ordered(paths)}


def _refs_sha256(fs: Any) -> dict[str, str]:
    """The references' sha256 per set key that the score stage recorded in this revision's metrics."""
    try:
        metrics = json.loads(fs.read_bytes(METRICS_FILE))
    except (OSError, ValueError):
        return {}
    if not isinstance(metrics, dict):
        return {}
    shas = {key: scores.get("refs_sha256") for key, scores in metrics_of(metrics).items()}
    return {key: sha for key, sha in shas.items() if isinstance(sha, str)}


def _lines(data: bytes) -> list[str]:
    """Lines as files.read_lines splits them: on LF only."""
    text = data.decode("utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else (text.split("\n") if text else [])


def _short(error: Exception) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
