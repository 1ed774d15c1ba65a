"""export-hf: transformers loads the export and computes our model's function (Marian for post-LN,
Pegasus for pre-LN); what it cannot express is refused with one line naming the setting."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from pipeline import params
from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.interop.hf_export import export_hf, generation_config
from pipeline.interop.hf_import import import_hf
from pipeline.tokens import BOS, EOS, PAD, SEP, UNK
from tests.support.hf import hf_translate, make_trained_model_dir, marian_pairs, our_translate
from tests.support.models import make_ct2_model_dir
from tests.support.repo import BASE, REPO

transformers = pytest.importorskip("transformers")

TEST_SET = [s for s, _ in marian_pairs(16, seed=11)]


def load(out: Path):
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    return model, transformers.AutoTokenizer.from_pretrained(out)


@pytest.fixture(scope="module", params=["pre", "post", "post-separate"])
def trained(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A default-shaped model (params.yaml's but for size; pre-LN is the default) trained a few steps,
    and its export. post-separate: untied embeddings over a source and a target sentencepiece model
    (the same model twice, read as two: Marian's separate vocabularies)."""
    root = tmp_path_factory.mktemp(f"trained-{request.param}")
    norm, _, separate = request.param.partition("-")
    tie = "none" if separate else params.load(REPO / "params.yaml").model.tie_embeddings
    model_dir = make_trained_model_dir(root / "model", norm=norm, tie_embeddings=tie)
    if separate:
        for name in ("src.model", "tgt.model"):
            shutil.copy(model_dir / "spm.model", model_dir / name)
        (model_dir / "spm.model").unlink()
    return model_dir, export_hf(model_dir, root / "hf")


def test_pre_ln_exports_as_pegasus_and_post_ln_as_marian(trained: tuple[Path, Path]) -> None:
    model_dir, out = trained
    model, tok = load(out)
    norm = Translator.from_dir(model_dir).params.model.norm
    expected = "PegasusForConditionalGeneration" if norm == "pre" else "MarianMTModel"
    assert type(model).__name__ == expected and type(tok).__name__ == "MarianTokenizer"
    separate = (model_dir / "src.model").is_file()
    assert tok.separate_vocabs == separate and (out / "target_vocab.json").is_file() == separate


@pytest.mark.parametrize("beam", [1, 4])
def test_transformers_generate_translates_the_test_set_as_we_do(
    trained: tuple[Path, Path], beam: int
) -> None:
    model_dir, out = trained
    ours = our_translate(model_dir, TEST_SET, beam)
    assert hf_translate(out, TEST_SET, beam) == ours
    assert len(set(ours)) > len(TEST_SET) // 2  # a model whose outputs differ: a real check


@pytest.mark.parametrize("beam", [1, 4])
def test_generate_bans_repeated_ngrams_as_we_do(trained: tuple[Path, Path], beam: int) -> None:
    model_dir, out = trained
    for size in (2, 1):  # 1: no token twice
        ours = our_translate(model_dir, TEST_SET, beam, no_repeat_ngram_size=size)
        assert hf_translate(out, TEST_SET, beam, no_repeat_ngram_size=size) == ours
    assert ours != our_translate(model_dir, TEST_SET, beam)  # the model repeats tokens: the ban has work


def test_the_generation_config_carries_the_models_beam_and_ngram_ban() -> None:
    decode = dataclasses.replace(BASE.decode, beam=3, no_repeat_ngram_size=4)
    config = generation_config(BASE.model, decode)
    assert (config.num_beams, config.no_repeat_ngram_size) == (3, 4)


def test_the_tokenizer_gives_our_source_ids(trained: tuple[Path, Path]) -> None:
    model_dir, out = trained
    vocab = Translator.from_dir(model_dir).vocab
    _, tok = load(out)
    assert tok(TEST_SET).input_ids == [[*ids, tok.eos_token_id] for ids in vocab.encode_src(TEST_SET)]


