"""The Transformer and its decoder-only variant, across the settings params.yaml offers.

Every model here is tiny (D=32) and random; the properties checked hold for any
weights: causality, independence from padding, tying, parameter counts,
cached decoding, recorded attention, and that each variant can learn.
Exactness checks run in float64 and eval mode (dropout off).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipeline import params
from pipeline.model import checkpoint
from pipeline.model.attention import MultiHeadAttention
from pipeline.model.transformer import (
    DecoderOnly,
    FeedForward,
    MarianSinusoidalPositions,
    SinusoidalPositions,
    Transformer,
    build_model,
    count_parameters,
)
from pipeline.params import ModelParams
from pipeline.tokens import BOS, EOS, N_SPECIAL, PAD, SEP
from tests.support.repo import REPO

BASE = params.load(REPO / "params.yaml")
VOCAB = 23
UNTIED_SRC_VOCAB = 19  # tie_embeddings: none is built with different source and target vocabularies
EXACT = {"rtol": 0.0, "atol": 1e-10}  # float64: only summation order may differ

VARIANTS: dict[str, dict] = {
    "pre-ln": {},
    "post-ln": {"norm": "post"},
    "learned-positions": {"positions": "learned"},
    "tie-target": {"tie_embeddings": "target"},
    "tie-none": {"tie_embeddings": "none"},
    "output-bias": {"output_bias": True},
    "gelu": {"activation": "gelu"},
    "marian": {"norm": "post", "positions": "sinusoidal_marian", "activation": "swish", "output_bias": True},
    "deep-shallow": {"n_layers": None, "encoder_layers": 4, "decoder_layers": 1},
    "decoder-only": {"arch": "decoder_only"},
    "decoder-only-post-learned-untied": {
        "arch": "decoder_only",
        "norm": "post",
        "positions": "learned",
        "tie_embeddings": "none",
        "output_bias": True,
    },
}
SMALL = {  # the sizes every test model shares; encoder/decoder_layers null: n_layers
    "d_model": 32,
    "n_heads": 4,
    "d_ff": 64,
    "n_layers": 2,
    "encoder_layers": None,
    "decoder_layers": None,
    "max_positions": 64,
}
ALL = list(VARIANTS)
ENCODER_DECODER = [name for name, v in VARIANTS.items() if v.get("arch") != "decoder_only"]


def small(**overrides) -> ModelParams:
    """params.yaml's model section, shrunk to D=32 and 2 layers, with `overrides` applied."""
    return dataclasses.replace(BASE.model, **{**SMALL, **overrides})


def vocabs(cfg: ModelParams) -> tuple[int, int]:
    untied = cfg.arch == "encoder_decoder" and cfg.tie_embeddings == "none"
    return (UNTIED_SRC_VOCAB if untied else VOCAB), VOCAB


def build(name: str, dtype: torch.dtype = torch.float64) -> tuple[nn.Module, int, int]:
    """A variant with seeded random weights, in eval mode: (model, src_vocab, tgt_vocab)."""
    cfg = small(**VARIANTS[name])
    src_vocab, tgt_vocab = vocabs(cfg)
    torch.manual_seed(0)
    return build_model(cfg, src_vocab, tgt_vocab).to(dtype).eval(), src_vocab, tgt_vocab


