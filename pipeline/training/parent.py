"""Starting a training from a parent model (train.init_from): its weights, before step 0.

The architecture and the vocabulary must be the parent's (pipeline.lineage), and data/bpe must
hold the vocabulary the bpe stage copied from this very parent: its parent.json names the path and
the sha256 of the weights. Only the weights are taken. The optimizer, the LR schedule and the
step count start afresh, and a resumed run's own last.pt overwrites what was loaded here, so
resume stays exact (docs/transfer.md, docs/exact-resume.md).
"""

from __future__ import annotations

from pathlib import Path

from pipeline import lineage
from pipeline import params as P
from pipeline.data.vocab import Vocab
from pipeline.errors import ParamsError, UserError
from pipeline.model import checkpoint
from pipeline.model.transformer import Seq2SeqBase

RERUN_BPE = "rerun the bpe stage, which copies it (`dvc repro --force --single-item bpe`, then `dvc repro`)"


def recorded_parent(bpe_dir: Path) -> lineage.Parent | None:
    """The parent whose vocabulary the bpe stage copied into bpe_dir; None for a vocabulary it trained."""
    path = bpe_dir / lineage.PARENT_FILE
    return lineage.Parent.load(path) if path.is_file() else None


def start_from_parent(
    model: Seq2SeqBase, params: P.Params, bpe_dir: Path, vocab: Vocab
) -> lineage.Parent | None:
    """Load train.init_from's weights into `model` (None: train from scratch) after checking that
    data/bpe holds its vocabulary; -> the parent's record, for the model directory and MLflow."""
    init_from, recorded = params.train.init_from, recorded_parent(bpe_dir)
    if init_from is None:
        if recorded is not None:
            raise UserError(
                f"{bpe_dir} holds the vocabulary of the parent {recorded.path}, but train.init_from is "
                "null; rerun the bpe stage, which trains one"
            )
        return None
    parent, _ = lineage.read(init_from)
    payload = checkpoint.load(Path(init_from) / lineage.MODEL_FILE)
    if payload.get("format") != checkpoint.FORMAT:
        raise ParamsError(
            f"train.init_from: {init_from}/{lineage.MODEL_FILE} is not a model of this pipeline"
        )
    saved = P.from_saved(payload["params"])
    lineage.check_vocabulary(params, saved, init_from)
    lineage.check_architecture(params, saved, init_from)
    check_copied(parent, recorded, bpe_dir)
    check_same_vocabulary(vocab, Path(init_from), bpe_dir)
    sizes, ours = (payload["src_vocab"], payload["tgt_vocab"]), (vocab.src_size, vocab.tgt_size)
    if sizes != ours:
        raise ParamsError(
            f"train.init_from: {init_from}'s model has {sizes[0]} source / {sizes[1]} target ids, "
            f"{bpe_dir}'s vocabulary {ours[0]} / {ours[1]}; {RERUN_BPE}"
        )
    checkpoint.load_weights(model, payload["model"], init_from)
    return parent


def check_copied(parent: lineage.Parent, recorded: lineage.Parent | None, bpe_dir: Path) -> None:
    """data/bpe's parent.json names this parent, as it is now (its weights' sha256)."""
    if recorded is None:
        raise UserError(
            f"train.init_from is {parent.path}, but {bpe_dir} holds a vocabulary the bpe stage trained, "
            f"not the parent's; {RERUN_BPE}"
        )
    if recorded.path != parent.path:
        raise UserError(
            f"train.init_from is {parent.path}, but {bpe_dir} holds the vocabulary of {recorded.path}; "
            f"{RERUN_BPE}"
        )
    if recorded.model_sha256 != parent.model_sha256:
        raise UserError(
            f"train.init_from: {parent.path}/{lineage.MODEL_FILE} changed since the bpe stage copied its "
            f"vocabulary (sha256 {recorded.model_sha256[:12]} then, {parent.model_sha256[:12]} now); "
            f"{RERUN_BPE}"
        )


def check_same_vocabulary(vocab: Vocab, parent_dir: Path, bpe_dir: Path) -> None:
    """Every file of data/bpe's vocabulary is the parent's, byte for byte."""
    differ = vocab.differing_files(parent_dir)
    if differ:
        raise ParamsError(
            f"train.init_from: {bpe_dir}/{differ[0]} is not the parent's ({parent_dir}/{differ[0]}): "
            f"another vocabulary; {RERUN_BPE}"
        )
