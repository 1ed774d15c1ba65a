"""Several target languages in one model, chosen by tag (pipeline/data/tags.py), end to end through the
stages' functions: two synthetic languages, xa and xb, each a word-for-word rendering of the same
English-like source words with a lexicon of its own. Only the tag tells the model which to write, so a
model that translates each test set into its own lexicon has learned to read the tag."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pipeline import params as P
from pipeline.data import planning
from pipeline.data.vocab import Vocab
from pipeline.decoding.translator import Translator
from pipeline.errors import ParamsError, UserError
from pipeline.stages.binarize import binarize
from pipeline.stages.bpe import train_bpe
from pipeline.stages.clean import clean
from pipeline.stages.download import download
from pipeline.stages.train import train
from pipeline.training.state import Paths
from tests.support.models import tiny_raw

pytestmark = pytest.mark.slow

SOURCE = [f"w{c}" for c in "abcdefghijkl"]
LEXICON = {
    "xa": dict(zip(SOURCE, ["ka", "ke", "ki", "ko", "ku", "kab", "keb", "kib", "kob", "kub", "kad", "ked"])),
    "xb": dict(zip(SOURCE, ["zu", "zo", "zi", "ze", "za", "zur", "zor", "zir", "zer", "zar", "zut", "zot"])),
}


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(SOURCE, k=rng.randint(2, 6))) for _ in range(n)]


def write_pair(root: Path, name: str, lang: str, lines: list[str]) -> dict[str, str]:
    src, tgt = root / f"{name}.en", root / f"{name}.{lang}"
    src.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    rendered = [" ".join(LEXICON[lang][w] for w in line.split()) for line in lines]
    tgt.write_text("".join(f"{line}\n" for line in rendered), encoding="utf-8")
    return {"src": str(src), "tgt": str(tgt)}


def data_section(root: Path) -> dict:
    """en -> xa by default; the xb sources say so with tgt_lang."""
    sources = {}
    for lang, seed in (("xa", 1), ("xb", 2)):
        sources[f"train-{lang}"] = write_pair(root, f"train-{lang}", lang, sentences(600, seed))
        sources[f"test-{lang}"] = write_pair(root, f"test-{lang}", lang, sentences(30, seed + 10))
    sources["val-xa"] = write_pair(root, "val-xa", "xa", sentences(20, 5))
    for name in ("train-xb", "test-xb"):
        sources[name]["tgt_lang"] = "xb"
    return dict(
        src_lang="en",
        tgt_lang="xa",
        train=["train-xa", "train-xb"],
        val=["val-xa"],
        test=["test-xa", "test-xb"],
        sources=sources,
        workers=1,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, P.Params]:
    root = tmp_path_factory.mktemp("multilingual")
    raw = tiny_raw(
        dict(d_model=64, n_heads=4, d_ff=128, dropout=0.0),
        lr=5e-3,
        warmup_steps=30,
        max_tokens=256,
        max_epochs=15,
        validate_every=0,
        log_every=20,
        label_smoothing=0.0,
    )
    raw["data"].update(data_section(root))
    raw["bpe"]["vocab_size"] = 60
    params = P.from_dict(raw)
    download(params.data, root / "raw")
    clean(params.clean, root / "raw", root / "clean")
    train_bpe(params.bpe, root / "clean", root / "bpe")
    binarize(root / "clean", root / "bpe", root / "bin")
    paths = Paths(root / "bin", root / "bpe", root / "model", root / "ckpt", root / "log", root / "clean")
    train(params, paths, tracking=False)
    return root, params


def test_every_source_line_carries_its_target_languages_tag(run):
    root, _ = run
    manifest = json.loads((root / "raw/manifest.json").read_text(encoding="utf-8"))
    assert manifest["tags"] == ["<2xa>", "<2xb>"]
    train_src = (root / "clean/train.src").read_text(encoding="utf-8").splitlines()
    assert {line.split()[0] for line in train_src} == {"<2xa>", "<2xb>"}
    for lang in ("xa", "xb"):
        test_src = (root / f"clean/test/test-{lang}.src").read_text(encoding="utf-8").splitlines()
        assert all(line.startswith(f"<2{lang}> w") for line in test_src)
        assert f"<2{lang}>" not in (root / f"clean/test/test-{lang}.tgt").read_text(encoding="utf-8")
    meta = json.loads((root / "bin/meta.json").read_text(encoding="utf-8"))
    # each train source keeps its pair, which train.source_temperature samples over
    assert [(s["name"], s["pair"]) for s in meta["sources"]] == [("train-xa", "en-xa"), ("train-xb", "en-xb")]
    vocab = Vocab.load(root / "bpe")
    assert vocab.src_pieces(vocab.encode_src(["<2xb> wa wb"])[0])[:2] == ["▁", "<2xb>"]  # one piece


def test_the_tag_chooses_the_language_it_writes(run):
    root, _ = run
    translator = Translator.from_dir(root / "model", device="cpu", workers=1)
    assert translator.target_languages == ["xa", "xb"]
    source = sentences(30, 99)
    for lang in ("xa", "xb"):
        out = translator.translate(source, beam=1, tgt_lang=lang)
        expected = [" ".join(LEXICON[lang][w] for w in line.split()) for line in source]
        words = [w for line in out for w in line.split()]
        assert sum(w in LEXICON[lang].values() for w in words) > 0.9 * len(words), (lang, out[:3])
        assert sum(o == e for o, e in zip(out, expected)) > 0.6 * len(source), (lang, out[:3], expected[:3])
    # a line's own tag wins over none given
    tagged = translator.translate(["<2xb> wa wb"], beam=1)
    assert tagged == translator.translate(["wa wb"], beam=1, tgt_lang="xb")
    assert translator.translate(["<2xb>", "  "], beam=1, tgt_lang="xa") == ["", ""]  # nothing to translate


def test_a_missing_or_unknown_target_language_is_refused(run):
    root, _ = run
    translator = Translator.from_dir(root / "model", device="cpu", workers=1)
    with pytest.raises(UserError, match=r"translates into xa, xb: say which .*--tgt-lang xa"):
        translator.translate(["wa wb"])
    with pytest.raises(UserError, match=r"'fr'.* translates into xa, xb only"):
        translator.translate(["wa wb"], tgt_lang="fr")


def test_a_test_set_in_a_language_no_train_source_has_is_refused(tmp_path):
    raw = tiny_raw()
    raw["data"].update(data_section(tmp_path))
    raw["data"]["sources"]["test-xb"]["tgt_lang"] = "xc"
    with pytest.raises(ParamsError, match=r"data.test\[1\]: test-xb translates into 'xc', which no train"):
        planning.plan_sources(P.from_dict(raw).data)
    raw["data"]["sources"]["test-xb"]["tgt_lang"] = "x!"
    with pytest.raises(ParamsError, match=r"data.sources.test-xb.tgt_lang: 'x!' is no language code"):
        P.from_dict(raw)


def test_the_translate_command_takes_the_target_language(run, tmp_path):
    from click.testing import CliRunner

    from pipeline.stages.translate import command

    root, _ = run
    source = tmp_path / "in.txt"
    source.write_text("wa wb wc\n\nwd\n", encoding="utf-8")
    args = ["--model", str(root / "model"), "--input", str(source), "--beam", "1", "--workers", "1"]
    done = CliRunner().invoke(command, [*args, "--tgt-lang", "xb"])
    assert done.exit_code == 0, done.output
    assert done.output.splitlines() == Translator.from_dir(root / "model", device="cpu", workers=1).translate(
        ["wa wb wc", "", "wd"], beam=1, tgt_lang="xb"
    )
    out = tmp_path / "out.txt"
    for bad, message in (["--tgt-lang", "fr"], "translates into xa, xb only"), ([], "say which"):
        done = CliRunner().invoke(command, [*args, *bad, "--output", str(out)])
        assert done.exit_code != 0 and message in done.output and not out.exists(), done.output


def test_held_out_lines_come_from_the_main_pair_and_are_those_it_would_hold_out_alone(tmp_path):
    raw = tiny_raw()
    raw["data"].update(data_section(tmp_path), val=[], heldout_val=20)
    raw["data"]["train"] = ["train-xb", "train-xa"]  # the other pair first: the same lines all the same
    both = P.from_dict(raw).data
    download(both, tmp_path / "both")
    val = (tmp_path / "both/val.src").read_text(encoding="utf-8").splitlines()
    assert len(val) == 20 and all(line.startswith("<2xa> ") for line in val)
    raw["data"].update(train=["train-xa"], test=["test-xa"])
    download(P.from_dict(raw).data, tmp_path / "alone")
    alone = (tmp_path / "alone/val.src").read_text(encoding="utf-8").splitlines()
    assert [line.removeprefix("<2xa> ") for line in val] == alone


def test_the_mlflow_model_takes_the_target_language_as_a_param(run):
    from types import SimpleNamespace

    from mlflow.exceptions import MlflowException

    from pipeline.serving import pyfunc

    root, _ = run
    served = pyfunc.TranslatorModel()
    served.load_context(SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(root / "model")}))
    translator = Translator.from_dir(root / "model", device="cpu", workers=1)
    lines = ["wa wb wc", "wd we"]
    for lang in ("xa", "xb"):
        got = served.predict(None, lines, params={"tgt_lang": lang})
        assert got == translator.translate(lines, tgt_lang=lang)
    with pytest.raises(MlflowException, match="say which"):  # answered 400 when served
        served.predict(None, lines, params={})


def test_a_child_of_a_tagged_parent_keeps_its_tags_for_its_one_target(run, tmp_path):
    from pipeline.stages.bpe import copy_parent

    root, params = run
    init_from = str(root / "model")
    raw = params.to_dict()
    raw["data"].update(tgt_lang="xb", train=["train-xb"], val=[], heldout_val=20, test=["test-xb"])
    # a fine-tune's rate, 5x below the parent's: at the parent's own, one epoch's updates undid half of
    # what it knew on an AVX2 CPU (exact lines 25 -> 11 of 30), a test of the optimizer, not of the tags
    raw["train"].update(init_from=init_from, max_epochs=1, lr=1e-3)
    child = P.from_dict(raw)
    manifest = download(child.data, tmp_path / "raw", init_from)
    assert manifest["tags"] == ["<2xb>"]  # one target, tagged as its parent learned it
    for split in ("train", "val", "test/test-xb"):
        lines = (tmp_path / f"raw/{split}.src").read_text(encoding="utf-8").splitlines()
        assert lines and all(line.startswith("<2xb> w") for line in lines)
    clean(child.clean, tmp_path / "raw", tmp_path / "clean")
    copy_parent(child, tmp_path / "bpe")
    binarize(tmp_path / "clean", tmp_path / "bpe", tmp_path / "bin")
    paths = Paths(*(tmp_path / n for n in ("bin", "bpe", "model", "ckpt", "log", "clean")))
    train(child, paths, tracking=False)
    translator = Translator.from_dir(tmp_path / "model", device="cpu", workers=1)
    source = (tmp_path / "clean/test/test-xb.src").read_text(encoding="utf-8").splitlines()
    out = translator.translate(source, beam=1)  # tagged lines, as the decode stage reads them
    expected = (tmp_path / "clean/test/test-xb.tgt").read_text(encoding="utf-8").splitlines()
    assert all(w in LEXICON["xb"].values() for line in out for w in line.split()), out[:3]  # the tag, read
    assert sum(o == e for o, e in zip(out, expected)) > 0.6 * len(source), (out[:3], expected[:3])

    # a target the parent has no tag for is refused before anything is written
    for name in ("train-xb", "test-xb"):
        raw["data"]["sources"][name]["tgt_lang"] = "xc"
    raw["data"]["tgt_lang"] = "xc"
    refused = r"xa, xb \(its vocabulary's tags\).*into xc too, which it has no tag"
    with pytest.raises(ParamsError, match=refused):
        download(P.from_dict(raw).data, tmp_path / "raw-xc", init_from)
    assert not (tmp_path / "raw-xc").exists()
