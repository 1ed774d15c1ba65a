"""Stage binarize: subword ids of the train and val splits, each side, as flat arrays on disk.

Output (one directory, written atomically), per split and side:
  {split}.{side}.bin  all sentences' ids end to end (little-endian uint16 when
                      every id fits, else int32); no BOS/EOS
  {split}.{side}.idx  little-endian int64 offsets, n+1 of them, offsets[0] = 0:
                      sentence i is bin[offsets[i]:offsets[i+1]]
and meta.json: dtype, vocab sizes, joint flag, sha256 of the sentencepiece
model(s), and per split the sentence count and, per side, the total tokens,
the longest sentence and the UNK count (all in subword ids, BOS/EOS excluded).
data.TokenArray reads these files back.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import click
import numpy as np

from pipeline import tokens
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.files import atomic_path, write_json

SPLITS = ("train", "val")  # not the test sets: decode reads them as text, nothing trains on them
SIDES = ("src", "tgt")
# Lines encoded per step: bounds memory to one chunk's Python lists, whatever the corpus size.
CHUNK_LINES = 10_000

Encoder = Callable[[list[str]], list[list[int]]]


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 halves the file (and page cache) for any vocab of at most 65536 pieces."""
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<i4")


def binarize(clean_dir: Path, bpe_dir: Path, out_dir: Path) -> dict:
    """Encode clean_dir/{split}.{side} with the vocab in bpe_dir; return meta.json's content."""
    vocab = Vocab.load(bpe_dir)
    for split, side in itertools.product(SPLITS, SIDES):
        if not (clean_dir / f"{split}.{side}").is_file():
            raise UserError(f"{clean_dir / f'{split}.{side}'}: missing; run the clean stage first")
    dtype = token_dtype(max(vocab.src_size, vocab.tgt_size))
    meta = {
        "dtype": dtype.name,
        "joint": vocab.joint,
        "src_vocab_size": vocab.src_size,
        "tgt_vocab_size": vocab.tgt_size,
        "bpe_models": {path.name: _sha256(path) for path in vocab.model_files()},
        "splits": {},
    }
    encoders: dict[str, Encoder] = {"src": vocab.encode_src, "tgt": vocab.encode_tgt}
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for split in SPLITS:
            stats = {
                side: _encode_file(
                    clean_dir / f"{split}.{side}", encoders[side], dtype, tmp / f"{split}.{side}"
                )
                for side in SIDES
            }
            n_src, n_tgt = stats["src"].pop("sentences"), stats["tgt"].pop("sentences")
            if n_src != n_tgt:
                raise UserError(
                    f"{clean_dir}/{split}.src has {n_src} lines but {split}.tgt has {n_tgt}; "
                    f"the sides must be line-aligned, so rerun the clean stage"
                )
            meta["splits"][split] = {"sentences": n_src} | {
                f"{side}_{key}": value for side in SIDES for key, value in stats[side].items()
            }
        write_json(tmp / "meta.json", meta)
    return meta


def _encode_file(text: Path, encode: Encoder, dtype: np.dtype, prefix: Path) -> dict[str, int]:
    """Stream `text` through `encode` into prefix.bin / prefix.idx; return its counts."""
    lengths: list[np.ndarray] = []
    n_unk = 0
    with open(text, encoding="utf-8") as f, open(f"{prefix}.bin", "wb") as out:
        for chunk in _chunks(f, CHUNK_LINES):
            ids = encode(chunk)
            lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lens.sum()))
            out.write(flat.tobytes())
            lengths.append(lens)
            n_unk += int(np.count_nonzero(flat == tokens.UNK))
    all_lens = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    offsets = np.zeros(len(all_lens) + 1, dtype="<i8")
    np.cumsum(all_lens, out=offsets[1:])
    offsets.tofile(f"{prefix}.idx")
    return {
        "sentences": len(all_lens),
        "tokens": int(offsets[-1]),
        "max_len": int(all_lens.max(initial=0)),
        "unk": n_unk,
    }


def _chunks(f: TextIO, size: int) -> Iterator[list[str]]:
    while chunk := [line.rstrip("\n") for line in itertools.islice(f, size)]:
        yield chunk


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@click.command("binarize")
@click.option(
    "--clean",
    "clean_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The clean stage's output directory.",
)
@click.option(
    "--bpe",
    "bpe_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The bpe stage's output directory.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where to write the binarized splits.",
)
def command(clean_dir: Path, bpe_dir: Path, out_dir: Path) -> None:
    """Encode every split with the BPE model(s) into flat id arrays."""
    meta = binarize(clean_dir, bpe_dir, out_dir)
    counts = ", ".join(f"{split} {s['sentences']}" for split, s in meta["splits"].items())
    click.echo(f"binarize: {counts} sentences ({meta['dtype']}) -> {out_dir}")