def batch(
    src_vocab: int, tgt_vocab: int, src_lens: list[int], tgt_lens: list[int], seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded src (B, S) ending in EOS, tgt_in (B, T) = BOS + words, tgt_out (B, T) = words + EOS."""
    g = torch.Generator().manual_seed(seed)
    B, S, T = len(src_lens), max(src_lens), max(tgt_lens)
    src = torch.full((B, S), PAD)
    tgt_in, tgt_out = torch.full((B, T), PAD), torch.full((B, T), PAD)
    for i, (n, m) in enumerate(zip(src_lens, tgt_lens)):
        src[i, : n - 1] = torch.randint(N_SPECIAL, src_vocab, (n - 1,), generator=g)
        src[i, n - 1] = EOS
        words = torch.randint(N_SPECIAL, tgt_vocab, (m - 1,), generator=g)
        tgt_in[i, 0], tgt_in[i, 1:m] = BOS, words
        tgt_out[i, : m - 1], tgt_out[i, m - 1] = words, EOS
    return src, tgt_in, tgt_out


def other_word(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """A different non-special id for each entry."""
    return (tokens - N_SPECIAL + 1) % (vocab - N_SPECIAL) + N_SPECIAL


# --- causality and padding --------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_later_target_tokens_do_not_change_earlier_logits(name):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [7, 5], [6, 6])
    changed = tgt_in.clone()
    changed[:, 4] = other_word(tgt_in[:, 4], tv)
    before, after = model(src, tgt_in), model(src, changed)
    torch.testing.assert_close(after[:, :4], before[:, :4], **EXACT)
    assert not torch.allclose(after[:, 4:], before[:, 4:])  # the change is seen where it may be


@pytest.mark.parametrize("name", ALL)
def test_source_padding_leaves_logits_unchanged(name):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [6, 4], [5, 3])
    padded = F.pad(src, (0, 3), value=PAD)
    torch.testing.assert_close(model(src, tgt_in), model(padded, tgt_in), **EXACT)


@pytest.mark.parametrize("name", ALL)
def test_target_padding_leaves_logits_unchanged(name):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [6, 4], [5, 3])
    T = tgt_in.size(1)
    padded = F.pad(tgt_in, (0, 3), value=PAD)
    torch.testing.assert_close(model(src, padded)[:, :T], model(src, tgt_in), **EXACT)


@pytest.mark.parametrize("name", ALL)
def test_a_padded_row_in_a_batch_equals_the_row_alone(name):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [8, 3], [6, 2])
    together = model(src, tgt_in)
    alone = model(src[1:, :3], tgt_in[1:, :2])
    torch.testing.assert_close(together[1, :2], alone[0], **EXACT)


# --- the encoder, and cross-attention --------------------------------------------------


@pytest.mark.parametrize("name", ENCODER_DECODER)
def test_encoder_is_bidirectional(name):
    model, sv, tv = build(name)
    src, _, _ = batch(sv, tv, [6, 6], [2, 2])
    changed = src.clone()
    changed[:, -1] = other_word(src[:, -1], sv)
    (memory, mask), (memory2, _) = model.encode(src), model.encode(changed)
    assert memory.shape == (2, 6, 32) and mask.shape == (2, 1, 1, 6)
    assert (memory2[:, 0] - memory[:, 0]).abs().amax(-1).min() > 1e-6  # in every row


@pytest.mark.parametrize("name", ENCODER_DECODER)
def test_cross_attention_ignores_memory_at_padded_source(name, monkeypatch):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [6, 3], [4, 4])
    memory, mask = model.encode(src)
    padded = ~mask[:, 0, 0]  # (B, S)
    noisy = memory.clone()
    noisy[padded] = 10 * torch.randn(int(padded.sum()), memory.size(-1), dtype=memory.dtype)
    real_changed = memory.clone()
    real_changed[0, 0] += 1.0
    want = model(src, tgt_in)
    monkeypatch.setattr(model, "encode", lambda _src: (noisy, mask))
    torch.testing.assert_close(model(src, tgt_in), want, **EXACT)
    monkeypatch.setattr(model, "encode", lambda _src: (real_changed, mask))
    assert not torch.allclose(model(src, tgt_in)[0], want[0])  # a real position is read

    # The module itself: masked keys get weight exactly 0.
    cross = model.decoder[0].cross_attn
    cross.record = []
    x = torch.randn(2, 4, 32, dtype=torch.float64)
    cross(x, mask, memory=noisy)
    (weights,) = cross.record
    cross.record = None
    assert torch.equal(weights[1, :, :, 3:], torch.zeros_like(weights[1, :, :, 3:]))
    assert (weights[1, :, :, :3] > 0).all()


# --- tying and parameter counts ------------------------------------------------------------


@pytest.mark.parametrize("tie", ["all", "target", "none"])
def test_tied_weights_are_one_tensor(tie):
    cfg = small(tie_embeddings=tie)
    src_vocab, tgt_vocab = vocabs(cfg)
    model = build_model(cfg, src_vocab, tgt_vocab).double()  # a dtype change must keep the ties
    src_w, tgt_w, out_w = model.src_embed.tokens.weight, model.tgt_embed.tokens.weight, model.out_weight
    assert out_w.dtype == torch.float64
    ptrs = {"src": src_w.data_ptr(), "tgt": tgt_w.data_ptr(), "out": out_w.data_ptr()}
    if tie == "all":
        assert src_w is tgt_w is out_w
        assert len(set(ptrs.values())) == 1
    elif tie == "target":
        assert tgt_w is out_w and src_w is not tgt_w
        assert ptrs["tgt"] == ptrs["out"] != ptrs["src"]
    else:
        assert src_w.shape[0] != tgt_w.shape[0]
        assert len(set(ptrs.values())) == 3


@pytest.mark.parametrize("tie", ["all", "target", "none"])
def test_decoder_only_ties_its_one_embedding_to_the_output(tie):
    model = build_model(small(arch="decoder_only", tie_embeddings=tie), VOCAB, VOCAB)
    emb, out_w = model.embed.tokens.weight, model.out_weight
    assert (emb is out_w) == (tie != "none")
    assert (emb.data_ptr() == out_w.data_ptr()) == (tie != "none")


def expected_parameters(cfg: ModelParams, src_vocab: int, tgt_vocab: int) -> int:
    """The closed-form count, derived from the architecture rather than read from the code."""
    D, Fd = cfg.d_model, cfg.d_ff
    attention = 4 * (D * D + D)  # fused QKV (3D*D + 3D) or Q + fused KV, then the output (D*D + D)
    ffn = 2 * D * Fd + Fd + D  # up (D*F + F) and down (F*D + D)
    norm = 2 * D  # LayerNorm gain and bias
    final_norm = norm if cfg.norm == "pre" else 0  # pre-LN ends each stack in a LayerNorm
    positions = cfg.max_positions * D if cfg.positions == "learned" else 0  # per embedder
    output = (tgt_vocab * D if cfg.tie_embeddings == "none" else 0) + (tgt_vocab if cfg.output_bias else 0)
    if cfg.arch == "decoder_only":
        block = attention + ffn + 2 * norm
        return tgt_vocab * D + positions + cfg.n_decoder_layers * block + final_norm + output
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = tgt_vocab * D + (0 if cfg.tie_embeddings == "all" else src_vocab * D)
    encoder = cfg.n_encoder_layers * encoder_layer + final_norm
    decoder = cfg.n_decoder_layers * decoder_layer + final_norm
    return embeddings + 2 * positions + encoder + decoder + output


COUNT_CASES = {name: small(**VARIANTS[name]) for name in ALL} | {
    "deep-10-2": small(n_layers=None, encoder_layers=10, decoder_layers=2),
    "deep-10-2-post-learned-untied-bias": small(
        n_layers=None,
        encoder_layers=10,
        decoder_layers=2,
        norm="post",
        positions="learned",
        tie_embeddings="none",
        output_bias=True,
    ),
    "decoder-only-6-learned-bias": small(
        arch="decoder_only", n_layers=6, positions="learned", output_bias=True
    ),
}


@pytest.mark.parametrize("name", list(COUNT_CASES))
def test_parameter_count_matches_closed_form(name):
    cfg = COUNT_CASES[name]
    src_vocab, tgt_vocab = vocabs(cfg)
    model = build_model(cfg, src_vocab, tgt_vocab)
    assert count_parameters(model) == expected_parameters(cfg, src_vocab, tgt_vocab)
    unique = {p.data_ptr(): p.numel() for p in model.parameters()}
    assert count_parameters(model) == sum(unique.values())  # each shared tensor once


def test_parameter_count_of_the_default_model():
    # params.yaml as shipped: D=256, F=1024, 3+3 layers, pre-LN, sinusoidal, all tied, V=8000:
    # 8000*256 + 3*789,760 + 512 + 3*1,053,440 + 512.
    cfg = BASE.model
    model = build_model(cfg, 8000, 8000)
    assert count_parameters(model) == expected_parameters(cfg, 8000, 8000) == 7_578_624


# --- training ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_every_variant_overfits_a_tiny_batch(name):
    model, sv, tv = build(name, torch.float32)
    model.train()  # with dropout: it must learn anyway
    src, tgt_in, tgt_out = batch(sv, tv, [6, 5, 4, 3], [5, 4, 4, 2])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(20):
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, tv), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.75 * losses[0], losses


# --- checkpoints -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_checkpoint_round_trip_reproduces_outputs_exactly(name, tmp_path):
    cfg = small(**VARIANTS[name])
    full = dataclasses.replace(BASE, model=cfg)
    src_vocab, tgt_vocab = vocabs(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, src_vocab, tgt_vocab).eval()
    with torch.no_grad():  # move every tensor off its init (zero biases, unit gains) so each one matters
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    src, tgt_in, _ = batch(src_vocab, tgt_vocab, [6, 4], [5, 3])
    path = tmp_path / "model.pt"
    checkpoint.save(path, checkpoint.model_payload(model, full, src_vocab, tgt_vocab, step=7))

    obj = checkpoint.load(path)
    restored, restored_params = checkpoint.restore_model(obj, path)
    restored.eval()
    assert obj["step"] == 7 and (obj["src_vocab"], obj["tgt_vocab"]) == (src_vocab, tgt_vocab)
    assert restored_params == full
    assert type(restored) is type(model)
    assert torch.equal(restored(src, tgt_in), model(src, tgt_in))
    if cfg.tie_embeddings != "none":
        embedding = restored.embed if cfg.arch == "decoder_only" else restored.tgt_embed
        assert restored.out_weight is embedding.tokens.weight


# --- recorded attention ----------------------------------------------------------------------


def _attention_modules(model: nn.Module) -> dict[str, MultiHeadAttention]:
    return {n: m for n, m in model.named_modules() if isinstance(m, MultiHeadAttention)}


def _values(module: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor | None) -> torch.Tensor:
    """The module's V (B, H, K, Dh), recomputed from its own projection."""
    if module.self_attention:
        return module._split(module.qkv(x).chunk(3, dim=-1)[2])
    return module._split(module.kv(memory).chunk(2, dim=-1)[1])


def _hidden_keys(
    model: nn.Module, name: str, src: torch.Tensor, tgt_in: torch.Tensor, K: int
) -> torch.Tensor:
    """(B, 1, T|1, K) True where a key must get weight 0: padding, and the future for causal attention."""
    if isinstance(model, DecoderOnly):
        ids = torch.cat([src, tgt_in], dim=1)  # BOS is replaced by SEP: the same padding pattern
        future = torch.ones(K, K, dtype=torch.bool).triu(1)
        return (ids == PAD)[:, None, None, :] | future
    if name.startswith("decoder.") and name.endswith("self_attn"):
        # Causality alone: target padding sits behind every real query.
        return torch.ones(K, K, dtype=torch.bool).triu(1)[None, None]
    return (src == PAD)[:, None, None, :]  # encoder self-attention and cross-attention


@pytest.mark.parametrize("name", ALL)
def test_recorded_attention_weights_agree_with_the_fused_path(name):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [6, 3], [5, 2])
    modules = _attention_modules(model)
    calls: dict[str, list] = {n: [] for n in modules}

    def capture(n: str):
        return lambda _module, args, kwargs, out: calls[n].append((args, kwargs, out))

    hooks = [m.register_forward_hook(capture(n), with_kwargs=True) for n, m in modules.items()]
    try:
        fused = model(src, tgt_in)
        with model.recording_attention() as records:
            recorded = model(src, tgt_in)
    finally:
        for hook in hooks:
            hook.remove()
    torch.testing.assert_close(recorded, fused, **EXACT)
    assert set(records) == set(modules)
    assert all(m.record is None for m in modules.values())  # recording ends with the block

    for n, module in modules.items():
        (weights,) = records[n]
        args, kwargs, out = calls[n][0]  # the fused call
        x, memory = args[0], kwargs.get("memory")
        B, H, T, K = weights.shape
        y = (weights @ _values(module, x, memory)).transpose(1, 2).reshape(B, T, -1)  # (B, T, D)
        torch.testing.assert_close(module.out(y), out, **EXACT, msg=n)
        torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T, dtype=weights.dtype), **EXACT)
        hidden = _hidden_keys(model, n, src, tgt_in, K).expand(B, H, T, K)
        assert hidden.any(), n  # the batch exercises the mask of every attention call
        assert torch.equal(weights[hidden], torch.zeros_like(weights[hidden])), n


