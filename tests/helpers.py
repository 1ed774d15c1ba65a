"""What several test modules share: the repository's paths and params, tiny corpora and models."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm
import torch
import yaml

from pipeline import params as P
from pipeline.data import corpora, fetch
from pipeline.data.batching import ParallelData
from pipeline.decoding.search import BANNED
from pipeline.model import checkpoint
from pipeline.model.transformer import Seq2SeqBase, build_model
from pipeline.params import BpeParams, DataParams, SourceSpec
from pipeline.stages.bpe import train_bpe
from pipeline.tokens import BOS, EOS, N_SPECIAL
from pipeline.tracking.tracker import Tracker
from pipeline.training.state import Paths

REPO = Path(__file__).resolve().parents[1]
MIRROR = REPO.parent / "shared" / "corpora"
BASE = P.load(REPO / "params.yaml")


def tiny_model_params(**overrides: Any) -> P.ModelParams:
    """params.yaml's model at test size (d_model 32, 4 heads, 2 layers, no dropout), with `overrides`."""
    tiny = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, attention_dropout=0.0)
    return dataclasses.replace(BASE.model, **(tiny | {"activation_dropout": 0.0} | overrides))


WORDS = "der die das ein eine hund katze mann frau kind läuft springt über straße groß weiß".split()


def train_spm(path: Path, vocab_size: int = 40, seed: int = 0) -> int:
    """A tiny BPE model with the pipeline's special ids; returns its size."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(2, 8))) for _ in range(300)]
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buffer,
        model_type="bpe",
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
    lens = np.array([len(s) for s in seqs], dtype=np.int64)
    offsets = np.zeros(len(seqs) + 1, dtype="<i8")
    np.cumsum(lens, out=offsets[1:])
    np.concatenate([np.asarray(s, dtype="<u2") for s in seqs]).tofile(f"{prefix}.bin")
    offsets.tofile(f"{prefix}.idx")


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


def read_tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp_path: Path, port: int) -> subprocess.Popen:
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job-runner processes
    return subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 's.db'}",
            "--artifacts-destination",
            str(tmp_path / "artifacts"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so stopping it stops its workers too
    )


def wait_healthy(server: subprocess.Popen, port: int, limit_s: float = 60.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return True
        except OSError:
            time.sleep(0.5)
    return False


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL what is left; fine if already gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)  # workers left behind in the group
    server.wait(timeout=5)


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


# --- corpus files, a fake mirror and a fake network, for the download and fetch tests ------

M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def sides(src: str, tgt: str, src_sha256: str | None = None, tgt_sha256: str | None = None) -> SourceSpec:
    """A source of one file per side."""
    return SourceSpec(src=src, tgt=tgt, src_sha256=src_sha256, tgt_sha256=tgt_sha256)


def user_data(
    train: SourceSpec, val: SourceSpec | None = None, test: SourceSpec | None = None, **changes
) -> DataParams:
    """DataParams whose splits are the user's sources c-train, c-val, c-test (none: 1000 lines held out,
    or data.heldout_* in `changes`), validated."""
    specs = {"c-train": train, "c-val": val, "c-test": test}
    sources = {name: spec for name, spec in specs.items() if spec is not None}
    splits = {split: (f"c-{split}",) if f"c-{split}" in sources else () for split in ("train", "val", "test")}
    held = {f"heldout_{split}": None if splits[split] else 1000 for split in ("val", "test")}
    data = dataclasses.replace(BASE.data, mirror=None, sources=sources, **{**splits, **held, **changes})
    P.validate(dataclasses.replace(BASE, data=data))
    return data


def numbered(tmp_path: Path, n: int, name: str = "c") -> SourceSpec:
    """A source of n aligned lines 's{i}' / 't{i}'."""
    src = write(tmp_path / f"{name}.src", "".join(f"s{i}\n" for i in range(n)).encode())
    tgt = write(tmp_path / f"{name}.tgt", "".join(f"t{i}\n" for i in range(n)).encode())
    return sides(src, tgt)


def entries(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def serve(monkeypatch, responses: list) -> list[str]:
    """Make urlopen answer with `responses` in turn (an exception is raised); return the URLs asked."""
    asked: list[str] = []

    def urlopen(url, timeout=None):
        asked.append(url)
        answer = responses[min(len(asked), len(responses)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return asked


def fake_multi30k_mirror(root: Path, monkeypatch, n: dict[str, int]) -> None:
    """A Multi30k-like layout under `root`, its sums pinned in place of the real ones."""
    pinned = {}
    for name, count in n.items():
        for lang in ("de", "en"):
            url = f"{M30K}{name}.{lang}.gz"
            body = gzip.compress("".join(f"{name} {lang} {i}\n" for i in range(count)).encode())
            write(fetch.mirror_path(root, url), body)
            pinned[url] = sha(body)
    monkeypatch.setattr(corpora, "PINNED_SHA256", pinned)


def raw_manifest(train: list[str], val: list[str], test: list[str], *, lines: int = 10) -> dict:
    """data/raw/manifest.json in the format of notes/contract.md: per split its sources, each with
    a src and a tgt file at a Multi30k-like URL and that name's made-up sha256 sums."""

    def entry(name: str) -> dict:
        files = [
            {
                "role": role,
                "source": f"{M30K}{name}.{lang}.gz",
                "member": None,
                "via": "network",
                "sha256": sha(f"{name}.{lang}".encode()),
                "verified": "pinned",
            }
            for role, lang in (("src", "de"), ("tgt", "en"))
        ]
        counts = {"lines": lines, "fetched_lines": lines, "max_lines": None}
        return {"name": name, "catalog": True, **counts, "format": "text", "files": files}

    splits = {"train": train, "val": val, "test": test}
    return {
        "src_lang": "de",
        "tgt_lang": "en",
        "splits": {split: [entry(n) for n in names] for split, names in splits.items()},
        "heldout": None,
    }


