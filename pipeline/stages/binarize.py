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
are encoded by a process pool (--workers); the output is the same for any
number of workers. data.batching.ParallelData reads it back, memory-mapped.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
import numpy as np

from pipeline import tokens
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.files import atomic_path, write_json
from pipeline.stages.options import bpe_option, clean_option, load_params, params_option

SPLITS = ("train", "val")  # not the test sets: decode reads them as text, nothing trains on them
SIDES = ("src", "tgt")
# Lines encoded per step: bounds memory to one chunk's Python lists, whatever the corpus size.
CHUNK_LINES = 10_000
SHARD_LINES = 1_000_000  # about 30-60 MB a shard and side at Multi30k/WMT sentence lengths

Encoder = Callable[[list[str]], list[list[int]]]


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 halves the file (and page cache) for any vocab of at most 65536 pieces."""
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<i4")


@dataclass(frozen=True)
class Shard:
    """One task: `n_lines` lines of `text` from byte `start`, encoded into `prefix`.bin/.idx."""

    text: Path
    start: int
    n_lines: int
    side: str
    prefix: Path


def binarize(
    clean_dir: Path, bpe_dir: Path, out_dir: Path, workers: int = 1, shard_lines: int = SHARD_LINES
) -> dict:
    """Encode clean_dir/{train,val}.{src,tgt} with the vocab in bpe_dir; return meta.json's content."""
    vocab = Vocab.load(bpe_dir)
    for split, side in itertools.product(SPLITS, SIDES):
        if not (clean_dir / f"{split}.{side}").is_file():
            raise UserError(f"{clean_dir / f'{split}.{side}'}: missing; run the clean stage first")
    dtype = token_dtype(max(vocab.src_size, vocab.tgt_size))
    meta: dict[str, Any] = {
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
        tasks = [shard for shards in plan.values() for side in SIDES for shard in shards[side]]
        counts = dict(zip(tasks, _run(tasks, bpe_dir, dtype, workers)))
        for split, shards in plan.items():
            meta["splits"][split], meta["shards"][split] = _split_meta(shards, counts)
        n_train = meta["splits"]["train"]["sentences"]
        meta["sources"] = train_sources(clean_dir, n_train)
        write_json(tmp / "meta.json", meta)
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
    """`text` cut into shards of shard_lines lines (the last shorter), by byte offset; at least one."""
    shards: list[Shard] = []
    start = pos = n = 0
    with open(text, "rb") as f:
        for line in f:
            pos, n = pos + len(line), n + 1
            if n == shard_lines:
                shards.append(Shard(text, start, n, side, Path(f"{prefix}.{len(shards):05d}")))
                start, n = pos, 0
    if n or not shards:
        shards.append(Shard(text, start, n, side, Path(f"{prefix}.{len(shards):05d}")))
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


def train_sources(clean_dir: Path, n_train: int) -> list[dict[str, Any]]:
    """The train split's sources in order with their sentence counts (clean's stats.json; one without it)."""
    stats_path = clean_dir / "stats.json"
    if stats_path.is_file():
        sources = json.loads(stats_path.read_text(encoding="utf-8"))["train"].get("sources", {})
        listed = [{"name": name, "sentences": s["lines_out"]} for name, s in sources.items()]
        if listed and sum(s["sentences"] for s in listed) == n_train:
            return listed
        if listed:
            raise UserError(
                f"{stats_path} counts other training lines than {clean_dir}/train.src; rerun clean"
            )
    return [{"name": "train", "sentences": n_train}]


# --- the pool ------------------------------------------------------------------


def _run(tasks: list[Shard], bpe_dir: Path, dtype: np.dtype, workers: int) -> list[dict[str, int]]:
    """Each task's counts, in task order; with workers > 1 from a process pool.

    A worker's error fails the stage with that error; a worker that dies is named;
    Ctrl-C stops the workers (the caller's atomic_path drops the partial output).
    """
    workers = min(workers or os.cpu_count() or 1, len(tasks))
    if workers <= 1:
        _init_worker(bpe_dir, dtype, ignore_sigint=False)
        return [_encode_shard(task) for task in tasks]
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, initializer=_init_worker, initargs=(bpe_dir, dtype, True)
    )
    try:
        return list(pool.map(_encode_shard, tasks))
    except concurrent.futures.process.BrokenProcessPool as e:
        raise UserError(f"a binarize worker died ({e}); out of memory? try --workers 1") from e
    except BaseException:  # a worker's error or Ctrl-C: stop the others now, not after their shards
        for process in list(getattr(pool, "_processes", {}).values()):  # no public way before Python 3.14
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_worker: dict[str, Any] = {}


def _init_worker(bpe_dir: Path, dtype: np.dtype, ignore_sigint: bool) -> None:
    if ignore_sigint:  # Ctrl-C is the parent's to handle: it shuts the pool down
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    vocab = Vocab.load(bpe_dir)
    _worker.update(encoders={"src": vocab.encode_src, "tgt": vocab.encode_tgt}, dtype=dtype)


def _encode_shard(shard: Shard) -> dict[str, int]:
    """Encode the shard's lines into shard.prefix.bin / .idx; return its counts."""
    encode: Encoder = _worker["encoders"][shard.side]
    dtype: np.dtype = _worker["dtype"]
    lengths: list[np.ndarray] = []
    n_unk = 0
    with open(shard.text, "rb") as f, open(f"{shard.prefix}.bin", "wb") as out:
        f.seek(shard.start)
        for chunk in _chunks(f, shard.n_lines):
            ids = encode(chunk)
            lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lens.sum()))
            out.write(flat.tobytes())
            lengths.append(lens)
            n_unk += int(np.count_nonzero(flat == tokens.UNK))
    all_lens = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    offsets = np.zeros(len(all_lens) + 1, dtype="<i8")
    np.cumsum(all_lens, out=offsets[1:])
    offsets.tofile(f"{shard.prefix}.idx")
    return {
        "sentences": len(all_lens),
        "tokens": int(offsets[-1]),
        "max_len": int(all_lens.max(initial=0)),
        "unk": n_unk,
    }


def _chunks(f: IO[bytes], n_lines: int) -> Iterator[list[str]]:
    """The next n_lines lines of `f`, decoded, CHUNK_LINES at a time."""
    while n_lines > 0:
        try:
            chunk = [
                line.decode("utf-8").rstrip("\n") for line in itertools.islice(f, min(CHUNK_LINES, n_lines))
            ]
        except UnicodeDecodeError as e:
            raise UserError(f"{f.name}: not UTF-8 ({e.reason}); rerun the clean stage") from None
        if not chunk:
            return
        n_lines -= len(chunk)
        yield chunk


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@click.command("binarize")
@clean_option
@bpe_option
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where to write the binarized splits.",
)
@params_option
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Encoding processes (default: data.workers of --params; 0: one per core). Any number gives "
    "the same output.",
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
