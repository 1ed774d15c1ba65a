"""Checkpoints and model directories: saved atomically, loaded with weights_only=True.

A checkpoint is a dict of tensors and plain Python values only, so
`torch.load(..., weights_only=True)` reads it and anything carrying pickled
code is refused. The model directory (the train stage's output) holds
`model.pt`, its resolved params and the sentencepiece model(s): it alone can
translate.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from pipeline import params as P
from pipeline.errors import UserError
from pipeline.files import atomic_path
from pipeline.model.transformer import Seq2SeqBase, build_model

FORMAT = "nmt-pipeline/1"
MODEL_FILE = "model.pt"


def save(path: str | Path, obj: dict[str, Any]) -> None:
    """Write atomically: a crash or a full disk mid-save leaves the previous file whole."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with weights_only=True; a user-facing error for any bad file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint; train a model first (dvc repro train)")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip; anything else is damaged or foreign
        raise UserError(
            f"{path}: truncated or corrupt checkpoint (not a torch zip archive); retrain or restore it"
        )
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise UserError(
            f"{path}: refused, it holds more than tensors and plain values ({_refusal_reason(e)}); "
            "only load checkpoints you trust, and re-save them as plain state dicts"
        ) from e
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise UserError(
            f"{path}: truncated or corrupt checkpoint ({type(e).__name__}); retrain or restore it"
        ) from e
    if not isinstance(obj, dict):
        raise UserError(f"{path}: not a checkpoint of this pipeline (a {type(obj).__name__}, not a dict)")
    return obj


def _refusal_reason(e: pickle.UnpicklingError) -> str:
    """The line of torch's weights_only message that names what was refused, without terminal codes."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    found = re.search(r"WeightsUnpickler error: ([^\n]+)", text)
    reason = found.group(1) if found else (text.strip().splitlines() or [type(e).__name__])[0]
    return reason.split(" was not an allowed global")[0].strip()[:160]


def model_payload(model: Seq2SeqBase, params: P.Params, src_vocab: int, tgt_vocab: int, step: int) -> dict:
    """What model.pt holds: weights, and everything needed to rebuild the model."""
    return {
        "format": FORMAT,
        "params": params.to_dict(),
        "src_vocab": src_vocab,
        "tgt_vocab": tgt_vocab,
        "step": step,
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }


def restore_model(obj: dict[str, Any], source: str | Path) -> tuple[Seq2SeqBase, P.Params]:
    """Rebuild the model a payload describes and load its weights; clear errors on mismatch."""
    if obj.get("format") != FORMAT:
        raise UserError(
            f"{source}: not a model of this pipeline (format {obj.get('format')!r}, expected {FORMAT!r})"
        )
    params = P.from_saved(obj["params"])
    model = build_model(params.model, obj["src_vocab"], obj["tgt_vocab"])
    load_weights(model, obj["model"], source)
    return model, params


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str | Path) -> None:
    """load_state_dict, with a one-line message naming the first mismatch instead of a shape dump."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise UserError(
            f"{source}: weights are for a different architecture (missing {missing[:2]}, "
            f"unexpected {unexpected[:2]}); check model.* params against the checkpoint"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise UserError(
                f"{source}: {name} has shape {tuple(tensor.shape)}, the model expects "
                f"{tuple(expected[name].shape)}: a different vocabulary or model size"
            )
    model.load_state_dict(state)
