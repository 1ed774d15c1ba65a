"""Stage bpe: special ids, training split only, joint/separate, determinism, errors; with
train.init_from, the parent's model(s) copied with a record of the parent, or refused before writing."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import random
from pathlib import Path

import pytest
import sentencepiece as spm
import yaml
from click.testing import CliRunner
from sentencepiece import sentencepiece_model_pb2

from pipeline import lineage, tokens
from pipeline import params as P
from pipeline.data.vocab import Vocab
from pipeline.errors import ParamsError, UserError
from pipeline.interop.hf_import import import_hf
from pipeline.params import BpeParams
from pipeline.stages import bpe as bpe_stage
from pipeline.stages.bpe import copy_parent
from tests.support.hf import make_trained_model_dir
from tests.support.models import bpe_params as sized_bpe
from tests.support.repo import BASE, REPO

bpe_params = functools.partial(sized_bpe, vocab_size=100)

MULTI30K = REPO.parent / "shared/corpora/raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"

DE = "der die das ein eine hund katze mann frau kind läuft springt über straße groß weiß".split()
EN = "the a an dog cat man woman child runs jumps over street big white".split()


def write_corpus(clean: Path, n_train: int = 400, seed: int = 0) -> None:
    """A synthetic clean/ dir; 'ß' is German-only, 'Ω' appears only outside train."""
    rng = random.Random(seed)
    clean.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("val", 30), ("test", 30)):
        src = [" ".join(rng.choices(DE, k=rng.randint(2, 12))) for _ in range(n)]
        tgt = [" ".join(rng.choices(EN, k=rng.randint(2, 12))) for _ in range(n)]
        if split != "train":
            src[0], tgt[0] = "Ω " + src[0], "Ω " + tgt[0]
        (clean / f"{split}.src").write_text("".join(s + "\n" for s in src), encoding="utf-8")
        (clean / f"{split}.tgt").write_text("".join(t + "\n" for t in tgt), encoding="utf-8")


def write_params(path: Path, **bpe: object) -> Path:
    raw = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    raw["bpe"].update(bpe)
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def processor(path: Path) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(path))


def test_command_trains_joint_model_with_exact_special_ids(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean")
    params = write_params(tmp_path / "params.yaml", vocab_size=100, joint=True)
    result = CliRunner().invoke(
        bpe_stage.command,
        ["--params", str(params), "--clean", str(tmp_path / "clean"), "--out", str(tmp_path / "bpe")],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "bpe").iterdir()) == ["spm.model", "spm.vocab"]
    sp = processor(tmp_path / "bpe/spm.model")
    assert sp.get_piece_size() == 100
    assert [sp.id_to_piece(i) for i in range(tokens.N_SPECIAL)] == [
        tokens.PAD_PIECE,
        tokens.UNK_PIECE,
        tokens.BOS_PIECE,
        tokens.EOS_PIECE,
        tokens.SEP_PIECE,
    ]
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (
        tokens.PAD,
        tokens.UNK,
        tokens.BOS,
        tokens.EOS,
    )
    assert tokens.SEP not in sp.encode("hund <sep> dog")  # a control symbol: never matched in text
    vocab_rows = (tmp_path / "bpe/spm.vocab").read_text(encoding="utf-8").splitlines()
    assert [row.split("\t")[0] for row in vocab_rows] == [sp.id_to_piece(i) for i in range(100)]


def test_trains_on_the_training_split_only(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean")
    bpe_stage.train_bpe(bpe_params(), tmp_path / "clean", tmp_path / "bpe")
    sp = processor(tmp_path / "bpe/spm.model")
    # character_coverage 1.0 keeps every training character, so only a non-train one is unknown.
    assert tokens.UNK not in sp.encode("straße über weiß the dog")
    assert tokens.UNK in sp.encode("Ω")


def test_separate_models_each_learn_their_own_side(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean")
    vocab = bpe_stage.train_bpe(bpe_params(joint=False, vocab_size=60), tmp_path / "clean", tmp_path / "bpe")
    names = sorted(p.name for p in (tmp_path / "bpe").iterdir())
    assert names == ["src.model", "src.vocab", "tgt.model", "tgt.vocab"]
    assert not vocab.joint and vocab.src_size == vocab.tgt_size == 60
    src, tgt = processor(tmp_path / "bpe/src.model"), processor(tmp_path / "bpe/tgt.model")
    assert tokens.UNK not in src.encode("straße") and tokens.UNK in tgt.encode("straße")
    for sp in (src, tgt):
        assert sp.piece_to_id(tokens.SEP_PIECE) == tokens.SEP and sp.pad_id() == tokens.PAD


@pytest.mark.parametrize("joint", [True, False])
def test_same_input_gives_byte_identical_models(tmp_path: Path, joint: bool) -> None:
    write_corpus(tmp_path / "clean")
    bpe_stage.train_bpe(bpe_params(joint), tmp_path / "clean", tmp_path / "a")
    bpe_stage.train_bpe(bpe_params(joint), tmp_path / "clean", tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_rerun_replaces_the_output_dir(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean")
    bpe_stage.train_bpe(bpe_params(joint=False), tmp_path / "clean", tmp_path / "bpe")
    vocab = bpe_stage.train_bpe(bpe_params(joint=True), tmp_path / "clean", tmp_path / "bpe")
    assert vocab.joint
    assert sorted(p.name for p in (tmp_path / "bpe").iterdir()) == ["spm.model", "spm.vocab"]


def test_vocab_too_large_names_the_key_and_a_size_that_fits(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean")
    params = write_params(tmp_path / "params.yaml", vocab_size=5000)
    result = CliRunner().invoke(
        bpe_stage.command,
        ["--params", str(params), "--clean", str(tmp_path / "clean"), "--out", str(tmp_path / "bpe")],
    )
    assert result.exit_code == 1
    assert "bpe.vocab_size=5000" in result.output and "Traceback" not in result.output
    fits = int(result.output.split("set bpe.vocab_size to ")[1].split()[0])
    assert not (tmp_path / "bpe").exists()  # nothing half-written
    bpe_stage.train_bpe(bpe_params(vocab_size=fits), tmp_path / "clean", tmp_path / "bpe")  # the hint works
    with pytest.raises(UserError, match=r"bpe.vocab_size"):
        bpe_stage.train_bpe(bpe_params(vocab_size=fits + 1), tmp_path / "clean", tmp_path / "bpe2")


def test_missing_or_empty_training_text_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"train.src: missing"):
        bpe_stage.train_bpe(bpe_params(), tmp_path / "clean", tmp_path / "bpe")
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean/train.src").write_text("", encoding="utf-8")
    (tmp_path / "clean/train.tgt").write_text("", encoding="utf-8")
    with pytest.raises(UserError, match="no training sentences"):
        bpe_stage.train_bpe(bpe_params(), tmp_path / "clean", tmp_path / "bpe")


def test_real_multi30k_default_vocab_covers_val(tmp_path: Path) -> None:
    """The default bpe params on the real Multi30k train (about 1 s); no UNK on val."""
    if not MULTI30K.is_dir():
        pytest.skip(f"corpus mirror not found at {MULTI30K}")
    clean = tmp_path / "clean"
    clean.mkdir()
    for split in ("train", "val"):
        for side, lang in (("src", "de"), ("tgt", "en")):
            text = gzip.open(MULTI30K / f"{split}.{lang}.gz", "rt", encoding="utf-8").read()
            (clean / f"{split}.{side}").write_text(text, encoding="utf-8")
    defaults = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))["bpe"]
    vocab = bpe_stage.train_bpe(BpeParams(**defaults), clean, tmp_path / "bpe")
    assert vocab.src_size == defaults["vocab_size"]
    val = (clean / "val.src").read_text(encoding="utf-8").splitlines()
    assert all(tokens.UNK not in ids for ids in vocab.encode_src(val))


# --- the sample ------------------------------------------------------------------------


def test_the_sample_is_all_lines_when_the_split_fits():
    assert bpe_stage.sample_pairs([300, 100], 400, seed=1) is None


def test_sources_share_the_sample_equally_a_small_one_giving_all_it_has():
    picked = bpe_stage.sample_pairs([1000, 30, 500], 330, seed=1)
    assert picked is not None and picked == sorted(set(picked))
    per_source = [sum(lo <= i < hi for i in picked) for lo, hi in ((0, 1000), (1000, 1030), (1030, 1530))]
    assert per_source == [150, 30, 150]
    assert [i - 1000 for i in picked if 1000 <= i < 1030] == list(range(30))
    assert bpe_stage.sample_pairs([1000, 30, 500], 330, seed=1) == picked
    assert bpe_stage.sample_pairs([1000, 30, 500], 330, seed=2) != picked


def test_a_sampled_model_is_deterministic_and_records_fixed_threads(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean", n_train=400)
    sampled = dataclasses.replace(bpe_params(), sample_lines=200)
    for out in ("a", "b"):
        bpe_stage.train_bpe(sampled, tmp_path / "clean", tmp_path / out)
    bpe_stage.train_bpe(bpe_params(), tmp_path / "clean", tmp_path / "all")
    model = (tmp_path / "a" / "spm.model").read_bytes()
    assert model == (tmp_path / "b" / "spm.model").read_bytes()
    assert model != (tmp_path / "all" / "spm.model").read_bytes()
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    assert proto.trainer_spec.num_threads == bpe_stage.RECORDED_THREADS
    assert proto.trainer_spec.input_sentence_size == 0


def test_stats_that_disagree_with_the_train_file_are_a_user_error(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean", n_train=50)
    stats = {"train": {"sources": {"a": {"lines_out": 30}, "b": {"lines_out": 30}}}}
    (tmp_path / "clean" / "stats.json").write_text(json.dumps(stats), encoding="utf-8")
    with pytest.raises(UserError, match=r"stats.json counts 60 training lines but .*train.src has 50"):
        bpe_stage.train_bpe(bpe_params(), tmp_path / "clean", tmp_path / "bpe")


# --- bpe.model_type and bpe.vocab_size: auto --------------------------------------------------


def test_model_type_unigram_trains_a_unigram_model_with_the_same_special_ids(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean")
    bpe_stage.train_bpe(bpe_params(model_type="unigram", vocab_size=50), tmp_path / "clean", tmp_path / "bpe")
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((tmp_path / "bpe/spm.model").read_bytes())
    assert proto.trainer_spec.model_type == sentencepiece_model_pb2.TrainerSpec.UNIGRAM
    sp = processor(tmp_path / "bpe/spm.model")
    assert [sp.id_to_piece(i) for i in range(tokens.N_SPECIAL)] == [
        tokens.PAD_PIECE, tokens.UNK_PIECE, tokens.BOS_PIECE, tokens.EOS_PIECE, tokens.SEP_PIECE
    ]  # fmt: skip


def test_the_auto_rule_grows_with_the_corpus_as_its_table_says():
    sizes = [bpe_stage.auto_vocab_size(n) for n in (1, 9_999, 10_000, 199_999, 200_000, 999_999)]
    assert sizes == [4_000, 4_000, 8_000, 8_000, 16_000, 16_000]
    assert bpe_stage.auto_vocab_size(1_000_000) == bpe_stage.auto_vocab_size(10**8) == 32_000


def test_vocab_size_auto_is_chosen_from_the_training_pairs_and_recorded(tmp_path: Path, monkeypatch) -> None:
    write_corpus(tmp_path / "clean", n_train=400)
    monkeypatch.setattr(bpe_stage, "AUTO_VOCAB", ((300, 50), (500, 80)))  # 400 pairs -> 80 pieces
    vocab = bpe_stage.train_bpe(bpe_params(vocab_size="auto"), tmp_path / "clean", tmp_path / "bpe")
    assert vocab.src_size == 80
    recorded = json.loads((tmp_path / "bpe" / bpe_stage.AUTO_FILE).read_text(encoding="utf-8"))
    assert recorded == {"vocab_size": 80, "training_pairs": 400}


def test_a_numeric_vocab_size_writes_no_auto_record(tmp_path: Path) -> None:
    write_corpus(tmp_path / "clean")
    bpe_stage.train_bpe(bpe_params(), tmp_path / "clean", tmp_path / "bpe")
    assert not (tmp_path / "bpe" / bpe_stage.AUTO_FILE).exists()


def test_vocab_size_auto_without_training_pairs_stops_before_writing(tmp_path: Path) -> None:
    (tmp_path / "clean").mkdir()
    for side in ("src", "tgt"):
        (tmp_path / f"clean/train.{side}").write_text("", encoding="utf-8")
    runner = CliRunner()
    params = write_params(tmp_path / "params.yaml", vocab_size="auto")
    args = ["--params", str(params), "--clean", str(tmp_path / "clean"), "--out", str(tmp_path / "bpe")]
    result = runner.invoke(bpe_stage.command, args)
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: bpe.vocab_size: auto sizes the vocabulary from the training pairs, but "
        f"{tmp_path / 'clean/train.src'} has none; check data.train and the clean stage's output, or give "
        "bpe.vocab_size a number"
    ]
    assert not (tmp_path / "bpe").exists()


# --- train.init_from: the parent's vocabulary, copied ---------------------------------------


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    return make_trained_model_dir(tmp_path_factory.mktemp("parent") / "model", steps=2)


def child(init_from: Path | str, **bpe: object) -> P.Params:
    """params.yaml's, starting from `init_from` with its architecture (where it has one) and `bpe`."""
    saved = Path(init_from) / "params.yaml"
    model = P.from_saved(yaml.safe_load(saved.read_text())).model if saved.is_file() else BASE.model
    return dataclasses.replace(
        BASE,
        model=model,
        bpe=dataclasses.replace(BASE.bpe, **bpe),
        train=dataclasses.replace(BASE.train, init_from=str(init_from)),
    )


