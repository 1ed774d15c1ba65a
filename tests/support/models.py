"""Tiny sentencepiece models, binarized corpora, params and model directories of ours."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
import yaml

from pipeline import params as P
from pipeline.data.batching import ParallelData
from pipeline.data.shards import write_shard
from pipeline.decoding.steps import BANNED
from pipeline.model import checkpoint
from pipeline.model.transformer import Seq2SeqBase, build_model
from pipeline.params import BpeParams
from pipeline.stages.bpe import train_bpe
from pipeline.tokens import EOS, N_SPECIAL
from pipeline.training.state import Paths
from tests.support.repo import BASE, REPO


def tiny_model_params(**overrides: Any) -> P.ModelParams:
    """params.yaml's model at test size (d_model 32, 4 heads, 2 layers, no dropout), with `overrides`."""
    tiny = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, attention_dropout=0.0)
    return dataclasses.replace(BASE.model, **(tiny | {"activation_dropout": 0.0} | overrides))


WORDS = "der die das ein eine hund katze mann frau kind läuft springt über straße groß weiß".split()


def train_spm(
    path: Path, vocab_size: int = 40, seed: int = 0, lines: list[str] | None = None, model_type: str = "bpe"
) -> int:
    """A tiny sentencepiece model with the pipeline's special ids, on `lines` (default: 300 random
    sentences of WORDS); returns its size."""
    rng = random.Random(seed)
    if lines is None:
        lines = [" ".join(rng.choices(WORDS, k=rng.randint(2, 8))) for _ in range(300)]
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buffer,
        model_type=model_type,
        vocab_size=vocab_size,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        user_defined_symbols=["<sep>"],
        minloglevel=2,
    )
    path.write_bytes(buffer.getvalue())
    return spm.SentencePieceProcessor(model_file=str(path)).get_piece_size()


def make_model_dir(
    path: Path, arch: str = "encoder_decoder", *, model_vocab: int | None = None, seed: int = 0
) -> Path:
    """A model directory as train writes it (model.pt + spm.model), with random weights."""
    path.mkdir(parents=True)
    size = train_spm(path / "spm.model")
    vocab = model_vocab or size
    model_params = tiny_model_params(arch=arch, max_positions=64, tie_embeddings="none")
    decode_params = dataclasses.replace(BASE.decode, beam=3, batch_tokens=400, max_len_a=1.0, max_len_b=3)
    params = dataclasses.replace(BASE, model=model_params, decode=decode_params)
    torch.manual_seed(seed)
    model = build_model(params.model, vocab, vocab)
    payload = checkpoint.model_payload(model, params, vocab, vocab, step=0)
    checkpoint.save(path / checkpoint.MODEL_FILE, payload)
    return path


VOCAB = 24


def write_side(prefix: Path, seqs: list[list[int]]) -> None:
    """One {split}.{side}.bin/.idx pair, as the binarize stage writes it."""
    write_shard(prefix, seqs)


def bpe_params(joint: bool = True, vocab_size: int | str = VOCAB, **changes) -> BpeParams:
    """params.yaml's bpe section with a test-sized vocabulary: new settings arrive with their defaults."""
    return dataclasses.replace(BASE.bpe, joint=joint, vocab_size=vocab_size, **changes)


def make_corpus(
    root: Path, *, task: str = "copy", n_train: int = 400, n_val: int = 30, lengths=(3, 8), seed: int = 0
) -> Paths:
    """A joint VOCAB-piece spm model, and random id sentences whose target copies (or reverses) the source."""
    rng = random.Random(seed)
    text = root / "text"
    text.mkdir(parents=True)
    word = lambda: "".join(rng.choices("abcdefgh", k=rng.randint(1, 5)))
    words = [" ".join(word() for _ in range(8)) for _ in range(300)]
    for side in ("src", "tgt"):
        (text / f"train.{side}").write_text("\n".join(words) + "\n", encoding="utf-8")
    train_bpe(bpe_params(), text, root / "bpe")
    (root / "bin").mkdir()
    for split, n in (("train", n_train), ("val", n_val), ("test", n_val)):
        src = [[rng.randrange(N_SPECIAL, VOCAB) for _ in range(rng.randint(*lengths))] for _ in range(n)]
        tgt = [s[::-1] if task == "reverse" else list(s) for s in src]
        write_side(root / "bin" / f"{split}.src", src)
        write_side(root / "bin" / f"{split}.tgt", tgt)
    return Paths(root / "bin", root / "bpe", root / "model", root / "checkpoints", root / "log")