# --- positions --------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["source", "target"])
def test_learned_positions_refuse_a_sequence_longer_than_the_table(side):
    model = build_model(small(positions="learned", max_positions=8), VOCAB, VOCAB).eval()
    src, tgt_in, _ = batch(VOCAB, VOCAB, [8], [8])
    model(src, tgt_in)  # exactly max_positions is fine
    src_len, tgt_len = (9, 8) if side == "source" else (8, 9)
    long_src, long_tgt, _ = batch(VOCAB, VOCAB, [src_len], [tgt_len])
    with pytest.raises(ValueError, match=r"model\.max_positions=8"):
        model(long_src, long_tgt)


def test_decoder_only_learned_positions_count_the_whole_sequence():
    model = build_model(small(arch="decoder_only", positions="learned", max_positions=8), VOCAB, VOCAB).eval()
    src, tgt_in, _ = batch(VOCAB, VOCAB, [4, 2], [4, 4])
    model(src, tgt_in)  # 4 + SEP + 3 = 8 real tokens: fits; padding takes no position
    src, tgt_in, _ = batch(VOCAB, VOCAB, [5, 2], [4, 4])
    with pytest.raises(ValueError, match=r"model\.max_positions=8"):
        model(src, tgt_in)


def test_sinusoidal_positions_extend_past_max_positions():
    short = build_model(small(max_positions=8), VOCAB, VOCAB).double().eval()
    wide = build_model(small(max_positions=64), VOCAB, VOCAB).double().eval()
    wide.load_state_dict(short.state_dict())  # the tables are not weights: same model
    src, tgt_in, _ = batch(VOCAB, VOCAB, [12], [10])
    torch.testing.assert_close(short(src, tgt_in), wide(src, tgt_in), **EXACT)