def test_the_parents_model_is_copied_byte_for_byte_with_a_record_of_the_parent(parent, tmp_path):
    vocab = copy_parent(child(parent), tmp_path / "bpe")
    assert sorted(p.name for p in (tmp_path / "bpe").iterdir()) == ["parent.json", "spm.model"]
    assert (tmp_path / "bpe/spm.model").read_bytes() == (parent / "spm.model").read_bytes()
    assert vocab.joint and vocab.src_size == Vocab.load(parent).src_size
    record = json.loads((tmp_path / "bpe/parent.json").read_text(encoding="utf-8"))
    assert record["path"] == str(parent)
    assert record["model_sha256"] == lineage.sha256(parent / "model.pt")


def test_an_imported_parents_two_models_and_piece_map_are_copied(marian_dir, tmp_path):
    imported = import_hf(str(marian_dir), tmp_path / "opus-mt", BASE)
    vocab = copy_parent(child(imported), tmp_path / "bpe")
    copied = sorted(p.name for p in (tmp_path / "bpe").iterdir())
    assert copied == ["parent.json", "src.model", "tgt.model", "vocab.json"]
    assert all(
        (tmp_path / "bpe" / name).read_bytes() == (imported / name).read_bytes() for name in copied[1:]
    )
    assert vocab.encode_src(["der hund"]) == Vocab.load(imported).encode_src(["der hund"])
    record = lineage.Parent.load(tmp_path / "bpe/parent.json")
    assert record.imported_from == str(marian_dir)


