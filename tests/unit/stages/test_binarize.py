"""Stage binarize: ids on disk equal the encoder's, offsets, dtype, meta.json."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pipeline import tokens
from pipeline.data.batching import ParallelData
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.stages import binarize as binarize_stage
from pipeline.stages.bpe import train_bpe
from tests.support.models import bpe_params
from tests.support.repo import REPO

SPLITS, SIDES = ("train", "val"), ("src", "tgt")  # test sets are not binarized: nothing trains on them
DE = "der die das ein hund katze mann läuft springt über straße weiß".split()
EN = "the a dog cat man runs jumps over street white".split()


def write_clean(clean: Path) -> None:
    """Synthetic splits; val holds an empty line and a character unseen in train (-> UNK)."""
    rng = random.Random(2)
    clean.mkdir(parents=True)
    for split, n in (("train", 250), ("val", 23)):
        src = [" ".join(rng.choices(DE, k=rng.randint(1, 15))) for _ in range(n)]
        tgt = [" ".join(rng.choices(EN, k=rng.randint(1, 15))) for _ in range(n)]
        if split == "val":
            src[3], tgt[5] = "", "Ω dog"
        (clean / f"{split}.src").write_text("".join(s + "\n" for s in src), encoding="utf-8")
        (clean / f"{split}.tgt").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module", params=[True, False], ids=["joint", "separate"])
def corpus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("binarize")
    write_clean(root / "clean")
    train_bpe(bpe_params(request.param, 70), root / "clean", root / "bpe")
    return root


def run_command(root: Path, out: str = "bin") -> Path:
    result = CliRunner().invoke(
        binarize_stage.command,
        ["--clean", str(root / "clean"), "--bpe", str(root / "bpe"), "--out", str(root / out)],
    )
    assert result.exit_code == 0, result.output
    return root / out


def test_ids_on_disk_equal_the_encoders_output(corpus: Path) -> None:
    out = run_command(corpus)
    vocab = Vocab.load(corpus / "bpe")
    encoders = {"src": vocab.encode_src, "tgt": vocab.encode_tgt}
    for split in SPLITS:
        for side in SIDES:
            expected = encoders[side](read_lines(corpus / "clean" / f"{split}.{side}"))
            offsets = np.fromfile(out / f"{split}.{side}.00000.idx", dtype="<i8")
            flat = np.fromfile(out / f"{split}.{side}.00000.bin", dtype="<u2")
            assert len(offsets) == len(expected) + 1 and offsets[0] == 0
            assert np.all(np.diff(offsets) >= 0) and offsets[-1] == len(flat)
            assert [flat[a:b].tolist() for a, b in itertools.pairwise(offsets)] == expected
            array = ParallelData.load(out, split).src if side == "src" else ParallelData.load(out, split).tgt
            assert [array[i].tolist() for i in range(len(array))] == expected


def test_meta_json_counts(corpus: Path) -> None:
    out = run_command(corpus)
    meta = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    vocab = Vocab.load(corpus / "bpe")
    assert meta["dtype"] == "uint16" and meta["joint"] == vocab.joint
    assert (meta["src_vocab_size"], meta["tgt_vocab_size"]) == (vocab.src_size, vocab.tgt_size)
    hashes = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in vocab.model_files()}
    assert meta["bpe_models"] == hashes
    encoders = {"src": vocab.encode_src, "tgt": vocab.encode_tgt}
    for split in SPLITS:
        stats = meta["splits"][split]
        for side in SIDES:
            ids = encoders[side](read_lines(corpus / "clean" / f"{split}.{side}"))
            assert stats["sentences"] == len(ids)
            assert stats[f"{side}_tokens"] == sum(map(len, ids))
            assert stats[f"{side}_max_len"] == max(map(len, ids))
            assert stats[f"{side}_unk"] == sum(seq.count(tokens.UNK) for seq in ids)
    assert meta["splits"]["val"]["tgt_unk"] >= 1 and meta["splits"]["train"]["tgt_unk"] == 0
    assert ParallelData.load(out, "val").src.lengths[3] == 0  # an empty line stays a (zero-length) sentence
    assert meta["shards"] == {split: [{"sentences": meta["splits"][split]["sentences"]}] for split in SPLITS}
    assert meta["sources"] == [{"name": "train", "sentences": 250}]  # no clean stats.json: one source


def test_output_is_the_same_whatever_the_chunk_size(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = run_command(corpus, "whole")
    monkeypatch.setattr(binarize_stage, "CHUNK_LINES", 7)
    chunked = run_command(corpus, "chunked")
    for path in sorted(whole.iterdir()):
        assert path.read_bytes() == (chunked / path.name).read_bytes(), path.name


def test_dtype_choice() -> None:
    assert binarize_stage.token_dtype(100) == np.uint16
    assert binarize_stage.token_dtype(2**16) == np.uint16  # ids 0..65535 fit
    assert binarize_stage.token_dtype(2**16 + 1) == np.int32


def test_int32_output_reads_back(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binarize_stage, "token_dtype", lambda size: np.dtype("<i4"))
    meta = binarize_stage.binarize(corpus / "clean", corpus / "bpe", corpus / "bin32")
    assert meta["dtype"] == "int32"
    array = ParallelData.load(corpus / "bin32", "train").src
    assert array.shards[0][0].dtype == np.int32
    (expected,) = Vocab.load(corpus / "bpe").encode_src(read_lines(corpus / "clean/train.src")[:1])
    assert array[0].tolist() == expected


def test_misaligned_sides_are_refused_and_nothing_is_written(corpus: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    clean.mkdir()
    for split in SPLITS:
        for side in SIDES:
            lines = read_lines(corpus / "clean" / f"{split}.{side}")
            lines = lines[:-1] if (split, side) == ("val", "tgt") else lines
            (clean / f"{split}.{side}").write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    with pytest.raises(UserError, match=r"val.src has 23 lines but val.tgt has 22"):
        binarize_stage.binarize(clean, corpus / "bpe", tmp_path / "bin")
    assert not (tmp_path / "bin").exists()
    (clean / "val.src").unlink()
    with pytest.raises(UserError, match=r"val.src: missing"):
        binarize_stage.binarize(clean, corpus / "bpe", tmp_path / "bin")


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_shards_are_the_same_for_any_number_of_workers_and_read_back_as_one(
    corpus: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(binarize_stage, "CHUNK_LINES", 7)  # tasks cut inside shards and across their ends
    out = corpus / f"sharded{workers}"
    meta = binarize_stage.binarize(corpus / "clean", corpus / "bpe", out, workers=workers, shard_lines=60)
    assert [s["sentences"] for s in meta["shards"]["train"]] == [60, 60, 60, 60, 10]
    assert sorted(p.name for p in out.glob("train.src.*.bin")) == [f"train.src.{k:05d}.bin" for k in range(5)]
    whole = binarize_stage.binarize(corpus / "clean", corpus / "bpe", corpus / f"whole{workers}", workers=1)
    assert meta["splits"] == whole["splits"]
    sharded, single = ParallelData.load(out, "train"), ParallelData.load(corpus / f"whole{workers}", "train")
    assert sharded.src.lengths.tolist() == single.src.lengths.tolist()
    assert [sharded.tgt[i].tolist() for i in range(len(sharded))] == [
        single.tgt[i].tolist() for i in range(250)
    ]
    reference = corpus / "sharded1"
    for path in sorted(reference.iterdir()):
        assert path.read_bytes() == (out / path.name).read_bytes(), path.name


def test_a_failing_worker_fails_the_stage_with_its_error(corpus: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    shutil.copytree(corpus / "clean", clean)
    (clean / "val.tgt").write_bytes(b"\xff\xfe not utf-8\n" * 23)
    with pytest.raises(UserError, match=r"val.tgt: not UTF-8 .*rerun the clean stage"):
        binarize_stage.binarize(clean, corpus / "bpe", tmp_path / "bin", workers=2)
    assert not (tmp_path / "bin").exists()


def test_train_corpora_come_from_clean_stats(corpus: Path, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    shutil.copytree(corpus / "clean", clean)
    sources = {"a": {"lines_out": 200}, "b": {"lines_out": 50}}
    (clean / "stats.json").write_text(json.dumps({"train": {"sources": sources}}), encoding="utf-8")
    meta = binarize_stage.binarize(clean, corpus / "bpe", tmp_path / "bin")
    assert meta["sources"] == [{"name": "a", "sentences": 200}, {"name": "b", "sentences": 50}]
    sources["b"]["lines_out"] = 51
    (clean / "stats.json").write_text(json.dumps({"train": {"sources": sources}}), encoding="utf-8")
    with pytest.raises(
        UserError, match=r"stats.json counts 251 training lines but .*train.src has 250; run the clean"
    ):
        binarize_stage.binarize(clean, corpus / "bpe", tmp_path / "bin2")


CTRL_C = """
import os, signal, sys, time
from pathlib import Path
from pipeline.stages import binarize

# Ctrl-C as at a terminal: a shell starts a background job (pytest ... &) with SIGINT ignored, and
# Python then installs no KeyboardInterrupt handler, so this process would inherit deafness to it
signal.signal(signal.SIGINT, signal.default_int_handler)

encode = binarize._encode_chunk
def slow(chunk):  # each worker notes its pid, then takes far longer than the test waits
    Path(sys.argv[3], str(os.getpid())).touch()
    time.sleep(60)
    return encode(chunk)
binarize._encode_chunk = slow
binarize.binarize(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[4]), workers=2)
"""


def test_ctrl_c_stops_the_workers_and_keeps_the_previous_output(corpus: Path, tmp_path: Path) -> None:
    out = run_command(corpus, "previous")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    pids = tmp_path / "pids"
    pids.mkdir()
    args = [sys.executable, "-c", CTRL_C, str(corpus / "clean"), str(corpus / "bpe"), str(pids), str(out)]
    proc = subprocess.Popen(args, cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(list(pids.iterdir())) == 2, "the workers never started"
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10, "Ctrl-C waited for the workers' chunks"
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    for pid in (int(p.name) for p in pids.iterdir()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # gone, not orphaned
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".previous")) == []