# --- Markdown, as the report and experiments tables write it ---------------------------


def references(n: int, seed: int = 0) -> list[str]:
    """n made-up reference sentences of 6-14 WORDS (the same for the same n and seed)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(n)]


def garble(refs: list[str], share: float, seed: int = 1) -> list[str]:
    """Hypotheses: the references with about `share` of their words replaced by a word outside WORDS."""
    rng = random.Random(seed)
    return [" ".join("xyz" if rng.random() < share else w for w in r.split()) for r in refs]


def table_rows(text: str) -> list[list[str]]:
    """Cells of every Markdown table row in `text` (escaped pipes kept inside cells)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not set(line) <= set("|-: "):
            cells = line.replace("\\|", "\x00").strip("|").split("|")
            rows.append([c.strip().replace("\x00", "\\|") for c in cells])
    return rows


# --- a sweep of runs in MLflow, and a DVC repository with experiments, for the runs and
# experiments tests (conftest's store and dvc_repo fixtures) ---------------------------

COMMIT = "0123456789abcdef0123456789abcdef01234567"


# Two test sets, as score.py names their metrics in MLflow (test.<name>.<score>).
SWEEP_TESTS = ("multi30k-test_2016_flickr", "multi30k-test_2017_mscoco")
T16, T17 = (f"test.{name}" for name in SWEEP_TESTS)

# A small sweep: (DVC experiment, params changed, final metrics or None for a run that failed).
SWEEP = [
    (
        "exp-two",
        {"model": {"n_layers": 2}},
        {
            f"{T16}.bleu": 30.55,
            f"{T16}.chrf": 52.5,
            f"{T16}.ter": 58.0,
            f"{T17}.bleu": 24.0,
            f"{T17}.chrf": 47.0,
            f"{T17}.ter": 63.0,
            "dev_bleu": 29.5,
            "dev_chrf": 51.0,
            "dev_ter": 59.0,
            "n_params": 2_012_345,
            "train_seconds": 3723.4,
            "tokens_per_s": 15000.0,
        },
    ),
    (
        "exp-four",
        {"model": {"n_layers": 4, "dropout": 0.3}},
        {
            f"{T16}.bleu": 35.25,
            f"{T16}.chrf": 57.0,
            f"{T16}.ter": 52.5,
            f"{T17}.bleu": 26.5,
            f"{T17}.chrf": 49.0,
            f"{T17}.ter": 61.0,
            "dev_bleu": 34.0,
            "dev_chrf": 56.0,
            "dev_ter": 53.0,
            "n_params": 4_012_345,
            "train_seconds": 7446.8,
            "tokens_per_s": 9000.0,
        },
    ),
    ("exp-six", {"model": {"n_layers": 6}}, None),
]


def sweep_params(change: dict[str, dict[str, Any]]) -> dict[str, Any]:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for section, values in change.items():
        params[section].update(values)
    return params


