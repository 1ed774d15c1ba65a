"""CTranslate2 export and backend: the same tokens and scores as the torch decoder, on tiny random models."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

pytest.importorskip("ctranslate2")

from pipeline.data.batching import collate_src
from pipeline.decoding import translator as tr
from pipeline.decoding.search import translate_ids
from pipeline.decoding.steps import Hypothesis, length_penalty
from pipeline.errors import UserError
from pipeline.interop import ct2
from pipeline.model import checkpoint
from pipeline.model.transformer import Seq2SeqBase
from pipeline.stages import translate as translate_stage
from pipeline.tokens import BOS, EOS, N_SPECIAL
from tests.support.models import CT2_MAX_LEN, make_ct2_model_dir
from tests.support.repo import BASE

# (norm, positions, tie_embeddings, activation, seed): every mapping the export makes, each
# with a seed whose outputs vary between inputs and mostly end before the length limit.
CONFIGS = [
    ("pre", "sinusoidal", "all", "relu", 0),
    ("post", "learned", "none", "gelu", 0),
    ("pre", "learned", "target", "gelu", 1),
    ("post", "sinusoidal", "none", "relu", 1),
    ("post", "sinusoidal_marian", "all", "swish", 0),  # an imported OPUS-MT model's settings
]
MAX_LEN_A, MAX_LEN_B = CT2_MAX_LEN


def random_seqs(n: int, vocab: int, seed: int = 0, longest: int = 10) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(N_SPECIAL, vocab) for _ in range(rng.randint(1, longest))] for _ in range(n)]


def torch_decode(
    model: Seq2SeqBase, seqs: list[list[int]], beam: int, n_best: int = 1, no_repeat_ngram_size: int = 0
) -> list[list[Hypothesis]]:
    settings = dataclasses.replace(
        BASE.decode,
        beam=beam,
        length_penalty=1.0,
        max_len_a=MAX_LEN_A,
        max_len_b=MAX_LEN_B,
        batch_tokens=2000,
        n_best=n_best,
        no_repeat_ngram_size=no_repeat_ngram_size,
    )
    return translate_ids(model, seqs, settings, device="cpu")


def teacher_forced_score(model: Seq2SeqBase, src: list[int], out: list[int], alpha: float = 1.0) -> float:
    """log p(out + EOS | src) / GNMT penalty, by one full forward pass."""
    with torch.no_grad():
        logits = model(collate_src([src]), torch.tensor([[BOS, *out]]))  # (1, T, V)
    lprobs = F.log_softmax(logits.float(), dim=-1)[0]
    total = float(lprobs.gather(1, torch.tensor([[*out, EOS]]).T).sum())
    return total / length_penalty(len(out) + 1, alpha)


def settings(ct: ct2.CT2Translator, beam: int, n_best: int = 1, no_repeat_ngram_size: int = 0):
    return dataclasses.replace(
        ct.settings, beam=beam, n_best=n_best, batch_tokens=2000, no_repeat_ngram_size=no_repeat_ngram_size
    )


@pytest.fixture(scope="module", params=CONFIGS, ids=["-".join(map(str, c[:4])) for c in CONFIGS])
def converted(request, tmp_path_factory) -> tuple[Seq2SeqBase, ct2.CT2Translator]:
    root = tmp_path_factory.mktemp("ct2")
    *config, seed = request.param
    model_dir, model = make_ct2_model_dir(root / "model", *config, seed=seed)
    return model, ct2.CT2Translator(ct2.export(model_dir, root / "ct2"), "cpu", exact=True)


def test_greedy_tokens_and_scores_equal_the_torch_decoder(converted) -> None:
    model, ct = converted
    seqs = random_seqs(40, ct.vocab.src_size, seed=1)
    want = torch_decode(model, seqs, beam=1)
    got = ct.search_ids(seqs, settings(ct, beam=1))
    assert [h[0].tokens for h in got] == [h[0].tokens for h in want]
    assert [h[0].score for h in got] == pytest.approx([h[0].score for h in want], abs=1e-3)
    # Hypotheses cut at the length limit are rescored with the EOS, as ours are.
    assert any(len(h[0].tokens) == int(MAX_LEN_A * len(s) + MAX_LEN_B) for h, s in zip(want, seqs))
    assert len({tuple(h[0].tokens) for h in want}) >= 8, "the outputs should differ between inputs"


def test_beam_1best_equals_the_torch_decoder_below_the_length_limit(converted) -> None:
    model, ct = converted
    seqs = random_seqs(40, ct.vocab.src_size, seed=1)
    want = torch_decode(model, seqs, beam=4, n_best=4)
    got = ct.search_ids(seqs, settings(ct, beam=4, n_best=4))
    # At the limit CT2 cannot force EOS as ours does (see ct2.py), so compare the others.
    limits = [int(MAX_LEN_A * len(s) + MAX_LEN_B) for s in seqs]
    free = [i for i, (n, hyps) in enumerate(zip(limits, want)) if all(len(h.tokens) < n for h in hyps)]
    assert len(free) >= 20
    same = [i for i in free if got[i][0].tokens == want[i][0].tokens]
    assert len(same) >= len(free) - 1, "allowing one tie"
    for i in same:
        assert got[i][0].score == pytest.approx(want[i][0].score, abs=1e-3)


@pytest.mark.parametrize("size", [1, 2])
def test_the_ngram_ban_gives_the_torch_decoders_greedy_tokens_and_scores(converted, size: int) -> None:
    model, ct = converted
    seqs = random_seqs(40, ct.vocab.src_size, seed=1)
    want = torch_decode(model, seqs, beam=1, no_repeat_ngram_size=size)
    assert [h[0].tokens for h in want] != [h[0].tokens for h in torch_decode(model, seqs, beam=1)]
    got = ct.search_ids(seqs, settings(ct, beam=1, no_repeat_ngram_size=size))
    assert [h[0].tokens for h in got] == [h[0].tokens for h in want]
    # the ban removes tokens, not probability mass: the scores stay the model's own, as ours
    assert [h[0].score for h in got] == pytest.approx([h[0].score for h in want], abs=1e-3)
    native = ct2.CT2Translator(ct.ct2_dir, "cpu")  # CT2's own search and scores
    found = native.search_ids(seqs, settings(ct, beam=1, no_repeat_ngram_size=size))
    assert [h[0].tokens for h in found] == [h[0].tokens for h in want]


def test_every_ct2_hypothesis_carries_its_exact_score(converted) -> None:
    model, ct = converted
    seqs = random_seqs(8, ct.vocab.src_size, seed=3)
    results = ct.search_ids(seqs, settings(ct, beam=4, n_best=4))
    assert sum(map(len, results)) >= 2 * len(seqs), "n-best lists, not only 1-best"
    for src, hyps in zip(seqs, results):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
        for h in hyps:
            assert len(h.tokens) <= int(MAX_LEN_A * len(src) + MAX_LEN_B)
            assert h.score == pytest.approx(teacher_forced_score(model, src, h.tokens), abs=1e-3)


def test_native_search_greedy_equals_the_torch_decoder_and_reports_ct2_scores(converted) -> None:
    """CTranslate2's own search (the default): greedy is the same argmax path as ours; its beam
    hypotheses keep their length limit and carry CT2's score, sum of log-probs / length^alpha."""
    model, exact = converted
    native = ct2.CT2Translator(exact.ct2_dir, "cpu")
    assert not native.exact
    seqs = random_seqs(40, native.vocab.src_size, seed=1)
    want = torch_decode(model, seqs, beam=1)
    got = native.search_ids(seqs, settings(native, beam=1))
    limits = [int(MAX_LEN_A * len(s) + MAX_LEN_B) for s in seqs]
    free = [i for i, (h, n) in enumerate(zip(want, limits)) if len(h[0].tokens) < n]
    assert len(free) >= 10 and all(got[i][0].tokens == want[i][0].tokens for i in free)
    beams = native.search_ids(seqs[:8], settings(native, beam=4, n_best=2))
    for src, hyps in zip(seqs[:8], beams):
        assert 1 <= len(hyps) <= 2
        for h in hyps:
            assert len(h.tokens) <= int(MAX_LEN_A * len(src) + MAX_LEN_B)
            if len(h.tokens) < int(MAX_LEN_A * len(src) + MAX_LEN_B):  # ended in EOS, scored with it
                raw = teacher_forced_score(model, src, h.tokens, alpha=0.0)
                assert h.score == pytest.approx(
                    raw / (len(h.tokens) + 1) ** native.settings.length_penalty, abs=2e-3
                )


