"""Vocab: finding the model(s), special-id check, encode/decode, pieces."""

from __future__ import annotations

import io
import json
import pickle
import random
from pathlib import Path

import pytest
import sentencepiece as spm

from pipeline import tokens
from pipeline.data.vocab import Vocab
from pipeline.errors import UserError
from pipeline.stages.bpe import train_bpe
from tests.support.hf import SRC_WORDS, TGT_WORDS, train_marian_spm
from tests.support.models import bpe_params, train_spm

WORDS = "der die das hund katze läuft über straße the dog cat runs over street".split()


def write_clean(clean: Path) -> list[str]:
    rng = random.Random(1)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(2, 10))) for _ in range(300)]
    clean.mkdir()
    for side in ("src", "tgt"):
        (clean / f"train.{side}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return lines


@pytest.fixture(scope="module")
def bpe_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vocab")
    write_clean(root / "clean")
    dirs = {}
    for joint in (True, False):
        params = bpe_params(joint, 80)
        dirs["joint" if joint else "separate"] = root / ("joint" if joint else "separate")
        train_bpe(params, root / "clean", dirs["joint" if joint else "separate"])
    return dirs


def test_load_joint_and_separate(bpe_dirs: dict[str, Path]) -> None:
    joint = Vocab.load(bpe_dirs["joint"])
    assert joint.joint and joint.src_size == joint.tgt_size == 80
    assert joint.model_files() == [bpe_dirs["joint"] / "spm.model"]
    separate = Vocab.load(bpe_dirs["separate"])
    assert not separate.joint
    assert separate.model_files() == [bpe_dirs["separate"] / "src.model", bpe_dirs["separate"] / "tgt.model"]
    assert Vocab.from_files(*separate.model_files()).model_files() == separate.model_files()


def test_load_without_models_names_dir_and_expected_files(tmp_path: Path) -> None:
    with pytest.raises(UserError) as e:
        Vocab.load(tmp_path)
    assert str(tmp_path) in e.value.message
    assert all(name in e.value.message for name in ("spm.model", "src.model", "tgt.model"))
    (tmp_path / "src.model").write_bytes(b"")  # one side alone is not enough
    with pytest.raises(UserError, match="no sentencepiece model"):
        Vocab.load(tmp_path)


def test_load_refuses_joint_and_separate_models_together(bpe_dirs: dict[str, Path], tmp_path: Path) -> None:
    for name in ("spm.model", "src.model", "tgt.model"):
        source = bpe_dirs["joint"] / "spm.model"
        (tmp_path / name).write_bytes(source.read_bytes())
    with pytest.raises(UserError, match="both"):
        Vocab.load(tmp_path)


def test_foreign_model_with_other_special_ids_is_refused(tmp_path: Path) -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(  # sentencepiece's defaults: unk=0, bos=1, eos=2, no pad
        sentence_iterator=iter(WORDS * 20), model_writer=model, model_type="bpe", vocab_size=40, minloglevel=2
    )
    (tmp_path / "spm.model").write_bytes(model.getvalue())
    with pytest.raises(UserError, match=r"<pad>.*retrain"):
        Vocab.load(tmp_path)
    (tmp_path / "spm.model").write_bytes(b"not a model")
    with pytest.raises(UserError, match="not a readable sentencepiece model"):
        Vocab.load(tmp_path)


@pytest.mark.parametrize("kind", ["joint", "separate"])
def test_encode_decode_round_trip_gives_normalized_text(bpe_dirs: dict[str, Path], kind: str) -> None:
    vocab = Vocab.load(bpe_dirs[kind])
    lines = ["der hund läuft über die straße", "  the  cat runs   over ", "katze"]
    normalized = [" ".join(line.split()) for line in lines]  # sentencepiece folds runs of spaces
    src_ids, tgt_ids = vocab.encode_src(lines), vocab.encode_tgt(lines)
    assert [vocab.decode_src(ids) for ids in src_ids] == normalized
    assert [vocab.decode_tgt(ids) for ids in tgt_ids] == normalized
    for ids in src_ids + tgt_ids:
        assert ids and all(tokens.N_SPECIAL <= i < vocab.src_size for i in ids)  # never BOS/EOS/PAD


@pytest.mark.parametrize("kind", ["joint", "separate"])
def test_one_thread_encodes_as_every_thread_does(
    bpe_dirs: dict[str, Path], kind: str, tmp_path: Path
) -> None:
    lines = write_clean(tmp_path / "clean")
    one, every = Vocab.load(bpe_dirs[kind], threads=1), Vocab.load(bpe_dirs[kind])
    assert one.encode_src(lines) == every.encode_src(lines)
    assert one.encode_tgt(lines) == every.encode_tgt(lines)


def test_decode_drops_special_ids_but_shows_unknowns(bpe_dirs: dict[str, Path]) -> None:
    vocab = Vocab.load(bpe_dirs["joint"])
    (ids,) = vocab.encode_tgt(["the dog runs"])
    framed = [tokens.BOS, *ids[:1], tokens.SEP, *ids[1:], tokens.EOS, tokens.PAD, tokens.PAD]
    assert vocab.decode_tgt(framed) == "the dog runs"
    assert "⁇" in vocab.decode_tgt([*ids, tokens.UNK])


def test_pieces_spell_the_sentence(bpe_dirs: dict[str, Path]) -> None:
    vocab = Vocab.load(bpe_dirs["separate"])
    (ids,) = vocab.encode_src(["die katze läuft"])
    pieces = vocab.src_pieces(ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces).replace("▁", " ").strip() == "die katze läuft"
    assert vocab.tgt_pieces([tokens.PAD, tokens.EOS]) == [tokens.PAD_PIECE, tokens.EOS_PIECE]


def test_vocab_pickles(bpe_dirs: dict[str, Path]) -> None:
    vocab = Vocab.load(bpe_dirs["separate"])
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy.encode_tgt(["the dog"]) == vocab.encode_tgt(["the dog"])
    assert copy.model_files() == vocab.model_files() and not copy.joint


# --- two models over one id space (an imported OPUS-MT model) ----------------------------------


@pytest.fixture(scope="module")
def mapped_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """src.model and tgt.model with sentencepiece's own ids (unk 0), and vocab.json giving the ids:
    this pipeline's specials, then the pieces of both, a source-only piece left out."""
    root = tmp_path_factory.mktemp("mapped")
    src = train_marian_spm(root / "src.model", SRC_WORDS)
    tgt = train_marian_spm(root / "tgt.model", TGT_WORDS, vocab_size=36)
    pieces = [tokens.PAD_PIECE, tokens.UNK_PIECE, tokens.BOS_PIECE, tokens.EOS_PIECE, tokens.SEP_PIECE]
    left_out = next(p for p in reversed(src) if p not in tgt)
    pieces += [p for p in dict.fromkeys(src + tgt) if p != left_out]
    (root / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}), encoding="utf-8")
    return root


