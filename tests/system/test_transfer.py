"""Fine-tuning an OPUS-MT model through the pipeline, end to end (docs/transfer.md): a tiny
MarianMTModel built with transformers, `import-hf`, then `dvc repro train` with train.init_from on a
synthetic corpus of the task it half learned. The child starts at its parent's loss, improves on
it, translates, and names its parent in its model directory and its MLflow run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from pipeline import lineage
from pipeline.data.batching import ParallelData, collate, token_batches
from pipeline.decoding.translator import Translator
from tests.support.hf import TGT_WORDS, make_marian_dir, marian_pairs
from tests.support.repo import REPO

pytestmark = pytest.mark.slow
pytest.importorskip("transformers")

PARENT = "data/opus-mt-de-en"


def run(args: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def copy_repo(root: Path) -> None:
    """The project's tracked files (and its modules), without its data and DVC lock, in a fresh git repo."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    for name in set(tracked) | {str(p.relative_to(REPO)) for p in (REPO / "pipeline").rglob("*.py")}:
        if (REPO / name).is_file() and name != "dvc.lock":
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    run(["git", "init", "-q"], root)


def child_params(corpus: Path, imported: Path) -> dict:
    """The repository's params, the parent's model section, and a few fine-tuning updates."""
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["data"].update(train=["pairs"], val=[], test=[], heldout_val=40, heldout_test=20)
    raw["data"]["sources"] = {"pairs": {"src": str(corpus / "pairs.de"), "tgt": str(corpus / "pairs.en")}}
    raw["model"] = yaml.safe_load((imported / "params.yaml").read_text(encoding="utf-8"))["model"]
    raw["train"].update(
        init_from=PARENT,
        precision="fp32",
        max_tokens=300,
        lr=5e-4,
        warmup_steps=1,
        max_steps=24,
        validate_every=8,
        log_every=1,
        label_smoothing=0.0,
        val_bleu=False,
        early_stop_metric="loss",
        threads=1,
    )
    return raw


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A copy of the project that imported a tiny OPUS-MT model and fine-tuned it with `dvc repro train`."""
    root = tmp_path_factory.mktemp("transfer")
    marian = make_marian_dir(root / "hub" / "opus-mt-de-en")
    corpus = root / "corpus"
    corpus.mkdir()
    pairs = marian_pairs(500, seed=3)
    (corpus / "pairs.de").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (corpus / "pairs.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    repo = root / "repo"
    copy_repo(repo)
    run([sys.executable, "-m", "pipeline", "import-hf", str(marian), "--out", PARENT], repo)
    (repo / "params.yaml").write_text(yaml.safe_dump(child_params(corpus, repo / PARENT)), encoding="utf-8")
    run(["dvc", "repro", "train"], repo)
    return repo


def val_loss(model_dir: Path, bin_dir: Path) -> float:
    """A model directory's NLL per target token on the val split, as validation computes it."""
    model = Translator.from_dir(model_dir, device="cpu", workers=1).model.eval()
    data = ParallelData.load(bin_dir, "val")
    batches = token_batches(data.src.lengths, data.tgt.lengths, 300, shuffle=False, seed=0, epoch=0)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for ids in batches:
            batch = collate(data, ids)
            total += float(model(batch.src, batch.tgt_in, batch.tgt_out, smoothing=0.0))
            tokens += batch.n_tgt_tokens
    return total / tokens


def column(path: Path, name: str) -> list[float]:
    header, *rows = (line.split("\t") for line in path.read_text(encoding="utf-8").splitlines())
    return [float(row[header.index(name)]) for row in rows]


def test_the_parents_vocabulary_is_copied_and_the_lineage_recorded(repo: Path):
    parent = repo / PARENT
    for name in ("src.model", "tgt.model", "vocab.json"):
        assert (repo / "data/bpe" / name).read_bytes() == (parent / name).read_bytes()
        assert (repo / "data/model" / name).read_bytes() == (parent / name).read_bytes()
    record = json.loads((repo / "data/model" / lineage.PARENT_FILE).read_text(encoding="utf-8"))
    assert record["path"] == PARENT and record["model_sha256"] == lineage.sha256(parent / "model.pt")
    assert record["imported_from"].endswith("opus-mt-de-en")


def test_the_child_starts_at_its_parents_loss_and_improves_on_it(repo: Path):
    parent_loss = val_loss(repo / PARENT, repo / "data/bin")
    train_losses = column(repo / "reports/train/steps.tsv", "loss")
    vocab = json.loads((repo / PARENT / "vocab.json").read_text(encoding="utf-8"))
    assert train_losses[0] < 0.6 * math.log(len(vocab))  # a model from scratch starts near log V
    assert abs(train_losses[0] - parent_loss) < 0.5  # the first update's loss is the parent's weights'
    val_losses = column(repo / "reports/train/valid.tsv", "val_loss")
    assert val_losses == sorted(val_losses, reverse=True) and val_losses[-1] < parent_loss
    assert val_loss(repo / "data/model", repo / "data/bin") == pytest.approx(min(val_losses), rel=1e-4)


def test_the_child_translates(repo: Path):
    lines = "".join(s + "\n" for s, _ in marian_pairs(10, seed=11))
    done = run([sys.executable, "-m", "pipeline", "translate", "--model", "data/model"], repo, input=lines)
    words = done.stdout.split()
    assert len(done.stdout.splitlines()) == 10
    assert sum(w in TGT_WORDS for w in words) > 0.8 * len(words)


def test_the_mlflow_run_names_the_parent(repo: Path):
    import mlflow

    run_file = json.loads((repo / "data/model/mlflow_run.json").read_text(encoding="utf-8"))
    found = mlflow.MlflowClient(run_file["tracking_uri"]).get_run(run_file["run_id"]).data
    assert found.params["train.init_from"] == PARENT
    assert found.tags["parent"] == PARENT
    assert found.tags["parent_model_sha256"] == lineage.sha256(repo / PARENT / "model.pt")
    assert found.tags["parent_imported_from"].endswith("opus-mt-de-en")


def test_another_parent_reruns_the_bpe_stage(repo: Path):
    saved = (repo / "params.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(saved)
    raw["train"]["init_from"] = None
    (repo / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    try:
        status = json.loads(run(["dvc", "status", "--json"], repo).stdout)
    finally:
        (repo / "params.yaml").write_text(saved, encoding="utf-8")
    changed = {k: v for entry in status["bpe"] if isinstance(entry, dict) for k, v in entry.items()}
    assert "train.init_from" in changed["changed deps"]["params.yaml"]