def test_the_settings_that_would_train_a_vocabulary_change_nothing(parent, tmp_path):
    copy_parent(child(parent), tmp_path / "a")
    copy_parent(child(parent, vocab_size="auto", model_type="unigram", seed=9), tmp_path / "b")
    for name in ("spm.model", "parent.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def refused(params: P.Params, out: Path) -> str:
    with pytest.raises(ParamsError) as caught:
        copy_parent(params, out)
    assert not out.exists()
    assert "\n" not in caught.value.message
    return caught.value.message


def test_a_vocabulary_of_another_kind_is_refused_naming_both_sides(parent, tmp_path):
    message = refused(child(parent, joint=False), tmp_path / "bpe")
    assert message.startswith(f"train.init_from: {parent} has another vocabulary")
    assert "bpe.joint false here, true in the parent" in message and "-S bpe.joint=true" in message


def test_another_architecture_stops_the_bpe_stage_already(parent, tmp_path):
    params = child(parent)
    params = dataclasses.replace(params, model=dataclasses.replace(params.model, d_model=64, n_heads=4))
    message = refused(params, tmp_path / "bpe")
    assert "has another architecture (model.d_model 64 here, 32 in the parent)" in message


def test_a_parent_that_is_no_model_directory_is_refused(parent, tmp_path):
    assert "no such directory" in refused(child(tmp_path / "nowhere"), tmp_path / "bpe")
    (tmp_path / "empty").mkdir()
    assert "not a model directory (it has no model.pt)" in refused(
        child(tmp_path / "empty"), tmp_path / "bpe"
    )
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "model.pt").write_bytes(b"")
    (foreign / "params.yaml").write_text((parent / "params.yaml").read_text())
    assert "holds no vocabulary of this pipeline" in refused(child(foreign), tmp_path / "bpe")
    params = child(foreign)
    (foreign / "params.yaml").write_text("lr: 0.1\n")
    assert "not the params of a model of this pipeline" in refused(params, tmp_path / "bpe")


def test_the_command_copies_instead_of_training_and_says_so(parent, tmp_path):
    raw = child(parent).to_dict()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    args = [
        "--params",
        str(tmp_path / "params.yaml"),
        "--clean",
        str(tmp_path / "none"),
        "--out",
        str(tmp_path / "bpe"),
    ]
    result = CliRunner().invoke(bpe_stage.command, args)
    assert result.exit_code == 0, result.output
    assert f"copied from {parent} (train.init_from)" in result.output
    assert (tmp_path / "bpe/spm.model").read_bytes() == (parent / "spm.model").read_bytes()