def test_translate_keeps_blank_lines_and_order(converted) -> None:
    _, ct = converted
    lines = ["ein hund läuft", "", "  \t", "die katze springt über die straße", "der mann"]
    out = ct.translate(lines, beam=2)
    assert len(out) == 5 and out[1] == out[2] == ""
    assert out[0] == ct.translate([lines[0]], beam=2)[0]
    assert out[3] == ct.translate([lines[3]], beam=2)[0]


def test_decoder_only_is_refused_naming_the_param(tmp_path: Path) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model", arch="decoder_only")
    with pytest.raises(UserError, match=r"model.arch=decoder_only.*use --backend torch"):
        ct2.export(model_dir, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def run(args: list[str], stdin: bytes = b""):
    return CliRunner().invoke(translate_stage.command, args, input=stdin)


def test_command_with_the_ctranslate2_backend_converts_beside_the_model(tmp_path: Path) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model")
    before = sorted(p.name for p in model_dir.iterdir())
    stdin = "ein hund\n\nder mann läuft\n".encode()
    torch_out = run(["--model", str(model_dir), "--device", "cpu", "--beam", "1"], stdin)
    ct2_out = run(
        ["--model", str(model_dir), "--device", "cpu", "--beam", "1", "--backend", "ctranslate2"], stdin
    )
    assert ct2_out.exit_code == 0, ct2_out.output
    assert ct2_out.stdout == torch_out.stdout and ct2_out.stdout.split("\n")[1] == ""
    assert sorted(p.name for p in model_dir.iterdir()) == before, "a DVC output must not change"
    assert ct2.is_exported(ct2.cache_dir(model_dir, "float32"))


def test_cached_conversion_is_remade_when_the_model_changes(tmp_path: Path) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model", seed=1)
    first = ct2.CT2Translator.from_dir(model_dir, "cpu").translate(["ein hund läuft"], beam=1)
    (model_dir / checkpoint.MODEL_FILE).unlink()
    other, _ = make_ct2_model_dir(tmp_path / "other", seed=2)
    (other / checkpoint.MODEL_FILE).rename(model_dir / checkpoint.MODEL_FILE)
    again = ct2.CT2Translator.from_dir(model_dir, "cpu").translate(["ein hund läuft"], beam=1)
    assert again == tr.Translator.from_dir(model_dir, "cpu").translate(["ein hund läuft"], beam=1)
    assert again != first


def test_the_ctranslate2_backend_refuses_to_sample(tmp_path: Path) -> None:
    model_dir, _ = make_ct2_model_dir(tmp_path / "model")
    backend = ct2.CT2Translator.from_dir(model_dir, "cpu")
    with pytest.raises(UserError, match=r"^decode.sampling.enabled: the ctranslate2 backend does not sample"):
        backend.translate(["ein hund läuft"], sample=True)