@pytest.fixture(scope="module")
def imported(marian_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return import_hf(str(marian_dir), tmp_path_factory.mktemp("imported") / "model", BASE)


def test_an_imported_model_round_trips_to_the_same_logits(
    marian_dir: Path, imported: Path, tmp_path: Path
) -> None:
    out = export_hf(imported, tmp_path / "hf")
    original, tok = transformers.MarianMTModel.from_pretrained(marian_dir).eval(), load(marian_dir)[1]
    exported, our_tok = load(out)
    ours = json.loads((out / "vocab.json").read_text(encoding="utf-8"))
    theirs = json.loads((marian_dir / "vocab.json").read_text(encoding="utf-8"))
    batch = tok(TEST_SET, return_tensors="pt", padding=True)
    their_target = tok(text_target=TEST_SET[::-1], return_tensors="pt", padding=True).input_ids
    to_ours = {theirs[p]: i for p, i in ours.items() if p in theirs}
    decoder_in = torch.cat(
        [torch.full_like(their_target[:, :1], original.config.pad_token_id), their_target], 1
    )
    our_in = decoder_in.clone().apply_(lambda i: to_ours[i])
    our_in[:, 0] = BOS
    src = our_tok(TEST_SET, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = original(**batch, decoder_input_ids=decoder_in).logits
        got = exported(**src, decoder_input_ids=our_in).logits
    columns = [(i, theirs[p]) for p, i in ours.items() if p in theirs]
    real = torch.cat([torch.ones_like(their_target[:, :1]), their_target != original.config.pad_token_id], 1)
    mask = real[:, :, None].bool()
    ours_cols, their_cols = (torch.tensor(c) for c in zip(*columns))
    torch.testing.assert_close(
        got[:, :, ours_cols] * mask, expected[:, :, their_cols] * mask, rtol=0, atol=1e-5
    )


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"positions": "learned", "tie": "all"}, "model.positions=learned"),
        ({"tie": "target"}, "model.tie_embeddings=target"),
        ({"arch": "decoder_only", "tie": "all"}, "model.arch=decoder_only"),
    ],
)
def test_what_transformers_cannot_express_is_refused_with_one_line(
    tmp_path: Path, settings: dict, key: str
) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model", **settings)
    with pytest.raises(UserError) as e:
        export_hf(model_dir, tmp_path / "hf")
    assert e.value.message.startswith(key) and "\n" not in e.value.message
    assert not (tmp_path / "hf").exists()


def test_the_model_card_gives_data_params_scores_with_signatures_and_source(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    model_dir, _ = trained
    scores = {
        "val": {
            "bleu": 12.3,
            "chrf": 40.1,
            "chrfpp": 38.2,
            "ter": 70.0,
            "n_lines": 16,
            "signature": {
                "bleu": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
                "chrfpp": "nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:2.6.0",
            },
        },
        "test": {"set-a": {"bleu": 10.5, "chrf": 39.0, "chrfpp": 37.0, "ter": 72.0, "n_lines": 9}},
    }
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps(scores), encoding="utf-8")
    card = (export_hf(model_dir, tmp_path / "hf", metrics=metrics) / "README.md").read_text(encoding="utf-8")
    assert "| val | 16 | 12.3 | 40.1 | 38.2 | 70.0 |" in card and "| set-a | 9 | 10.5 |" in card
    assert "nw:2" in card and "tok:13a" in card
    assert "train: multi30k-train" in card and "norm:" in card and "pipeline commit:" in card


def test_an_imported_marian_exported_back_decodes_to_the_originals_text(
    marian_dir: Path, imported: Path, tmp_path: Path
) -> None:
    """transformers → import-hf → export-hf → transformers, as a user fine-tuning OPUS-MT goes: the
    text batch_decode(skip_special_tokens=True) gives is the original's, with no start token in it."""
    out = export_hf(imported, tmp_path / "hf")
    original = hf_translate(marian_dir, TEST_SET, beam=1)
    assert hf_translate(out, TEST_SET, beam=1) == original
    assert len(set(original)) > 1 and not any("<" in line for line in original)


def test_every_special_token_of_ours_is_special_to_transformers(trained: tuple[Path, Path]) -> None:
    _, out = trained
    _, tok = load(out)
    assert {PAD, UNK, BOS, EOS, SEP} <= set(tok.all_special_ids)
    assert tok.batch_decode([[BOS, SEP, EOS, PAD]], skip_special_tokens=True) == [""]
