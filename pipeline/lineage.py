"""A parent model (train.init_from): a model directory read as a parent, what a child must share
with it, and parent.json, the record of it that data/bpe and the child's model directory keep.

The bpe stage copies the parent's sentencepiece model(s) and writes parent.json beside them; the
train stage loads the parent's weights before step 0 and copies parent.json into the model
directory. Each parent.json holds the parent's own, so a model's lineage reads back to a model
trained from scratch or imported. No torch here: the bpe stage runs this without it.
Why and how: docs/transfer.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline import params as P
from pipeline.errors import ParamsError, UserError

PARENT_FILE = "parent.json"
MODEL_FILE = "model.pt"  # checkpoint.MODEL_FILE, without importing torch into the bpe stage
RUN_FILE = "mlflow_run.json"  # the train stage's record of its MLflow run (pipeline/tracking/run_file.py)
IMPORT_FILE = "import.json"  # import-hf's record of where a model came from (pipeline/interop/hf_import.py)
PARAMS_FILE = "params.yaml"

# The model settings that are its architecture, which a child keeps: they shape the weights or the
# function they compute. The depths are compared as each stack's resolved depth. Not among them:
# dropout, attention_dropout and activation_dropout, which shape nothing and which fine-tuning
# often changes.
ARCHITECTURE = (
    "arch",
    "d_model",
    "n_heads",
    "d_ff",
    "norm",
    "positions",
    "max_positions",
    "tie_embeddings",
    "output_bias",
    "scale_embeddings",
    "activation",
)
DEPTHS = ("n_layers", "encoder_layers", "decoder_layers")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Parent:
    """parent.json: the parent as train.init_from names it, the sha256 of its weights, and what it
    records of itself (its MLflow run, where import-hf took it from, its own parent.json)."""

    path: str
    model_sha256: str
    mlflow_run_id: str | None = None
    tracking_uri: str | None = None
    imported_from: str | None = None
    parent: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def load(cls, path: Path) -> Parent:
        """A parent.json this module wrote; a one-line error for anything else."""
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return cls(**raw)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError) as e:
            raise UserError(
                f"{path}: not a record of a parent model ({type(e).__name__}); rerun the bpe stage"
            ) from e

    def tags(self) -> dict[str, str]:
        """The MLflow tags that name the parent (its run id only where its model directory has one)."""
        tags = {"parent": self.path, "parent_model_sha256": self.model_sha256}
        if self.mlflow_run_id:
            tags["parent_run_id"] = self.mlflow_run_id
        if self.imported_from:
            tags["parent_imported_from"] = self.imported_from
        return tags


def model_dir(init_from: str, key: str = "train.init_from") -> Path:
    """init_from as a directory with a model and its params, or the one-line refusal of what it is
    not, naming the setting that gave it (`key`)."""
    where = Path(init_from)
    fix = "give a model directory that the train stage or import-hf wrote"
    if key == "train.init_from":
        fix += ", or null to train from scratch"
    if not where.is_dir():
        raise ParamsError(f"{key}: {init_from}: no such directory; {fix}")
    missing = [name for name in (MODEL_FILE, PARAMS_FILE) if not (where / name).is_file()]
    if missing:
        raise ParamsError(f"{key}: {init_from} is not a model directory (it has no {missing[0]}); {fix}")
    return where


def seeded_teacher(root: Path, seed: int) -> Path:
    """Where the teachers stage writes the teacher of one seed of distill.teacher_seeds."""
    return root / f"seed{seed}"


def read(init_from: str, key: str = "train.init_from") -> tuple[Parent, P.Params]:
    """A model directory's record and params (its params.yaml), as a parent or a teacher; refuses
    what is no model directory in one line naming the setting that gave it (`key`)."""
    where = model_dir(init_from, key)
    params = _saved_params(where / PARAMS_FILE, key)
    run = _optional_json(where / RUN_FILE)
    imported = _optional_json(where / IMPORT_FILE).get("source")
    own = where / PARENT_FILE
    parent = Parent(
        path=init_from,
        model_sha256=sha256(where / MODEL_FILE),
        mlflow_run_id=run.get("run_id"),
        tracking_uri=run.get("tracking_uri"),
        imported_from=imported if isinstance(imported, str) else None,
        parent=Parent.load(own).to_dict() if own.is_file() else None,
    )
    return parent, params


def check_vocabulary(child: P.Params, parent: P.Params, init_from: str) -> None:
    """bpe.joint says whether the two sides share ids, and a child reads with its parent's vocabulary.

    The other bpe settings say how to train a vocabulary, and a child trains none: they are ignored.
    """
    found = [("bpe.joint", child.bpe.joint, parent.bpe.joint)] if child.bpe.joint != parent.bpe.joint else []
    if found:
        raise _refusal(init_from, "vocabulary", found)


def check_architecture(child: P.Params, parent: P.Params, init_from: str) -> None:
    """The child's model.* architecture (ARCHITECTURE, and each stack's depth) must be the parent's."""
    c, p = child.model, parent.model
    found = [
        (f"model.{k}", getattr(c, k), getattr(p, k)) for k in ARCHITECTURE if getattr(c, k) != getattr(p, k)
    ]
    if _depths(c) != _depths(p):
        found += [
            (f"model.{k}", getattr(c, k), getattr(p, k)) for k in DEPTHS if getattr(c, k) != getattr(p, k)
        ]
    if found:
        raise _refusal(init_from, "architecture", found)