def test_sinusoidal_positions_past_max_positions_keep_the_model_dtype():
    model = build_model(small(max_positions=8), VOCAB, VOCAB).to(torch.bfloat16).eval()
    src, tgt_in, _ = batch(VOCAB, VOCAB, [12], [4])
    assert model(src, tgt_in).dtype == torch.bfloat16
    assert model.src_embed.positions.table.dtype == torch.bfloat16


def test_marian_positions_are_ours_with_the_sines_first_and_the_cosines_second():
    ours, marian = SinusoidalPositions(32, 50), MarianSinusoidalPositions(32, 50)
    halves = torch.cat([torch.arange(0, 32, 2), torch.arange(1, 32, 2)])
    torch.testing.assert_close(marian.table, ours.table[:, halves], rtol=0, atol=2e-5)  # ours: float32 math
    pos, i = 7, 3
    assert marian.table[pos, i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 32)), abs=1e-7)
    assert marian.table[pos, 16 + i].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 32)), abs=1e-7)


def test_swish_activation_is_silu_between_the_projections():
    ffn = FeedForward(small(activation="swish")).double()
    x = torch.randn(2, 3, 32, dtype=torch.float64)
    torch.testing.assert_close(ffn(x), ffn.down(F.silu(ffn.up(x))), **EXACT)


