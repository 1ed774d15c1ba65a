"""Stage binarize: subword ids of the train and val splits, each side, in shards of flat arrays on disk.

Output (one directory, written atomically), per split, side and shard k of
at most --shard-lines sentences:
  {split}.{side}.{k:05d}.bin  the shard's ids end to end (little-endian uint16
                              when every id fits, else int32); no BOS/EOS
  {split}.{side}.{k:05d}.idx  little-endian int64 offsets, n+1 of them from 0
and meta.json, the manifest: dtype, vocab sizes, joint flag, sha256 of the
sentencepiece model(s), per split its shards' sentence counts and, per side,
total tokens, longest sentence and UNK count; the train sources in order with
their sentence counts (from clean's stats.json), for source weights. Shards
are encoded CHUNK_LINES lines at a time by a pool of --workers processes of
one sentencepiece thread each, taken in order (data.pool), so the output is
the same for any number of workers. data.batching.ParallelData reads it back,
memory-mapped.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from pipeline import tokens
from pipeline.data import artifacts
from pipeline.data.pool import ordered_results, resolve_workers
from pipeline.data.shards import ShardWriter, token_dtype
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.files import SIDES, atomic_path, write_json
from pipeline.stages.options import bpe_option, clean_option, directory, load_params, params_option

SPLITS = ("train", "val")  # not the test sets: decode reads them as text, nothing trains on them
# Lines a worker encodes at a time (a task): memory is a few chunks a worker, whatever the corpus
# size, and small tasks keep every worker busy to the end.
CHUNK_LINES = 10_000
SHARD_LINES = 1_000_000  # about 30-60 MB a shard and side at Multi30k/WMT sentence lengths

Encoder = Callable[[list[str]], list[list[int]]]


@dataclass(frozen=True)
class Chunk:
    """One task: `n_lines` lines of `text` from byte `start`, to encode."""

    text: Path
    start: int
    n_lines: int
    side: str


@dataclass(frozen=True)
class Shard:
    """The files prefix.bin and prefix.idx: its chunks' lines, in order."""

    prefix: Path
    chunks: tuple[Chunk, ...]

    @property
    def n_lines(self) -> int:
        return sum(chunk.n_lines for chunk in self.chunks)


def binarize(
    clean_dir: Path, bpe_dir: Path, out_dir: Path, workers: int = 1, shard_lines: int = SHARD_LINES
) -> artifacts.BinMeta:
    """Encode clean_dir/{train,val}.{src,tgt} with the vocab in bpe_dir; return meta.json's content."""
    vocab = Vocab.load(bpe_dir)
    for split, side in itertools.product(SPLITS, SIDES):
        if not (clean_dir / f"{split}.{side}").is_file():
            raise UserError(f"{clean_dir / f'{split}.{side}'}: missing; run the clean stage first")
    dtype = token_dtype(max(vocab.src_size, vocab.tgt_size))
    meta: artifacts.BinMeta = {
        "dtype": dtype.name,
        "joint": vocab.joint,
        "src_vocab_size": vocab.src_size,
        "tgt_vocab_size": vocab.tgt_size,
        "bpe_models": {path.name: _sha256(path) for path in vocab.model_files()},
        "splits": {},
        "shards": {},
    }
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        plan = {split: _plan(clean_dir, split, tmp, shard_lines) for split in SPLITS}
        shards = [shard for by_side in plan.values() for side in SIDES for shard in by_side[side]]
        chunks = [chunk for shard in shards for chunk in shard.chunks]
        workers = min(resolve_workers(workers), len(chunks))
        with ordered_results(
            _encode_chunk, chunks, workers, _init_worker, (bpe_dir, dtype), "binarize"
        ) as encoded:
            counts = {shard: _write_shard(shard, encoded) for shard in shards}
        for split, by_side in plan.items():
            meta["splits"][split], meta["shards"][split] = _split_meta(by_side, counts)
        n_train = meta["splits"]["train"]["sentences"]
        corpora = artifacts.train_corpora(
            clean_dir / artifacts.CLEAN_STATS, n_train, clean_dir / "train.src", "clean"
        )
        meta["sources"] = [c.to_dict() for c in corpora]
        write_json(tmp / artifacts.BIN_META, meta)
    return meta


def _plan(clean_dir: Path, split: str, tmp: Path, shard_lines: int) -> dict[str, list[Shard]]:
    """Each side's shards; the sides must have as many lines."""
    plan = {
        side: _shards(clean_dir / f"{split}.{side}", shard_lines, side, tmp / f"{split}.{side}")
        for side in SIDES
    }
    n_src, n_tgt = (sum(s.n_lines for s in plan[side]) for side in SIDES)
    if n_src != n_tgt:
        raise UserError(
            f"{clean_dir}/{split}.src has {n_src} lines but {split}.tgt has {n_tgt}; "
            f"the sides must be line-aligned, so rerun the clean stage"
        )
    return plan