def log_run(name: str, change: dict, final: dict | None, experiment: str = "nmt") -> str:
    """One training run as train.py and score.py log it: curves by step, then totals and scores."""
    os.environ["DVC_EXP_NAME"] = name
    run = Tracker.start(sweep_params(change), experiment, f"de-en encoder_decoder {name}")
    for step in range(100, 600, 100):
        run.log_metrics({"train_loss": 5.0 - step / 200, "val_bleu": step / 20}, step=step)
    if final is not None:
        totals = ("n_params", "train_seconds", "tokens_per_s")
        run.log_metrics({k: final[k] for k in totals}, step=500)
        run.log_metrics({k: v for k, v in final.items() if k not in totals}, step=0)
    run.end("FINISHED" if final is not None else "FAILED")
    return run.run_id


# A stand-in score stage for conftest's dvc_repo: metrics.json as the score stage writes it, two test sets.
SCORE_STAGE = """\
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))
layers, lr = p["model"]["n_layers"], p["train"]["lr"]
os.makedirs("reports/train", exist_ok=True)
bleu = round(20 + 3 * layers - 1000 * lr, 2)
json.dump({"val": {"bleu": bleu - 1, "chrf": 50.0, "ter": 60.0, "n_lines": 10, "ci95": {"bleu": [1, 2]}},
           "test": {"flickr": {"bleu": bleu, "chrf": 51.0, "ter": 59.5, "n_lines": 10},
                    "mscoco": {"bleu": bleu - 5, "chrf": 45.0, "ter": 65.0, "n_lines": 10}}},
          open("reports/metrics.json", "w"))
json.dump({"n_params": 1000 * layers, "train_seconds": 60.0 * layers, "tokens_per_s": 100.0 / layers},
          open("reports/train/summary.json", "w"))
"""


# A stand-in decode stage for conftest's decode_repo: hypotheses of val and of each test set in
# data/raw/test/ are the references with a share (decode.noise) of their words garbled, seeded by
# train.seed; metrics.json ({"val": ..., "test": {name: ...}}) records the references' sha256.
DECODE_STAGE = """\
import hashlib, json, os, random, yaml
p = yaml.safe_load(open("params.yaml"))
noise, seed = p["decode"]["noise"], p["train"]["seed"]
os.makedirs("data/decode/test", exist_ok=True)
os.makedirs("reports", exist_ok=True)
metrics = {"test": {}}
names = sorted(f[:-4] for f in os.listdir("data/raw/test") if f.endswith(".tgt"))
for stem in ["val", *(f"test/{n}" for n in names)]:
    raw = open(f"data/raw/{stem}.tgt", "rb").read()
    rng = random.Random(seed)
    refs = raw.decode("utf-8").splitlines()
    hyps = [" ".join("xyz" if rng.random() < noise else w for w in r.split()) for r in refs]
    open(f"data/decode/{stem}.hyp", "w", encoding="utf-8").write("".join(h + "\\n" for h in hyps))
    scores = {"n_lines": len(hyps), "refs_sha256": hashlib.sha256(raw).hexdigest()}
    if stem == "val":
        metrics["val"] = scores
    else:
        metrics["test"][stem[5:]] = scores
json.dump(metrics, open("reports/metrics.json", "w"))
"""

# decode_repo's sets: (key, lines).
DECODE_SETS = (("val", 60), ("test/flickr", 300), ("test/mscoco", 80))


def dvc(args: list[str], cwd: Path) -> str:
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return done.stdout


# --- figures: the PNG written, and what a reader sees on it --------------------------------


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, after checking the PNG signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def axis_labels(ax) -> tuple[str, str, str]:
    """A matplotlib Axes' (title, x label, y label)."""
    return ax.get_title(), ax.get_xlabel(), ax.get_ylabel()


def legend_texts(ax) -> list[str]:
    """The entries of an Axes' legend, in order; [] without one."""
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def notes(ax) -> list[str]:
    """The texts written on an Axes' plot area (annotations, "no data"), in order."""
    return [t.get_text() for t in ax.texts]


# --- Hugging Face Marian checkpoints, built locally (no hub) --------------------------------

SRC_WORDS = "der die das ein eine hund katze mann frau kind läuft springt über straße groß weiß".split()
TGT_WORDS = "the a dog cat man woman child runs jumps over street big white small".split()


