"""Several models of one vocabulary decoding as one (decode.ensemble; docs/ensembles.md).

Each step every member runs its own decoder, with its own KV cache, on the same tokens, and
the search reads the mean of their probabilities, log(1/M sum_m p_m(y | x, y<t)), as fairseq's
EnsembleModel and Marian's equal-weight ensembles do. Members must read and write the same ids:
their sentencepiece model files are compared byte for byte (`load_members`). They must also be
of one kind (encoder-decoder or decoder-only: what is fed first differs); width, depth and
positions may differ, and inputs are cut to the tightest member's length limit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.model.transformer import DecoderState, Seq2SeqBase
from pipeline.params import ModelParams


class EnsembleState:
    """The members' decoder states, reordered together (the search keeps one row order)."""

    def __init__(self, states: list[DecoderState]):
        self.states = states

    def reorder(self, index: torch.Tensor, beams: int | None = None) -> None:
        for state in self.states:
            state.reorder(index, beams)


class Ensemble(nn.Module):
    """Members (M >= 2) behind the decoding interface of one model (steps.SearchModel)."""

    def __init__(self, members: Sequence[Seq2SeqBase]):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least two members, got {len(members)}")
        kinds = sorted({m.cfg.arch for m in members})
        if len(kinds) > 1:
            raise ValueError(f"ensemble members must be of one arch, got {', '.join(kinds)}")
        self.members = nn.ModuleList(members)  # registered: .to(), .eval() and modules() reach them
        self.models: list[Seq2SeqBase] = list(members)  # the same modules, typed
        self.start_token = members[0].start_token
        self.cfg = tightest([m.cfg for m in members])

    def start(self, src: torch.Tensor, steps: int = 0) -> EnsembleState:
        return EnsembleState([m.start(src, steps) for m in self.models])

    def step(self, tokens: torch.Tensor, state: EnsembleState) -> torch.Tensor:
        """tokens (R, 1) -> (R, V) float32 log of the members' mean next-token probabilities."""
        outs = [m.step(tokens, s) for m, s in zip(self.models, state.states)]
        return self._mean(outs)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (B, T, V) log mean probabilities (the search's uncached decoder)."""
        return self._mean([m(src, tgt_in) for m in self.models])

    def _mean(self, logits: list[torch.Tensor]) -> torch.Tensor:
        lprobs = torch.stack([torch.log_softmax(x.float(), dim=-1) for x in logits])  # (M, ..., V)
        return torch.logsumexp(lprobs, dim=0) - math.log(len(logits))


def tightest(cfgs: Sequence[ModelParams]) -> ModelParams:
    """The first member's params, with the shortest length limit of any member (batches.fit_to_model
    reads positions and max_positions): learned positions limit lengths, sinusoidal ones do not."""
    learned = [c.max_positions for c in cfgs if c.positions == "learned"]
    if not learned:
        return cfgs[0]
    return dataclasses.replace(cfgs[0], positions="learned", max_positions=min(learned))


def load_members(
    model_dir: Path, vocab: Vocab, arch: str, others: Sequence[str], name: str = "decode.ensemble"
) -> list[Seq2SeqBase]:
    """The models of `others` (model directories), each refused in one line, which names it as the
    `name` setting's item, unless it reads and writes `model_dir`'s vocabulary (its sentencepiece
    files, byte for byte) and is of its `arch`."""
    members, seen = [], set()
    for i, other in enumerate(others):
        key, where = f"{name}[{i}]", Path(other)
        path = where / checkpoint.MODEL_FILE
        if where.resolve() == model_dir.resolve():
            raise UserError(f"{key}: {other} is the model itself; list the other models only")
        if where.resolve() in seen:
            raise UserError(f"{key}: {other} is listed twice; list each model once")
        seen.add(where.resolve())
        if not path.is_file():
            raise UserError(
                f"{key}: {other} is not a model directory (it has no {checkpoint.MODEL_FILE}); give one "
                "that the train stage or import-hf wrote"
            )
        differ = vocab.differing_files(where)
        if differ:
            raise UserError(
                f"{key}: {other}/{differ[0]} is not {model_dir}/{differ[0]}: another vocabulary; ensemble "
                "members must share one (models trained on one bpe stage's output, or fine-tuned from "
                "one parent)"
            )
        obj = checkpoint.load(path)
        model, params = checkpoint.restore_model(obj, path)
        if params.model.arch != arch:
            raise UserError(
                f"{key}: {other} is a model.arch={params.model.arch} model, {model_dir} a "
                f"model.arch={arch} one; ensemble members must be of one arch"
            )
        if (obj["src_vocab"], obj["tgt_vocab"]) != (vocab.src_size, vocab.tgt_size):
            raise UserError(
                f"{key}: {path} has {obj['src_vocab']} / {obj['tgt_vocab']} source / target ids but its "
                f"sentencepiece model(s) {vocab.src_size} / {vocab.tgt_size}: they come from different runs"
            )
        members.append(model)
    return members