# --- incremental decoding -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_incremental_decoding_equals_teacher_forcing(name):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [7, 4, 5], [6, 6, 6])
    assert model.start_token == (SEP if isinstance(model, DecoderOnly) else BOS)
    want = model(src, tgt_in)  # (B, T, V)
    fed = tgt_in.clone()
    fed[:, 0] = model.start_token
    state = model.start(src)
    got = [model.step(fed[:, t : t + 1], state) for t in range(fed.size(1))]
    torch.testing.assert_close(torch.stack(got, dim=1), want, **EXACT)


@pytest.mark.parametrize("name", ["pre-ln", "decoder-only"])
def test_reordered_decoder_state_follows_the_selected_rows(name):
    model, sv, tv = build(name)
    src, tgt_in, _ = batch(sv, tv, [7, 4, 5], [5, 5, 5])
    fed = tgt_in.clone()
    fed[:, 0] = model.start_token
    want = model(src, tgt_in)
    state = model.start(src)
    for t in range(2):
        model.step(fed[:, t : t + 1], state)
    index = torch.tensor([2, 0, 0, 1])  # beam search: expand and follow survivors
    state.reorder(index)
    got = [model.step(fed[index, t : t + 1], state) for t in range(2, fed.size(1))]
    torch.testing.assert_close(torch.stack(got, dim=1), want[index, 2:], **EXACT)


