"""What describes a run: its tags (commit, command, DVC experiment, corpus, system), its params as
MLflow stores them, and the download manifest's corpora as dataset inputs."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline import params as P
from pipeline.tracking.store import short, warn

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
DIGEST_CHARS = 16  # MLflow stores a dataset digest in 36 characters; the full sums go in the profile
SPLIT_CONTEXT = {"train": "training", "val": "validation", "test": "testing"}  # mlflow.data.context


def git_commit(cwd: Path | None = None) -> str | None:
    """HEAD's commit hash in `cwd` (default: the working directory), or None outside a git checkout.

    Not DVC_ROOT's: a --queue/--temp experiment runs in DVC's copy of the repository at the
    experiment's baseline, while the workspace's HEAD may have moved on since it was queued.
    """
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd or Path.cwd(),
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def system_info(device: str | None = None) -> dict[str, str]:
    """Where a run ran: device, torch version and threads, host, python."""
    import torch  # imported here: score and report reopen runs without needing torch

    if device is None:
        device = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu"
    return {
        "sys.device": device,
        "sys.torch": torch.__version__,
        "sys.torch_threads": str(torch.get_num_threads()),
        "sys.hostname": socket.gethostname(),
        "sys.python": platform.python_version(),
    }


def source_name(argv: list[str] | None = None) -> str:
    """The command that ran, as the run page's Source: `dvc exp run`, `dvc repro`, or the command line."""
    if os.environ.get("DVC_EXP_NAME"):
        return "dvc exp run"
    if os.environ.get("DVC_ROOT"):
        return "dvc repro"
    argv = sys.argv if argv is None else argv
    if argv and Path(argv[0]).parts[-2:] == ("pipeline", "__main__.py"):
        return shlex.join(["python", "-m", "pipeline", *argv[1:]])
    return shlex.join([Path(argv[0]).name, *argv[1:]]) if argv else "python"


def run_tags(params: dict[str, Any], tags: dict[str, Any] | None = None) -> dict[str, str]:
    """Git commit, source, DVC experiment name, corpus and pair, system info, then the caller's tags."""
    out = dict(system_info())
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
        out["mlflow.source.git.commit"] = commit  # shown by the MLflow UI
    out["mlflow.source.name"] = source_name()
    out["mlflow.source.type"] = "LOCAL"
    out["mlflow.user"] = best_effort(getpass.getuser, "")
    if os.environ.get("DVC_EXP_NAME"):
        out["dvc_exp"] = os.environ["DVC_EXP_NAME"]
    data = params.get("data", {})
    if isinstance(data.get("train"), (list, tuple)) and data["train"]:
        out["corpus"] = ",".join(str(name) for name in data["train"])
    if "src_lang" in data and "tgt_lang" in data:
        out["pair"] = f"{data['src_lang']}-{data['tgt_lang']}"
    out.update({k: str(v) for k, v in (tags or {}).items()})
    return out


def param_strings(params: dict[str, Any]) -> dict[str, str]:
    """Params, nested ({'train': {'lr': ..}}) or flat, as MLflow keeps them: keys joined with '.'."""
    return {k: str(v)[:MAX_PARAM_CHARS] for k, v in P.flatten(params).items()}


def read_manifest(path: str | Path) -> dict[str, Any] | None:
    """The download stage's manifest.json, or None (with a warning) when it cannot be read."""
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        warn(f"MLflow: cannot read {path} ({short(e)}); the run gets no dataset inputs")
        return None
    return manifest if isinstance(manifest, dict) else None


def manifest_datasets(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Each corpus source of the manifest's train, val and test splits as an MLflow dataset input.

    Named after the source; digest: the first DIGEST_CHARS hex digits of the sha256 of its
    files' `role:sha256` lines (the full sums are in the profile); source: its URLs or paths.
    """
    columns = [{"type": "string", "name": str(manifest.get(k, k))} for k in ("src_lang", "tgt_lang")]
    datasets = []
    for split, context in SPLIT_CONTEXT.items():
        for entry in (manifest.get("splits") or {}).get(split) or []:
            files = entry.get("files") or []
            sums = "\n".join(f"{f.get('role')}:{f.get('sha256')}" for f in files)
            urls = [f"{f.get('source')}" + (f"#{f['member']}" if f.get("member") else "") for f in files]
            remote = bool(urls) and all(u.startswith(("http://", "https://")) for u in urls)
            profile = {"split": split, "lines": entry.get("lines")}
            profile["sha256"] = {str(f.get("role")): f.get("sha256") for f in files}
            datasets.append(
                {
                    "name": str(entry.get("name")),
                    "digest": hashlib.sha256(sums.encode()).hexdigest()[:DIGEST_CHARS],
                    "source_type": "http" if remote else "local",
                    "source": json.dumps({"urls": urls}),
                    "schema": json.dumps({"mlflow_colspec": columns}),
                    "profile": json.dumps(profile),
                    "context": context,
                }
            )
    return datasets


def best_effort(make: Callable[[], Any], default: Any) -> Any:
    """make(), or `default` if it fails in any way: what describes a run must never stop one."""
    try:
        return make()
    except Exception:  # noqa: BLE001 - best-effort system info: any failure gives the default
        return default
