"""Back-translation as DVC stages (issue 27): `dvc repro` on tiny data with it on, in a copy of the repo.

The reverse stage trains a tiny en->de model on the bitext swapped; backtranslate samples
translations of target-language text that is not in the bitext (a file of one side, plus lines of
a test set's references, which decontamination must drop) into synthetic pairs tagged <BT>; clean
appends them to the bitext as the source `backtranslated`. Then: a second `dvc repro` reruns
nothing, and a change to the forward model's settings leaves the reverse model alone.
"""

import hashlib
import json
from pathlib import Path

import pytest
import sentencepiece as spm
import yaml

from pipeline import files
from tests.system.test_dvc_pipeline import (
    dvc_status,
    make_test_sets,
    reproduced_copy,
    run,
    tiny_params,
    write_corpus,
)

pytestmark = pytest.mark.slow

LEAKED = 5  # lines of a test set's references put into the monolingual text


def bt_params(src: Path, tgt: Path, tests: dict, mono: Path) -> dict:
    raw = tiny_params(src, tgt, tests)
    raw["data"]["sources"]["news"] = {"tgt": str(mono)}  # text of one side: monolingual
    bt = raw["backtranslation"]
    bt.update(enabled=True, mono=["news"])
    bt["decode"]["batch_tokens"] = 400
    reverse = bt["reverse"]
    reverse["bpe"]["vocab_size"] = 60
    reverse["model"].update(d_model=32, n_heads=2, d_ff=64, n_layers=1, dropout=0.0, attention_dropout=0.0)
    reverse["train"].update(
        precision="fp32", max_tokens=400, max_epochs=2, warmup_steps=10, lr=0.003, log_every=5, threads=1
    )
    return raw


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A git + DVC copy of the project with tiny params and back-translation on, after `dvc repro`."""
    root = tmp_path_factory.mktemp("bt") / "repo"
    src, tgt = write_corpus(root.parent / "corpus", n=600, seed=0)
    tests = make_test_sets(root.parent / "tests")
    _, mono = write_corpus(root.parent / "mono", n=200, seed=7)
    leaked = files.read_lines(tests["plain"]["tgt"])[:LEAKED]
    mono.write_text(mono.read_text() + "".join(f"{line}\n" for line in leaked))
    return reproduced_copy(root, bt_params(src, tgt, tests, mono))


def test_the_reverse_model_translates_the_other_way(repo):
    saved = yaml.safe_load((repo / "data/reverse/params.yaml").read_text())
    assert (saved["data"]["src_lang"], saved["data"]["tgt_lang"]) == ("en", "de")
    assert saved["model"]["d_model"] == 32 and saved["bpe"]["vocab_size"] == 60  # its own settings
    work = repo / "data/reverse-work/raw"
    assert files.read_lines(work / "train.src") == files.read_lines(repo / "data/raw/train.tgt")
    assert files.read_lines(work / "train.tgt") == files.read_lines(repo / "data/raw/train.src")
    assert json.loads((repo / "reports/reverse/summary.json").read_text())["steps"] > 0


def test_synthetic_pairs_are_a_tagged_train_source_through_clean(repo):
    src = files.read_lines(repo / "data/bt/train.src")
    tgt = files.read_lines(repo / "data/bt/train.tgt")
    assert len(src) == len(tgt) > 150 and all(line.startswith("<BT> ") for line in src)
    stats = json.loads((repo / "data/clean/stats.json").read_text())
    synthetic = stats["train"]["sources"]["backtranslated"]
    assert synthetic["lines_in"] == len(src)
    assert synthetic["dropped"]["heldout_overlap"] >= LEAKED  # decontaminated like real pairs
    references = set(files.read_lines(repo / "data/raw/test/plain.tgt"))
    assert not references & set(files.read_lines(repo / "data/clean/train.tgt"))
    meta = json.loads((repo / "data/bin/meta.json").read_text())
    assert [s["name"] for s in meta["sources"]] == ["synthetic", "backtranslated"]
    sp = spm.SentencePieceProcessor(model_file=str(repo / "data/bpe/spm.model"))
    assert "<BT>" in sp.encode("<BT> Eins", out_type=str)[:2]  # one piece, never split


def test_a_second_repro_reruns_nothing(repo):
    assert dvc_status(repo) == {}
    done = run(["dvc", "repro"], repo)
    assert "Running stage" not in done.stdout


def test_a_forward_model_change_leaves_the_reverse_model_alone(repo):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["model"]["n_layers"] = 2
    params["train"]["lr"] = 0.002
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        changed = dvc_status(repo)
        assert "train" in changed
        assert "reverse" not in changed and "backtranslate" not in changed and "clean" not in changed
        params["backtranslation"]["decode"]["sampling"]["seed"] = 2  # other samples: the same reverse model
        (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        changed = dvc_status(repo)
        assert "backtranslate" in changed and "reverse" not in changed
    finally:
        run(["git", "checkout", "params.yaml"], repo)


def test_a_rerun_of_reverse_keeps_its_corpus_and_trains_no_further(repo):
    """What `dvc repro` does after a kill: the swapped corpus is kept (the resumed training needs it
    identical) and a finished training only rebuilds its model directory."""
    model = repo / "data/reverse/model.pt"
    meta = repo / "data/reverse-work/bin/meta.json"
    before = (hashlib.sha256(model.read_bytes()).hexdigest(), meta.stat().st_mtime_ns)
    args = ["--params", "params.yaml", "--raw", "data/raw", "--work", "data/reverse-work"]
    done = run(
        ["python", "-m", "pipeline", "reverse", *args, "--out", "data/reverse", "--log", "reports/reverse"],
        repo,
    )
    assert "the swapped corpus in data/reverse-work is up to date" in done.stderr
    assert (hashlib.sha256(model.read_bytes()).hexdigest(), meta.stat().st_mtime_ns) == before
