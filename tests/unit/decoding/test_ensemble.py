"""Ensembles: the search reads the members' mean probability, caches follow the beams, members
are checked before anything decodes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from pipeline.data.batching import collate_src
from pipeline.decoding.ensemble import Ensemble
from pipeline.decoding.steps import length_penalty
from pipeline.decoding.translator import Translator
from pipeline.errors import UserError
from pipeline.model import checkpoint
from pipeline.tokens import BOS, EOS
from tests.support.models import make_model_dir, train_spm
from tests.unit.decoding.test_search import decode, random_seqs, tiny_model

ARCHS = ["encoder_decoder", "decoder_only"]


def mean_probability_score(models: list, seq: list[int], out: list[int], alpha: float) -> float:
    """log of the members' mean probability of out + EOS, token by token, summed and length-normalized:
    computed by teacher forcing each member apart, without Ensemble."""
    target = [*out, EOS]
    with torch.no_grad():
        probs = [
            torch.softmax(m(collate_src([seq]), torch.tensor([[BOS, *out]]))[0].float(), -1) for m in models
        ]
    mean = torch.stack(probs).mean(0)  # (T, V)
    total = float(mean[range(len(target)), target].log().sum())
    return total / length_penalty(len(target), alpha)


@pytest.mark.parametrize("arch", ARCHS)
def test_an_ensemble_of_a_model_and_its_copy_searches_as_the_model_does(arch: str) -> None:
    model = tiny_model(arch, seed=3)
    seqs = random_seqs(12, 20, seed=1)
    alone = decode(model, seqs, n_best=2)
    twice = decode(Ensemble([model, tiny_model(arch, seed=3)]).eval(), seqs, n_best=2)
    assert [[h.tokens for h in hyps] for hyps in twice] == [[h.tokens for h in hyps] for hyps in alone]
    for a, b in zip(alone, twice):
        assert [h.score for h in b] == pytest.approx([h.score for h in a], abs=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_ensemble_hypotheses_are_scored_by_the_members_mean_probability(arch: str) -> None:
    members = [tiny_model(arch, seed=1), tiny_model(arch, seed=2), tiny_model(arch, seed=5)]
    seqs = random_seqs(6, 20, seed=4)
    found = decode(Ensemble(members).eval(), seqs, n_best=3, length_penalty=0.6)
    for seq, hyps in zip(seqs, found):
        for h in hyps:
            assert h.score == pytest.approx(mean_probability_score(members, seq, h.tokens, 0.6), abs=1e-4)
    # ...which is not any one member's search: the ensemble decodes otherwise than its first member
    assert found != decode(members[0], seqs, n_best=3, length_penalty=0.6)


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_and_uncached_ensemble_searches_agree(arch: str) -> None:
    """Each member's cache follows the beams' reorders (and finished sentences' removal)."""
    ensemble = Ensemble([tiny_model(arch, seed=1), tiny_model(arch, seed=2)]).eval()
    seqs = random_seqs(10, 20, seed=7)
    cached = decode(ensemble, seqs, beam=4, n_best=4, batch_tokens=60)  # several batches
    naive = decode(ensemble, seqs, beam=4, n_best=4, use_cache=False)
    assert [[h.tokens for h in hyps] for hyps in cached] == [[h.tokens for h in hyps] for hyps in naive]


def test_an_ensemble_takes_inputs_as_long_as_its_tightest_member_does() -> None:
    long = tiny_model(positions="learned", max_positions=64)
    short = tiny_model(positions="learned", max_positions=12, seed=1)
    sinusoidal = tiny_model(positions="sinusoidal", seed=2)
    assert Ensemble([long, short]).cfg.max_positions == 12
    mixed = Ensemble([sinusoidal, short]).cfg
    assert (mixed.positions, mixed.max_positions) == ("learned", 12)
    assert Ensemble([sinusoidal, tiny_model(positions="sinusoidal", seed=4)]).cfg.positions == "sinusoidal"
    (hyp,) = decode(Ensemble([long, short]).eval(), [list(range(4, 19)) * 2], beam=2)  # 30 ids > 11
    assert len(hyp[0].tokens) < 12  # cut to fit, not an index error in the short member's table


def test_members_of_two_architectures_are_refused() -> None:
    with pytest.raises(ValueError, match="one arch"):
        Ensemble([tiny_model("encoder_decoder"), tiny_model("decoder_only")])
    with pytest.raises(ValueError, match="at least two"):
        Ensemble([tiny_model()])


# --- model directories ------------------------------------------------------------------


def with_ensemble(model_dir: Path, *others: Path) -> Translator:
    saved = Translator.from_dir(model_dir, device="cpu").settings
    settings = dataclasses.replace(saved, ensemble=tuple(map(str, others)))
    return Translator.from_dir(model_dir, device="cpu", settings=settings)


def test_a_translator_decodes_with_the_settings_ensemble(tmp_path: Path) -> None:
    a, b = make_model_dir(tmp_path / "a", seed=0), make_model_dir(tmp_path / "b", seed=1)
    translator = with_ensemble(a, b)
    assert isinstance(translator.model, Ensemble) and len(translator.model.models) == 2
    lines = ["ein hund läuft", "", "die katze springt über die straße"]
    out = translator.translate(lines)
    assert len(out) == 3 and out[1] == ""
    ids = translator.vocab.encode_src([lines[2]])
    s = translator.settings
    direct = decode(translator.model, ids, beam=s.beam, max_len_a=s.max_len_a, max_len_b=s.max_len_b)
    assert out[2] == translator.vocab.decode_tgt(direct[0][0].tokens)


def test_a_models_own_saved_ensemble_is_never_loaded(tmp_path: Path) -> None:
    """Settings saved in model.pt name directories of the machine it trained on: only given ones count."""
    model_dir = make_model_dir(tmp_path / "model")
    payload = checkpoint.load(model_dir / checkpoint.MODEL_FILE)
    payload["params"]["decode"]["ensemble"] = [str(tmp_path / "gone")]
    checkpoint.save(model_dir / checkpoint.MODEL_FILE, payload)
    translator = Translator.from_dir(model_dir, device="cpu")
    assert not isinstance(translator.model, Ensemble) and translator.settings.ensemble == ()


def test_members_are_refused_in_one_line_before_anything_decodes(tmp_path: Path) -> None:
    a = make_model_dir(tmp_path / "a")
    other_vocab = make_model_dir(tmp_path / "other-vocab", seed=1)
    train_spm(other_vocab / "spm.model", seed=7)  # the same size, other pieces
    decoder_only = make_model_dir(tmp_path / "decoder-only", arch="decoder_only", seed=2)
    (tmp_path / "empty").mkdir()
    b = make_model_dir(tmp_path / "b", seed=3)
    cases = {  # after "decode.ensemble[0]: <path>"
        tmp_path / "empty": r"empty is not a model directory \(it has no model.pt\)",
        other_vocab: r"other-vocab/spm.model is not .*a/spm.model: another vocabulary",
        decoder_only: r" is a model.arch=decoder_only model, .* a model.arch=encoder_decoder one",
        a: r" is the model itself",
    }
    for member, message in cases.items():
        with pytest.raises(UserError, match=r"^decode.ensemble\[0\]: .*" + message):
            with_ensemble(a, member)
    with pytest.raises(UserError, match=r"decode.ensemble\[1\]: .* is listed twice"):
        with_ensemble(a, b, tmp_path / "b" / ".." / "b")
