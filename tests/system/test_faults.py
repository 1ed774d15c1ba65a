"""Bad input and faults: clear one-line errors, and nothing lost.

What other test files already provoke is not repeated here (see each section);
this file adds the faults that cross stages or processes: bad params through
every stage command and through `dvc exp run -S`, a hostile corpus through
download -> clean -> bpe -> binarize, an MLflow server that is down from the
start or stopped mid-training, and damaged model files met by the commands.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from pipeline import files
from pipeline import params as P
from pipeline.cli import cli
from pipeline.data.batching import ParallelData
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.stages import binarize, bpe, clean, download
from pipeline.stages.train import train
from pipeline.training.epochs import fitting_sentences
from pipeline.training.loop import Trainer
from pipeline.training.state import LAST
from tests.support.mlflow_server import free_port, start_server, stop_server, wait_healthy
from tests.support.models import make_corpus, make_model_dir, tiny_params, train_spm
from tests.support.repo import REPO

# --- params: refused by every stage before anything is written ----------------------------------

# (dotted key, bad value, the whole message after "Error: ")
BAD_PARAMS = [
    ("model.dropout", -0.1, "model.dropout: must be within [0, 1)"),
    ("model.d_model", 250, "model.d_model: 250 is not divisible by model.n_heads=4"),
    ("model.n_heads", "4", "model.n_heads: got '4'; expected a whole number"),
    (
        "bpe.joint",
        False,
        "model.tie_embeddings: 'all' ties source and target embeddings, which needs "
        "bpe.joint: true; use 'target' or 'none'",
    ),
    ("decode.beam", 0, "decode.beam: must be at least 1 (1 is greedy)"),
    (
        "decode.sampling.enabled",
        True,
        "decode.sampling.enabled: sampling draws one token a step and needs decode.beam=1, not 5; "
        "set decode.beam=1, or turn sampling off",
    ),
    ("train.learning_rate", 0.1, "train.learning_rate: unknown key; allowed keys here: device, precision, "),
]

# Each stage command that reads params.yaml, with its paths (all under the test's folder).
STAGE_ARGS = {
    "download": ["--out", "raw"],
    "clean": ["--raw", "raw", "--out", "clean"],
    "bpe": ["--clean", "clean", "--out", "bpe"],
    "binarize": ["--clean", "clean", "--bpe", "bpe", "--out", "bin"],
    "train": ["--bin", "bin", "--bpe", "bpe", "--out", "model", "--checkpoints", "ckpt", "--log", "log"],
    "decode": ["--model", "model", "--clean", "clean", "--out", "decode"],
    "report": [
        "--metrics",
        "m.json",
        "--train-log",
        "log",
        "--clean-stats",
        "s.json",
        "--raw",
        "raw",
        "--decode",
        "decode",
        "--out",
        "report.md",
        "--figures",
        "figures",
        "--model",
        "model",
    ],
}


def with_value(raw: dict, key: str, value: object) -> dict:
    *path, name = key.split(".")
    node = raw
    for part in path:
        node = node[part]
    node[name] = value
    return raw


@pytest.mark.parametrize("key, value, message", BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
def test_every_stage_refuses_bad_params_in_one_line_with_exit_2(tmp_path, monkeypatch, key, value, message):
    raw = with_value(yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8")), key, value)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for stage, args in STAGE_ARGS.items():
        result = CliRunner().invoke(cli, [stage, "--params", "params.yaml", *args])
        assert result.exit_code == 2, (stage, result.output)
        assert result.stdout == "" and "Traceback" not in result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"Error: {message}"), (stage, line)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"], f"{stage} wrote something"


def copy_repo(root: Path) -> Path:
    """The tracked files and pipeline/*.py in a fresh git repository, committed, without outputs
    (dvc.lock and the committed reports/ of the default run)."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    names = set(listed.stdout.split()) | {str(p.relative_to(REPO)) for p in (REPO / "pipeline").rglob("*.py")}
    for name in names:
        if (REPO / name).is_file() and name != "dvc.lock" and not name.startswith("reports/"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "copy"]):
        subprocess.run(git + args, cwd=root, check=True, capture_output=True)
    return root


@pytest.mark.slow
def test_dvc_exp_run_with_a_bad_value_stops_at_the_first_stage(tmp_path):
    repo = copy_repo(tmp_path / "repo")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("MLFLOW_TRACKING_URI", None)
    result = subprocess.run(
        ["dvc", "exp", "run", "-S", "model.dropout=-0.1"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Error: model.dropout: must be within [0, 1)" in output.splitlines(), output
    assert "Traceback" not in output
    assert "failed to reproduce 'download'" in output and "exited with 2" in output
    assert "Running stage 'clean'" not in output
    written = list((repo / "data").rglob("*")) if (repo / "data").is_dir() else []
    assert written == [], "a stage ran"
    assert not (repo / "dvc.lock").exists() and not (repo / "reports").exists()


# --- a hostile corpus through download -> clean -> bpe -> binarize ----------------------------

MB = 1_000_000
WORDS = {
    "de": "der die das hund katze läuft über straße groß weiß".split(),
    "en": "the dog cat runs over street big white small house".split(),
    "ar": "\u0645\u0631\u062d\u0628\u0627 \u0643\u062a\u0627\u0628 \u0628\u064a\u062a".split(),
    "he": "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd".split(),
    "ja": "日本語 東京 猫".split(),
    "hi": "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e".split(),
    "emoji": ["\U0001f600", "\U0001f469\u200d\U0001f4bb", "\U0001f1e9\U0001f1ea"],
}
# Dirt put into a line (each a str inserted between words): none may split, merge or lose a line.
DIRT = [
    "\x00",
    "\x1b[31m",
    "\x07",
    "\x7f",
    "\t",
    "\x0b",
    "\x0c",
    "\r",
    "\x1c",
    "\x1d",
    "\x1e",
    "\x1f",
    "\x85",
    "\u2028",
    "\u2029",
    "\u00a0",
    "\u3000",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u200e",
    "\u202e",
    "\u2066",
    "\ufeff",
    "\u00ad",
    "e\u0301",
    "\ufffd",
]


def nasty_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Line-aligned pairs; pair i carries the marker m<i> on both sides, so alignment can be checked."""
    rng = random.Random(seed)
    scripts = list(WORDS)
    pairs = []
    for i in range(n):
        sides = []
        for _ in range(2):
            words = [rng.choice(WORDS[rng.choice(scripts)]) for _ in range(rng.randint(1, 6))]
            for _ in range(rng.randint(0, 3)):
                words.insert(rng.randrange(len(words) + 1), rng.choice(DIRT))
            words.insert(rng.randrange(len(words) + 1), f"m{i}")
            sides.append(" ".join(words))
        pairs.append((sides[0], sides[1]))
    return pairs


def write_side(path: Path, lines: list[str], *, bom: bool, crlf: bool) -> None:
    """Encode lines as a user's file would be: optionally with a BOM and CRLF line ends."""
    end = "\r\n" if crlf else "\n"
    path.write_bytes(("\ufeff" if bom else "").encode() + "".join(line + end for line in lines).encode())


def marker(line: str) -> str | None:
    found = [w for w in line.split() if w.startswith("m") and w[1:].isdigit()]
    return found[0] if found else None


def test_a_hostile_corpus_goes_through_every_data_stage_aligned(tmp_path):
    splits = {"train": nasty_pairs(300, 0), "val": nasty_pairs(40, 1), "test": nasty_pairs(40, 2)}
    # Blank and whitespace-only lines, and lines that only dirt fills.
    splits["train"][5] = ("", "")
    splits["train"][6] = ("  \t ", "m6 something")
    splits["val"][3] = ("\u200b\x00", "m3")
    splits["test"][4] = ("", "")
    # 1 MB lines: many words (dropped from train as too long; kept whole in test), and one
    # 1 MB "word" on both sides, which passes clean's filters and reaches bpe and binarize.
    splits["train"][10] = ("m10 " + "wort " * (MB // 5), "m10 word")
    splits["train"][11] = ("m11 " + "a" * MB, "m11 " + "e" * MB)
    splits["test"][7] = ("m7 " + "wort " * (MB // 5), "m7 word")

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    raw_params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw_params["data"].update(train=["hostile-train"], val=["hostile-val"], test=["hostile-test"])
    raw_params["data"]["sources"] = {}
    for split, pairs in splits.items():
        src, tgt = corpus / f"{split}.de", corpus / f"{split}.en"
        write_side(src, [s for s, _ in pairs], bom=True, crlf=True)  # a Windows editor's file
        write_side(tgt, [t for _, t in pairs], bom=False, crlf=False)
        raw_params["data"]["sources"][f"hostile-{split}"] = {"src": str(src), "tgt": str(tgt)}
    params = P.from_dict(raw_params)
    params = dataclasses.replace(params, bpe=dataclasses.replace(params.bpe, vocab_size=300))

    raw, clean_dir, bpe_dir, bin_dir = (tmp_path / name for name in ("raw", "clean", "bpe", "bin"))
    manifest = download.download(params.data, raw)
    stems = {"train": "train", "val": "val", "test": "test/hostile-test"}  # data/raw and data/clean layout
    for split, pairs in splits.items():
        assert [s["lines"] for s in manifest["splits"][split]] == [len(pairs)]
        # every raw line is the line written: only the BOM and the line ends are gone (in the LF
        # file a CR that ends a line makes a CRLF, which download's policy takes as a line end)
        assert files.read_lines(raw / f"{stems[split]}.src") == [s for s, _ in pairs]
        tgt = [t.removesuffix("\r") for _, t in pairs]
        tgt[0] = tgt[0].removeprefix("\ufeff")
        assert files.read_lines(raw / f"{stems[split]}.tgt") == tgt

    stats = clean.clean(params.clean, raw, clean_dir)
    stats["test"] = stats["test"]["hostile-test"]
    for split, pairs in splits.items():
        s = stats[split]
        assert s["lines_in"] == len(pairs)
        assert s["lines_out"] == len(pairs) - sum(s["dropped"].values())
        src = files.read_lines(clean_dir / f"{stems[split]}.src")
        tgt = files.read_lines(clean_dir / f"{stems[split]}.tgt")
        assert len(src) == len(tgt) == s["lines_out"]
        assert all(marker(a) == marker(b) for a, b in zip(src, tgt) if marker(a) and marker(b))  # aligned
        for line in src + tgt:
            assert not any(unicodedata.category(c) == "Cc" for c in line) and line == " ".join(line.split())
        if split != "train":
            assert s["lines_out"] == len(pairs)  # val and test lose no line, not even a blank one
    dropped = stats["train"]["dropped"]
    assert dropped["empty"] >= 2 and dropped["too_long"] >= 1
    for side in ("src", "tgt"):  # the dirt was counted, not just removed
        assert stats["train"]["normalized"][side]["control_chars"] > 0
    assert files.read_lines(clean_dir / "test" / "hostile-test.src")[7].startswith("m7 wort wort")
    assert any(line.startswith("m11 aaa") for line in files.read_lines(clean_dir / "train.src"))

    bpe.train_bpe(params.bpe, clean_dir, bpe_dir)  # sentencepiece skips the 1 MB "word" when training
    meta = binarize.binarize(clean_dir, bpe_dir, bin_dir)
    for split in ("train", "val"):  # test sets are not binarized
        n = stats[split]["lines_out"]
        assert meta["splits"][split]["sentences"] == n
        data = ParallelData.load(bin_dir, split)
        assert len(data) == n

    # ... and the next stage: train drops the sentences its positions cannot hold, by itself.
    train_data = ParallelData.load(bin_dir, "train")
    fitting = fitting_sentences(train_data, params.model)
    assert 1 <= len(train_data) - len(fitting) <= 3
    huge = max(range(len(train_data)), key=lambda i: train_data.src.lengths[i])
    assert huge not in set(fitting.tolist())


# --- training with MLflow down ----------------------------------------------------------------------


def offline_records(directory: Path) -> list[dict]:
    from pipeline.tracking.offline import OFFLINE_FILE

    return [json.loads(line) for line in (directory / OFFLINE_FILE).read_text(encoding="utf-8").splitlines()]


def mlflow_warnings(err: str) -> int:
    return sum(line.startswith("Warning: MLflow") for line in err.splitlines())


@pytest.mark.slow
def test_training_goes_on_when_mlflow_is_unreachable_from_the_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    paths = make_corpus(tmp_path, n_train=60)
    summary = train(tiny_params(max_steps=8, validate_every=4), paths)
    assert summary["steps"] == 8 and summary["stopped"] == "max_steps"
    assert mlflow_warnings(capsys.readouterr().err) == 1
    records = offline_records(paths.ckpt_dir)
    metrics = [r for r in records if r["op"] == "metrics"]
    assert {r["step"] for r in metrics if "val_loss" in r["metrics"]} == {4, 8}
    assert {r["step"] for r in metrics if "train_loss" in r["metrics"]} == {2, 4, 6, 8}
    assert [r["op"] for r in records][:2] == ["start", "params"] and records[-1]["op"] == "end"
    run_file = json.loads((paths.out_dir / "mlflow_run.json").read_text())
    assert run_file["run_id"] is None


@pytest.mark.slow
def test_training_goes_on_when_the_mlflow_server_stops_mid_run(tmp_path, monkeypatch, capsys):
    """A real `mlflow server`, stopped right after the first validation: training finishes, the
    later metrics are kept in the offline file, the user is told once."""
    from mlflow import MlflowClient

    port = free_port()
    server = start_server(tmp_path, port)
    try:
        if not wait_healthy(server, port, limit_s=60):
            pytest.skip("mlflow server did not answer /health within 60 s")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
        monkeypatch.delenv("DVC_EXP_NAME", raising=False)
        monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
        real_validate = Trainer.validate

        def validate_then_stop_the_server(self, epoch):
            improved = real_validate(self, epoch)  # logs val_loss to the server first
            if server.poll() is None:
                assert self.observer.online
                # The system-metrics thread's own calls retry briefly too: with MLflow's 7 retries
                # (backoff to 128 s) it held up the run's end by 4 minutes once the server was gone.
                assert os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES") == "1"
                stop_server(server)
            return improved

        monkeypatch.setattr(Trainer, "validate", validate_then_stop_the_server)
        paths = make_corpus(tmp_path / "run", n_train=60)
        summary = train(tiny_params(max_steps=12, validate_every=4), paths)

        assert summary["steps"] == 12 and server.poll() is not None
        assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # the process's setting back
        assert mlflow_warnings(capsys.readouterr().err) == 1
        records = offline_records(paths.ckpt_dir)
        run_id = json.loads((paths.out_dir / "mlflow_run.json").read_text())["run_id"]
        uri = f"http://127.0.0.1:{port}"
        assert run_id and records[0] == {"op": "resume", "run_id": run_id, "tracking_uri": uri}
        metrics = [r for r in records if r["op"] == "metrics"]
        assert {r["step"] for r in metrics if "val_loss" in r["metrics"]} == {8, 12}
        assert {r["step"] for r in metrics if "train_loss" in r["metrics"]} == {6, 8, 10, 12}
        assert records[-1]["op"] == "end" and records[-1]["status"] == "FINISHED"
        # What reached the server before it stopped is in its database.
        stored = MlflowClient(f"sqlite:///{tmp_path / 's.db'}")
        assert [(m.step, m.key) for m in stored.get_metric_history(run_id, "val_loss")] == [(4, "val_loss")]
        assert sorted(m.step for m in stored.get_metric_history(run_id, "train_loss")) == [2, 4]
    finally:
        stop_server(server)


# --- damaged model files met by the commands -------------------------------------------------------


@pytest.fixture
def model_dir(tmp_path) -> Path:

    return make_model_dir(tmp_path / "model")


class LeavesAMark:
    """Pickled, it runs code when loaded: what weights_only must refuse."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "the checkpoint ran code"))


def translate_cli(model_dir: Path, stdin: bytes = b"ein hund\n"):
    return CliRunner().invoke(cli, ["translate", "--model", str(model_dir), "--device", "cpu"], input=stdin)


def test_translate_refuses_a_truncated_model_in_one_line(model_dir):
    path = model_dir / checkpoint.MODEL_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = translate_cli(model_dir)
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: {path}: truncated or corrupt checkpoint")
    assert result.stdout == ""


def test_translate_refuses_a_model_carrying_code_and_never_runs_it(model_dir, tmp_path):
    mark = tmp_path / "mark"
    payload = checkpoint.load(model_dir / checkpoint.MODEL_FILE)
    torch.save({**payload, "extra": LeavesAMark(mark)}, model_dir / checkpoint.MODEL_FILE)
    result = translate_cli(model_dir)
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    assert "refused, it holds more than tensors and plain values" in line
    assert not mark.exists()


def test_translate_refuses_spm_models_of_another_run(model_dir, tmp_path):

    train_spm(model_dir / "spm.model", vocab_size=36, seed=1)
    result = translate_cli(model_dir)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "come from different runs" in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_corrupt_training_state_is_a_user_error_naming_it(tmp_path):
    paths = make_corpus(tmp_path, n_train=40)
    paths.ckpt_dir.mkdir()
    (paths.ckpt_dir / LAST).write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(UserError, match="truncated or corrupt checkpoint") as e:
        train(tiny_params(max_steps=2), paths, tracking=False)
    assert str(paths.ckpt_dir / LAST) in e.value.message and "\n" not in e.value.message
    assert not paths.out_dir.exists()