def test_beams_share_their_sentence_cross_attention_cache():
    """Expand 3 sentences to 2 beams each, then drop the middle sentence: the cross-attention
    keys stay one row per sentence, and every beam still gets its teacher-forced logits."""
    model, sv, tv = build("pre-ln")
    src, tgt_in, _ = batch(sv, tv, [7, 4, 5], [6, 6, 6])
    fed = tgt_in.clone()
    fed[:, 0] = model.start_token
    want = model(src, tgt_in)  # (3, T, V)
    state = model.start(src)
    # Stored contiguous, as every step's attention reads them (a strided view would be copied each time).
    assert all(c.cross_attn.k.is_contiguous() and c.cross_attn.v.is_contiguous() for c in state.caches)
    model.step(fed[:, :1], state)
    expand = torch.tensor([0, 0, 1, 1, 2, 2])
    state.reorder(expand, beams=2)
    got = [model.step(fed[expand, t : t + 1], state) for t in (1, 2)]
    assert all(c.cross_attn.k.size(0) == 3 for c in state.caches) and state.memory_mask.size(0) == 3
    keep = torch.tensor([1, 0, 5, 4])  # rows of sentences 0 and 2, beams swapped
    state.reorder(keep)
    rows = expand[keep]
    got2 = [model.step(fed[rows, t : t + 1], state) for t in range(3, fed.size(1))]
    assert all(c.cross_attn.k.size(0) == 2 for c in state.caches)
    torch.testing.assert_close(torch.stack(got, dim=1), want[expand, 1:3], **EXACT)
    torch.testing.assert_close(torch.stack(got2, dim=1), want[rows, 3:], **EXACT)