def test_a_piece_map_gives_both_sides_one_id_space(mapped_dir: Path) -> None:
    vocab = Vocab.load(mapped_dir)
    ids = json.loads((mapped_dir / "vocab.json").read_text(encoding="utf-8"))
    assert vocab.joint and vocab.src_size == vocab.tgt_size == len(ids)
    assert vocab.model_files() == [mapped_dir / n for n in ("src.model", "tgt.model", "vocab.json")]
    src_sp = spm.SentencePieceProcessor(model_file=str(mapped_dir / "src.model"))
    line = "der hund läuft über die straße"
    pieces = src_sp.encode(line, out_type=str)
    assert vocab.encode_src([line]) == [[ids.get(p, tokens.UNK) for p in pieces]]
    assert vocab.src_pieces(vocab.encode_src([line])[0]) == [p if p in ids else "<unk>" for p in pieces]
    encoded = vocab.encode_tgt(["the dog runs over the street"])[0]
    assert vocab.decode_tgt([tokens.BOS, *encoded, tokens.EOS]) == "the dog runs over the street"


def test_a_piece_the_map_lacks_is_unk(mapped_dir: Path) -> None:
    vocab = Vocab.load(mapped_dir)
    ids = json.loads((mapped_dir / "vocab.json").read_text(encoding="utf-8"))
    src_sp = spm.SentencePieceProcessor(model_file=str(mapped_dir / "src.model"))
    missing = next(
        p for p in (src_sp.id_to_piece(i) for i in range(3, src_sp.get_piece_size())) if p not in ids
    )
    assert tokens.UNK in vocab.encode_src([src_sp.decode_pieces([missing]) + " ✓"])[0]


def test_what_subword_sampling_reads_of_a_piece_map_is_in_its_ids(mapped_dir: Path) -> None:
    """An imported model reaches training as a parent's vocabulary (train.init_from): the pieces and
    n-best segmentations subword sampling draws from must carry the map's ids, as encoding does."""
    vocab = Vocab.load(mapped_dir)
    ids = json.loads((mapped_dir / "vocab.json").read_text(encoding="utf-8"))
    for side, line in (("src", "der hund läuft über die straße"), ("tgt", "the dog runs over the street")):
        encode = vocab.encode_src if side == "src" else vocab.encode_tgt
        assert vocab.nbest(side, line, 1)[0][0] == encode([line])[0]
        assert all(i == ids.get(piece, tokens.UNK) for piece, (i, _) in vocab.pieces(side).items())
    assert any(i == tokens.UNK for i, _ in vocab.pieces("src").values())  # the piece the map leaves out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda ids: ids | {"<pad>": 7, ids_at(ids, 7): 0}, "<pad> has id 7"),
        (lambda ids: ids | {"extra": len(ids) + 3}, "0..n-1"),
    ],
)
def test_a_piece_map_with_other_special_ids_or_gaps_is_refused(
    mapped_dir: Path, tmp_path: Path, change, message: str
) -> None:
    for name in ("src.model", "tgt.model"):
        (tmp_path / name).write_bytes((mapped_dir / name).read_bytes())
    ids = json.loads((mapped_dir / "vocab.json").read_text(encoding="utf-8"))
    (tmp_path / "vocab.json").write_text(json.dumps(change(ids)), encoding="utf-8")
    with pytest.raises(UserError, match=message) as e:
        Vocab.load(tmp_path)
    assert "\n" not in e.value.message


def ids_at(ids: dict[str, int], i: int) -> str:
    return next(p for p, j in ids.items() if j == i)


def test_differing_files_names_what_another_directory_holds_otherwise(tmp_path: Path) -> None:
    for name, seed in (("a", 0), ("same", 0), ("other", 7)):
        (tmp_path / name).mkdir()
        train_spm(tmp_path / name / "spm.model", seed=seed)
    ours = Vocab.load(tmp_path / "a")
    assert ours.differing_files(tmp_path / "same") == []
    assert ours.differing_files(tmp_path / "other") == ["spm.model"]  # same name and size, other pieces
    (tmp_path / "same" / "src.model").write_bytes(b"x")  # a separate vocabulary's file besides
    assert ours.differing_files(tmp_path / "same") == ["src.model"]
    (tmp_path / "empty").mkdir()
    assert ours.differing_files(tmp_path / "empty") == ["spm.model"]