def _shards(text: Path, shard_lines: int, side: str, prefix: Path) -> list[Shard]:
    """`text` cut into shards of shard_lines lines (the last shorter; at least one shard), each
    cut by byte offset into chunks of at most CHUNK_LINES lines."""
    shards: list[Shard] = []
    chunks: list[Chunk] = []
    start = pos = in_shard = in_chunk = 0
    with open(text, "rb") as f:
        for line in f:
            pos, in_shard, in_chunk = pos + len(line), in_shard + 1, in_chunk + 1
            if in_chunk == CHUNK_LINES or in_shard == shard_lines:
                chunks.append(Chunk(text, start, in_chunk, side))
                start, in_chunk = pos, 0
            if in_shard == shard_lines:
                shards.append(Shard(Path(f"{prefix}.{len(shards):05d}"), tuple(chunks)))
                chunks, in_shard = [], 0
    if in_chunk:
        chunks.append(Chunk(text, start, in_chunk, side))
    if chunks or not shards:
        shards.append(Shard(Path(f"{prefix}.{len(shards):05d}"), tuple(chunks)))
    return shards


def _split_meta(
    shards: dict[str, list[Shard]], counts: dict[Shard, dict[str, int]]
) -> tuple[dict[str, int], list[dict[str, int]]]:
    stats = {"sentences": sum(counts[s]["sentences"] for s in shards["src"])}
    for side in SIDES:
        side_counts = [counts[s] for s in shards[side]]
        stats[f"{side}_tokens"] = sum(c["tokens"] for c in side_counts)
        stats[f"{side}_max_len"] = max(c["max_len"] for c in side_counts)
        stats[f"{side}_unk"] = sum(c["unk"] for c in side_counts)
    return stats, [{"sentences": counts[s]["sentences"]} for s in shards["src"]]


def _write_shard(shard: Shard, encoded: Iterator[tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Write the shard's chunks, the next len(shard.chunks) of `encoded`; return its counts."""
    n_unk = 0
    with ShardWriter(shard.prefix) as out:
        for _, (lens, ids) in zip(shard.chunks, encoded):  # chunks first: zip must not take one too many
            out.write(lens, ids)
            n_unk += int(np.count_nonzero(ids == tokens.UNK))
    lengths = out.lengths
    return {
        "sentences": len(lengths),
        "tokens": int(lengths.sum()),
        "max_len": int(lengths.max(initial=0)),
        "unk": n_unk,
    }


# --- a worker: one chunk at a time -----------------------------------------------


_worker: dict[str, Any] = {}


def _init_worker(bpe_dir: Path, dtype: np.dtype) -> None:
    vocab = Vocab.load(bpe_dir, threads=1)  # a worker is a core: the pool spreads the work, not sentencepiece
    _worker.update(encoders={"src": vocab.encode_src, "tgt": vocab.encode_tgt}, dtype=dtype)


def _encode_chunk(chunk: Chunk) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's sentence lengths and its ids end to end."""
    encode: Encoder = _worker["encoders"][chunk.side]
    with open(chunk.text, "rb") as f:
        f.seek(chunk.start)
        try:
            lines = [line.decode("utf-8").rstrip("\n") for line in itertools.islice(f, chunk.n_lines)]
        except UnicodeDecodeError as e:
            raise UserError(f"{chunk.text}: not UTF-8 ({e.reason}); rerun the clean stage") from None
    ids = encode(lines)
    lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=_worker["dtype"], count=int(lens.sum()))
    return lens, flat


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@click.command("binarize")
@clean_option
@bpe_option
@directory(
    "out",
    required=True,
    help="Where to write the binarized splits.",
)
@params_option
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Encoding processes of one thread each (default: data.workers of --params; 0: one per core). "
    "Any number gives the same output.",
)
@click.option(
    "--shard-lines",
    type=click.IntRange(min=1),
    default=SHARD_LINES,
    show_default=True,
    help="Sentences per shard file.",
)
def command(
    params_file: Path, clean_dir: Path, bpe_dir: Path, out_dir: Path, workers: int | None, shard_lines: int
) -> None:
    """Encode the train and val splits with the BPE model(s) into sharded id arrays."""
    if workers is None:
        workers = load_params(params_file).data.workers
    meta = binarize(clean_dir, bpe_dir, out_dir, workers, shard_lines)
    counts = ", ".join(f"{split} {s['sentences']}" for split, s in meta["splits"].items())
    shards = sum(len(s) for s in meta["shards"].values())
    click.echo(f"binarize: {counts} sentences ({meta['dtype']}, {shards} shards a side) -> {out_dir}")