# --- initialization and modes ---------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_initialization(arch):
    D = 64
    cfg = small(arch=arch, d_model=D, d_ff=128, positions="learned", tie_embeddings="none", output_bias=True)
    torch.manual_seed(0)
    vocab = 400
    model = build_model(cfg, vocab, vocab)
    embedders = [model.embed] if arch == "decoder_only" else [model.src_embed, model.tgt_embed]
    for embedder in embedders:
        table = embedder.tokens.weight
        assert torch.equal(table[PAD], torch.zeros(D))
        assert table[1:].std().item() == pytest.approx(D**-0.5, rel=0.05)
        assert embedder.positions.table.weight.std().item() == pytest.approx(D**-0.5, rel=0.05)
    assert model.out_weight.std().item() == pytest.approx(D**-0.5, rel=0.05)
    assert torch.equal(model.out_bias, torch.zeros(vocab))
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            assert torch.equal(module.bias, torch.zeros_like(module.bias)), name
        if isinstance(module, nn.LayerNorm):
            assert torch.equal(module.weight, torch.ones(D)), name
            assert torch.equal(module.bias, torch.zeros(D)), name
        if isinstance(module, MultiHeadAttention) and module.self_attention:
            # Xavier on each D x D block of the fused QKV, not on the 3D x D whole.
            for block in module.qkv.weight.chunk(3):
                assert block.abs().max() <= (6 / (2 * D)) ** 0.5
                assert block.std().item() == pytest.approx((2 / (2 * D)) ** 0.5, rel=0.05), name


def test_eval_mode_turns_dropout_off():
    model, sv, tv = build("pre-ln")
    src, tgt_in, _ = batch(sv, tv, [6, 4], [5, 3])
    assert torch.equal(model(src, tgt_in), model(src, tgt_in))
    model.train()
    assert not torch.equal(model(src, tgt_in), model(src, tgt_in))


def test_build_model_returns_the_architecture_asked_for():
    assert isinstance(build_model(small(), VOCAB, VOCAB), Transformer)
    assert isinstance(build_model(small(arch="decoder_only"), VOCAB, VOCAB), DecoderOnly)
    with pytest.raises(ValueError, match="joint vocabulary"):
        build_model(small(tie_embeddings="all"), UNTIED_SRC_VOCAB, VOCAB)


def test_sinusoidal_table_grows_on_demand_and_never_shrinks() -> None:
    positions = SinusoidalPositions(8, 4)
    long = positions(torch.arange(10))
    assert positions.table.size(0) == 10
    short = positions(torch.arange(3))
    assert positions.table.size(0) == 10 and torch.equal(short, long[:3])


def test_a_sinusoidal_table_grown_meanwhile_by_another_worker_is_kept(monkeypatch) -> None:
    positions = SinusoidalPositions(8, 4)
    make = positions._table

    def grown_meanwhile(n: int) -> torch.Tensor:
        positions.table = make(20)  # another decoding thread needed 20 positions in between
        return make(n)

    monkeypatch.setattr(positions, "_table", grown_meanwhile)
    got = positions(torch.arange(12))
    assert positions.table.size(0) == 20
    torch.testing.assert_close(got, make(12), rtol=0, atol=0)


# --- torch.compile: one graph, no breaks -------------------------------------------------------


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_training_forward_compiles_to_one_graph_without_breaks(arch: str, precision: str):
    """train.compile traces the loss forward whole: positions, dropout and the loss take no
    data-dependent branch under dynamo (checked with torch._dynamo.explain, on the CPU)."""
    import torch._dynamo as dynamo

    base = params.load(REPO / "params.yaml").model
    depth = {"n_layers": 2} if arch == "encoder_decoder" else {"n_layers": None, "decoder_layers": 2}
    cfg = dataclasses.replace(base, arch=arch, d_model=32, n_heads=4, d_ff=64, max_positions=64, **depth)
    torch.manual_seed(0)
    model = build_model(cfg, 50, 50).train()  # dropout on, as params.yaml sets it
    src, tgt = torch.randint(N_SPECIAL, 50, (3, 7)), torch.randint(N_SPECIAL, 50, (3, 6))
    src[0, -2:], tgt[1, -2:] = PAD, PAD  # padding: the loss must skip it without boolean indexing
    dynamo.reset()
    with torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
        found = dynamo.explain(lambda s, t: model(s, t[:, :-1], t[:, 1:], 0.1))(src, tgt)
    assert found.graph_break_count == 0, [b.reason for b in found.break_reasons]
    assert found.graph_count == 1