def train_marian_spm(path: Path, words: list[str], vocab_size: int = 40, seed: int = 0) -> list[str]:
    """A sentencepiece model with Marian's (sentencepiece's default) ids: unk 0, bos 1, eos 2; its pieces."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(words, k=rng.randint(2, 8))) for _ in range(300)]
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buffer, vocab_size=vocab_size, minloglevel=2
    )
    path.write_bytes(buffer.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(path))
    return [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]


def marian_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Word-by-word "translations" of random SRC_WORDS sentences: a task a tiny model half learns."""
    rng = random.Random(seed)
    lexicon = dict(zip(SRC_WORDS, TGT_WORDS * 2))
    sentences = [rng.choices(SRC_WORDS, k=rng.randint(1, 6)) for _ in range(n)]
    return [(" ".join(words), " ".join(lexicon[w] for w in words)) for words in sentences]


def _train_marian(model, tokenizer, steps: int, seed: int) -> None:
    """A few Adam steps on marian_pairs: outputs then differ between inputs and mostly end in EOS,
    which random weights (each step repeating its input token) never do."""
    rng = random.Random(seed)
    pairs = marian_pairs(256, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        enc = tokenizer(
            [s for s, _ in batch], text_target=[t for _, t in batch], return_tensors="pt", padding=True
        )
        enc["labels"][enc["labels"] == tokenizer.pad_token_id] = -100
        model(**enc).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def make_marian_dir(
    path: Path,
    *,
    activation: str = "swish",
    seed: int = 0,
    joint: bool = False,
    steps: int = 100,
    **config: Any,
) -> Path:
    """An OPUS-MT-shaped directory: a tiny MarianMTModel (random, then `steps` updates on
    marian_pairs), its tokenizer files, vocab.json as OPUS-MT's (</s> 0, <unk> 1, the pieces of both
    sentencepiece models, <pad> last); a random final_logits_bias, so that its mapping is tested."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    path.mkdir(parents=True)
    src_pieces = train_marian_spm(path / "source.spm", SRC_WORDS + ([] if not joint else TGT_WORDS))
    if joint:
        (path / "target.spm").write_bytes((path / "source.spm").read_bytes())
        tgt_pieces = src_pieces
    else:
        tgt_pieces = train_marian_spm(path / "target.spm", TGT_WORDS, vocab_size=36)
    pieces = ["</s>", "<unk>", *dict.fromkeys(src_pieces + tgt_pieces), "<pad>"]
    (path / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    pad = len(pieces) - 1
    settings = dict(
        vocab_size=len(pieces),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        activation_function=activation,
        scale_embedding=True,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        bad_words_ids=[[pad]],
    )
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**(settings | config)))
    tokenizer = MarianTokenizer(
        str(path / "source.spm"),
        str(path / "target.spm"),
        str(path / "vocab.json"),
        source_lang="de",
        target_lang="en",
    )
    _train_marian(model, tokenizer, steps, seed)
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_trained_model_dir(path: Path, steps: int = 150, seed: int = 0, **model: Any) -> Path:
    """A model directory as train writes it: params.yaml's model (at test size, `model` applied, dropout
    off) on a joint spm.model, after `steps` Adam updates on marian_pairs, so that its outputs vary."""
    path.mkdir(parents=True)
    pairs = marian_pairs(256, seed)
    rng = random.Random(seed)
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([s for pair in pairs for s in pair]),
        model_writer=buffer,
        vocab_size=60,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        user_defined_symbols=["<sep>"],
        minloglevel=2,
    )
    (path / "spm.model").write_bytes(buffer.getvalue())
    sp = spm.SentencePieceProcessor(model_file=str(path / "spm.model"))
    params = dataclasses.replace(BASE, model=tiny_model_params(max_positions=64, **model))
    torch.manual_seed(seed)
    net = build_model(params.model, sp.get_piece_size(), sp.get_piece_size())
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        src = _pad([[*sp.encode(s), EOS] for s, _ in batch])
        tgt = _pad([[BOS, *sp.encode(t), EOS] for _, t in batch])
        net(src, tgt[:, :-1], tgt[:, 1:], 0.1).backward()
        optimizer.step()
        optimizer.zero_grad()
    payload = checkpoint.model_payload(
        net.eval(), params, sp.get_piece_size(), sp.get_piece_size(), step=steps
    )
    checkpoint.save(path / checkpoint.MODEL_FILE, payload)
    (path / "params.yaml").write_text(yaml.safe_dump(params.to_dict(), sort_keys=False), encoding="utf-8")
    return path


def _pad(seqs: list[list[int]]) -> torch.Tensor:
    width = max(map(len, seqs))
    return torch.tensor([s + [0] * (width - len(s)) for s in seqs])