def _depths(m: P.ModelParams) -> tuple[int | None, int]:
    return (m.n_encoder_layers if m.arch == "encoder_decoder" else None), m.n_decoder_layers


def _refusal(init_from: str, what: str, found: list[tuple[str, Any, Any]]) -> ParamsError:
    """One line: each differing key with both values, and the `-S` options that take the parent's."""
    sides = "; ".join(
        f"{key} {_yaml(mine)} here, {_yaml(theirs)} in the parent" for key, mine, theirs in found
    )
    fix = " ".join(f"-S {key}={_yaml(theirs)}" for key, _, theirs in found)
    return ParamsError(
        f"train.init_from: {init_from} has another {what} ({sides}); a child keeps its parent's "
        f"{what}: set those keys to the parent's, e.g. `dvc exp run {fix}` (docs/transfer.md)"
    )


def _yaml(value: Any) -> str:
    """A value as params.yaml (and `dvc exp run -S`) spells it."""
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _saved_params(path: Path, key: str = "train.init_from") -> P.Params:
    """A model directory's params.yaml, read as saved (P.from_saved); refused in one line naming `key`."""
    try:
        return P.from_saved(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (UnicodeDecodeError, yaml.YAMLError, ParamsError) as e:
        reason = e.message if isinstance(e, ParamsError) else type(e).__name__
        raise ParamsError(
            f"{key}: {path}: not the params of a model of this pipeline ({reason}); give a "
            "model directory that the train stage or import-hf wrote"
        ) from e


def _optional_json(path: Path) -> dict[str, Any]:
    """A small record a model directory may hold; {} when it is absent or unreadable (it only informs)."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return found if isinstance(found, dict) else {}


TEACHERS_FILE = "teachers.json"  # the distill stage's record of the models a corpus was translated by


def teacher_tags(corpus_dir: Path | None) -> dict[str, str]:
    """The MLflow tags that name the teachers of a distilled corpus (its teachers.json), the first
    one's run as the student run's parent; none for a corpus of real translations."""
    record = _optional_json(corpus_dir / TEACHERS_FILE) if corpus_dir is not None else {}
    teachers = [t for t in record.get("teachers", []) if isinstance(t, dict)]
    if not teachers:
        return {}
    tags = {
        "teachers": ",".join(str(t.get("path")) for t in teachers),
        "teacher_model_sha256": ",".join(str(t.get("model_sha256")) for t in teachers),
    }
    runs = [str(t["mlflow_run_id"]) for t in teachers if t.get("mlflow_run_id")]
    if runs:
        tags["teacher_run_ids"] = ",".join(runs)
        tags["mlflow.parentRunId"] = runs[0]  # the student's run shows under its (first) teacher's
    return tags