def make_text_corpus(
    root: Path,
    *,
    model_type: str = "bpe",
    n_train: int = 60,
    n_val: int = 8,
    vocab_size: int = 40,
    seed: int = 0,
) -> Paths:
    """A copy task as text (clean/), its subword model (bpe/, of `model_type`) and data/bin, all consistent:
    what subword sampling trains from."""
    from pipeline.stages.binarize import binarize  # the stage under test elsewhere: only when needed

    rng = random.Random(seed)
    clean = root / "clean"
    clean.mkdir(parents=True)
    word = lambda: "".join(rng.choices("abcdefgh", k=rng.randint(2, 6)))
    for split, n in (("train", n_train), ("val", n_val)):
        lines = [" ".join(word() for _ in range(rng.randint(2, 5))) for _ in range(n)]
        for side in ("src", "tgt"):
            (clean / f"{split}.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    train_bpe(bpe_params(vocab_size=vocab_size, model_type=model_type), clean, root / "bpe")
    binarize(clean, root / "bpe", root / "bin")
    return Paths(root / "bin", root / "bpe", root / "model", root / "checkpoints", root / "log", clean)


def reshard(bin_dir: Path, out: Path, lines: int) -> Path:
    """A copy of bin_dir's train and val splits in shards of `lines` sentences, listed in meta.json."""
    out.mkdir(parents=True)
    shards: dict[str, list[dict[str, int]]] = {}
    for split in ("train", "val"):
        data = ParallelData.load(bin_dir, split)
        starts = range(0, len(data), lines)
        shards[split] = [{"sentences": min(lines, len(data) - a)} for a in starts]
        for k, a in enumerate(starts):
            for side, array in (("src", data.src), ("tgt", data.tgt)):
                write_side(
                    out / f"{split}.{side}.{k:05d}",
                    [array[i].tolist() for i in range(a, min(a + lines, len(data)))],
                )
    (out / "meta.json").write_text(json.dumps({"shards": shards}), encoding="utf-8")
    return out


def tiny_raw(model: dict | None = None, **train) -> dict:
    """The repository's params.yaml shrunk to a model that trains in seconds on 1 thread."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["bpe"]["vocab_size"] = VOCAB
    raw["model"].update(
        d_model=32, n_heads=2, d_ff=64, n_layers=1, dropout=0.1, attention_dropout=0.0, max_positions=64
    )
    raw["model"].update(model or {})
    raw["train"].update(
        device="cpu",
        precision="fp32",
        compile=False,  # inductor takes tens of seconds to build kernels: the tests that want it say so
        max_tokens=64,
        lr=5e-3,
        warmup_steps=10,
        max_epochs=2,
        max_steps=0,
        validate_every=4,
        log_every=2,
        threads=1,
        patience=0,
        keep_last=2,
        average_last=0,
        label_smoothing=0.1,
        early_stop_metric="loss",
    )
    raw["train"].update(train)
    return raw


def tiny_params(model: dict | None = None, **train) -> P.Params:
    return P.from_dict(tiny_raw(model, **train))


def model_weights(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["model"]


# --- models for the CTranslate2 backend and the export-ct2 command -----------------------

CT2_MAX_LEN = (1.0, 3)  # decode.max_len_a and max_len_b of make_ct2_model_dir's models


def make_ct2_model_dir(
    path: Path,
    norm: str = "pre",
    positions: str = "sinusoidal",
    tie: str = "none",
    activation: str = "relu",
    *,
    arch: str = "encoder_decoder",
    seed: int = 0,
) -> tuple[Path, Seq2SeqBase]:
    """A model directory with random weights, whose output layer acts like a trained one's:

    EOS is likely enough that outputs end before the length limit, and PAD, BOS
    and SEP get no mass (a trained model never predicts them; see ct2.py on why
    that matters for the scores).
    """
    path.mkdir(parents=True)
    vocab = train_spm(path / "spm.model")
    model_params = tiny_model_params(
        arch=arch,
        norm=norm,
        positions=positions,
        tie_embeddings=tie,
        activation=activation,
        max_positions=64,
        output_bias=True,
    )
    max_len_a, max_len_b = CT2_MAX_LEN
    decode_params = dataclasses.replace(
        BASE.decode, beam=4, batch_tokens=400, max_len_a=max_len_a, max_len_b=max_len_b
    )
    params = dataclasses.replace(BASE, model=model_params, decode=decode_params)
    torch.manual_seed(seed)
    model = build_model(params.model, vocab, vocab).eval()
    with torch.no_grad():
        model.out_bias[EOS] = 2.0
        model.out_bias[list(BANNED)] = -30.0
    payload = checkpoint.model_payload(model, params, vocab, vocab, step=0)
    checkpoint.save(path / checkpoint.MODEL_FILE, payload)
    return path, model
