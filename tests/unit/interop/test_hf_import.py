"""import-hf: a locally built MarianMTModel computes the same function as our imported model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.interop import hf_import
from pipeline.interop.hf_import import import_hf
from pipeline.tokens import BOS, PAD, SEP
from tests.support.hf import hf_translate, marian_pairs, our_translate
from tests.support.repo import BASE

transformers = pytest.importorskip("transformers")

LINES = [s for s, _ in marian_pairs(12, seed=7)] + ["der hund läuft über die straße", "ein ✓ mann"]


@pytest.fixture(scope="module")
def imported(marian_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_hf(str(marian_dir), tmp_path_factory.mktemp("imported") / "model", BASE)


def hf_model(path: Path):
    return transformers.MarianMTModel.from_pretrained(path).eval()


def hf_tokenizer(path: Path):
    return transformers.MarianTokenizer.from_pretrained(path)


def our_index(imported: Path, marian_dir: Path) -> torch.Tensor:
    """Per our id, the Marian id of the same piece (-1 for BOS and SEP, which Marian lacks)."""
    ours = json.loads((imported / "vocab.json").read_text(encoding="utf-8"))
    theirs = json.loads((marian_dir / "vocab.json").read_text(encoding="utf-8"))
    index = [-1] * len(ours)
    for piece, i in ours.items():
        index[i] = theirs.get(piece, -1)
    return torch.tensor(index)


def test_tokenization_is_marians_in_our_ids(imported: Path, marian_dir: Path) -> None:
    ours = Translator.from_dir(imported, workers=1)
    theirs = hf_tokenizer(marian_dir)(LINES).input_ids
    index = our_index(imported, marian_dir)
    mapped = [[int(index[i]) for i in seq] + [theirs[0][-1]] for seq in ours.vocab.encode_src(LINES)]
    assert mapped == theirs  # the same pieces (UNK for ✓), Marian's EOS appended
    assert ours.vocab.decode_tgt(ours.vocab.encode_tgt(["the dog runs"])[0]) == "the dog runs"


def test_logits_equal_transformers_on_a_padded_batch(imported: Path, marian_dir: Path) -> None:
    ours = Translator.from_dir(imported, workers=1).model
    theirs, tok = hf_model(marian_dir), hf_tokenizer(marian_dir)
    src = tok(LINES, return_tensors="pt", padding=True)
    tgt = tok(text_target=[t for _, t in marian_pairs(len(LINES), seed=8)], return_tensors="pt", padding=True)
    pad = theirs.config.pad_token_id
    decoder_in = torch.cat([torch.full_like(tgt.input_ids[:, :1], pad), tgt.input_ids[:, :-1]], dim=1)
    index = our_index(imported, marian_dir)
    to_ours = {int(m): i for i, m in enumerate(index.tolist()) if m >= 0} | {pad: PAD}
    as_ours = lambda ids: ids.apply_(lambda i: to_ours[i])
    with torch.no_grad():
        expected = theirs(**src, decoder_input_ids=decoder_in).logits  # (B, T, V)
        bos_in = as_ours(decoder_in.clone())
        bos_in[:, 0] = BOS
        got = ours(as_ours(src.input_ids.clone()), bos_in)  # (B, T, V + 2)
    real = (tgt.input_ids != pad)[:, :, None]  # positions fed a real token (the padded tail is not)
    kept = torch.tensor([i for i in range(len(index)) if i not in (BOS, SEP)])
    torch.testing.assert_close(
        (got[:, :, kept] * real), (expected[:, :, index[kept]] * real), rtol=0, atol=1e-5
    )
    assert (got[:, :, [BOS, SEP]] < -50).all()  # no probability mass where Marian has no token


@pytest.mark.parametrize("beam", [1, 4])
def test_greedy_and_beam_outputs_equal_transformers(imported: Path, marian_dir: Path, beam: int) -> None:
    expected = hf_translate(marian_dir, LINES, beam)
    assert our_translate(imported, LINES, beam) == expected
    assert len(set(expected)) > len(LINES) // 2  # the outputs differ between inputs: a real check


def test_the_imported_directory_exports_to_ctranslate2_and_translates_the_same(
    imported: Path, tmp_path: Path
) -> None:
    ct2 = pytest.importorskip("pipeline.interop.ct2")
    pytest.importorskip("ctranslate2")
    shutil.copytree(imported, tmp_path / "model")
    ours = Translator.from_dir(tmp_path / "model", workers=1).translate(LINES, beam=4)
    exact = ct2.CT2Translator.from_dir(tmp_path / "model", device="cpu", exact=True)
    assert exact.translate(LINES, beam=4) == ours


def config_of(marian_dir: Path, **changes) -> dict:
    return json.loads((marian_dir / "config.json").read_text(encoding="utf-8")) | changes


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"model_type": "bert"}, "model_type='bert'"),
        ({"normalize_before": True}, "normalize_before=True"),
        ({"static_position_embeddings": False}, "static_position_embeddings=False"),
        ({"decoder_start_token_id": 0}, "decoder_start_token_id=0"),
        ({"activation_function": "gelu_new"}, "activation_function='gelu_new'"),
        ({"decoder_ffn_dim": 128}, "decoder_ffn_dim=128"),
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings=False"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False"),
    ],
)
def test_a_config_field_we_cannot_represent_is_refused_by_name(
    marian_dir: Path, changes: dict, field: str
) -> None:
    with pytest.raises(UserError) as e:
        hf_import.model_settings(config_of(marian_dir, **changes))
    assert field in e.value.message and "\n" not in e.value.message


def test_imported_params_are_marians_and_the_rest_come_from_params_yaml(imported: Path) -> None:
    params = Translator.from_dir(imported).params
    m = params.model
    assert (m.norm, m.positions, m.activation, m.tie_embeddings, m.output_bias) == (
        "post",
        "sinusoidal_marian",
        "swish",
        "all",
        True,
    )
    assert (m.d_model, m.n_heads, m.d_ff, m.n_layers, m.max_positions) == (32, 4, 64, 2, 64)
    assert (params.data.src_lang, params.data.tgt_lang) == ("de", "en")  # from tokenizer_config.json
    assert params.train == BASE.train and params.decode == BASE.decode and params.bpe.joint


def test_a_pytorch_model_bin_is_read_with_weights_only(marian_dir: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    source = tmp_path / "bin"
    shutil.copytree(marian_dir, source)
    torch.save(load_file(str(source / "model.safetensors")), source / "pytorch_model.bin")
    (source / "model.safetensors").unlink()
    out = import_hf(str(source), tmp_path / "model", BASE)
    assert (
        Translator.from_dir(out, workers=1).translate(LINES[:3], beam=1)
        == hf_translate(marian_dir, LINES, 1)[:3]
    )
    torch.save({"weights": torch.zeros(1), "code": EvilPickle()}, source / "pytorch_model.bin")
    with pytest.raises(UserError, match="weights_only=True"):
        import_hf(str(source), tmp_path / "refused", BASE)
    assert not (tmp_path / "refused").exists()


class EvilPickle:
    """Anything but tensors and plain values: weights_only=True must refuse to unpickle it."""


def test_the_decode_stage_and_the_mlflow_model_take_the_imported_directory(
    imported: Path, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from pipeline import files
    from pipeline.serving import pyfunc
    from pipeline.stages import decode as decode_stage

    clean = tmp_path / "clean"
    files.write_lines(clean / "val.src", LINES[:4])
    files.write_lines(clean / "test" / "t1.src", LINES[4:8])
    settings = dataclasses.replace(BASE.decode, beam=4)
    decode_stage.decode(settings, imported, clean, tmp_path / "decode", device="cpu")
    translator = Translator.from_dir(imported, workers=1)
    assert files.read_lines(tmp_path / "decode" / "test" / "t1.hyp") == translator.translate(
        LINES[4:8], beam=4
    )
    wrapped = pyfunc.TranslatorModel()
    wrapped.load_context(SimpleNamespace(artifacts={pyfunc.ARTIFACT: str(imported)}))
    assert wrapped.predict(None, LINES[:4], {"beam": 1}) == translator.translate(LINES[:4], beam=1)


def test_the_imported_vocabulary_binarizes_a_corpus_for_fine_tuning(imported: Path, tmp_path: Path) -> None:
    """binarize reads the import's src.model, tgt.model and vocab.json as a bpe directory: the
    parent's vocabulary, ids in the model's space."""
    from pipeline import files
    from pipeline.data.batching import ParallelData
    from pipeline.stages import binarize

    pairs = marian_pairs(20, seed=4)
    for split in ("train", "val"):
        files.write_lines(tmp_path / "clean" / f"{split}.src", [s for s, _ in pairs])
        files.write_lines(tmp_path / "clean" / f"{split}.tgt", [t for _, t in pairs])
    meta = binarize.binarize(tmp_path / "clean", imported, tmp_path / "bin")
    assert "vocab.json" in meta["bpe_models"] and meta["src_vocab_size"] == meta["tgt_vocab_size"]
    data = ParallelData.load(tmp_path / "bin", "train")
    vocab = Translator.from_dir(imported).vocab
    assert data.src[3].tolist() == vocab.encode_src([pairs[3][0]])[0]
    assert data.tgt[3].tolist() == vocab.encode_tgt([pairs[3][1]])[0]


def test_the_bart_era_fields_real_opus_mt_configs_carry_are_accepted_at_their_values(
    marian_dir: Path,
) -> None:
    legacy = dict(
        normalize_before=False,
        add_final_layer_norm=False,
        normalize_embedding=False,
        static_position_embeddings=True,
        add_bias_logits=False,
        extra_pos_embeddings=58101,  # unused by static positions, as in transformers
        architectures=["MarianMTModel"],
    )
    settings = hf_import.model_settings(config_of(marian_dir, **legacy))
    assert settings == hf_import.model_settings(config_of(marian_dir))


def test_an_import_has_no_parent_whatever_the_base_params_say(marian_dir: Path, tmp_path: Path) -> None:
    base = dataclasses.replace(BASE, train=dataclasses.replace(BASE.train, init_from="data/another-model"))
    out = import_hf(str(marian_dir), tmp_path / "model", base)
    assert Translator.from_dir(out, workers=1).params.train.init_from is None
