"""Multi-head attention: the cache gives what full attention gives, and the weights path matches SDPA."""

import pytest
import torch
import torch.nn.functional as F

from pipeline.model.attention import KVCache, MultiHeadAttention, attention_with_weights
from pipeline.model.masks import causal_mask

D, H = 16, 4


def _mha(self_attention: bool) -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(D, H, dropout=0.0, self_attention=self_attention).double().eval()


def _x(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_incremental_self_attention_equals_full_causal():
    mha = _mha(True)
    x = _x(2, 6, D)  # (B, T, D)
    full = mha(x, causal=True)
    cache = KVCache()
    steps = []
    for t in range(x.size(1)):
        steps.append(mha(x[:, t : t + 1], cache=cache))
        assert cache.k.shape == cache.v.shape == (2, H, t + 1, D // H)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-12)


def test_causal_flag_equals_explicit_causal_mask():
    mha = _mha(True)
    x = _x(2, 5, D)
    torch.testing.assert_close(mha(x, causal=True), mha(x, causal_mask(5)), rtol=0, atol=1e-12)


def test_cross_attention_cache_is_computed_once_and_reused():
    mha = _mha(False)
    memory = _x(2, 7, D, seed=2)  # (B, S, D)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])[:, None, None, :]  # (B, 1, 1, S)
    calls = []
    mha.kv.register_forward_hook(lambda *_: calls.append(1))
    cache = KVCache()
    queries = [_x(2, 1, D, seed=10 + t) for t in range(3)]
    outputs = [mha(queries[0], mask, memory=memory, cache=cache)]
    k, v = cache.k, cache.v
    assert k.shape == (2, H, 7, D // H)
    # Later steps pass no memory at all: the cached keys and values are all they need.
    outputs += [mha(q, mask, memory=None, cache=cache) for q in queries[1:]]
    assert len(calls) == 1
    assert cache.k is k and cache.v is v
    uncached = [mha(q, mask, memory=memory) for q in queries]
    for got, want in zip(outputs, uncached):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_reorder_selects_rows_in_order():
    k, v = _x(3, H, 5, D // H, seed=3), _x(3, H, 5, D // H, seed=4)
    cache = KVCache(k.clone(), v.clone())
    index = torch.tensor([2, 0, 0, 1])
    cache.reorder(index)
    assert torch.equal(cache.k, k[index]) and torch.equal(cache.v, v[index])


def test_reorder_of_an_empty_cache_is_a_no_op():
    cache = KVCache()
    cache.reorder(torch.tensor([0, 0]))
    assert cache.k is None and cache.v is None


@pytest.mark.parametrize("masking", ["none", "padding", "causal"])
def test_attention_with_weights_equals_sdpa(masking):
    B, T, K, Dh = 2, 5, 5, 8
    q, k, v = _x(B, H, T, Dh, seed=5), _x(B, H, K, Dh, seed=6), _x(B, H, K, Dh, seed=7)
    mask = {
        "none": None,
        "padding": torch.tensor([[True] * 5, [True, True, False, False, False]])[:, None, None, :],
        "causal": causal_mask(T),
    }[masking]
    y, weights = attention_with_weights(q, k, v, mask)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=0, atol=1e-12)
    assert weights.shape == (B, H, T, K)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T, dtype=q.dtype), rtol=0, atol=1e-12)
    if mask is not None:
        hidden = ~mask.expand(B, H, T, K)
        assert torch.equal(weights[hidden], torch.zeros_like(weights[hidden]))
        assert (weights[~hidden] > 0).all()


@pytest.mark.parametrize("self_attention", [True, False])
def test_recording_gives_the_fused_output_and_keeps_the_weights(self_attention):
    mha = _mha(self_attention)
    x, memory = _x(2, 4, D, seed=8), _x(2, 6, D, seed=9)
    if self_attention:
        kwargs, mask = {"causal": True}, None
    else:
        mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])[:, None, None, :]
        kwargs = {"memory": memory}
    fused = mha(x, mask, **kwargs)
    mha.record = []
    recorded = mha(x, mask, **kwargs)
    torch.testing.assert_close(recorded, fused, rtol=0, atol=1e-12)
    (weights,) = mha.record
    assert weights.shape == (2, H, 4, 4 if self_attention else 6)
    assert not weights.requires_grad
    if self_attention:
        assert torch.equal(weights.triu(1), torch.zeros_like(weights))
    else:
        assert torch.equal(weights[1, :, :, 3:], torch.zeros(H, 4, 3, dtype=weights.dtype))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, H, dropout=0.5, self_attention=True).double()
    x = _x(2, 5, D)
    mha.eval()
    assert torch.equal(mha(x, causal=True), mha(x, causal=True))
    mha.train()
    assert not torch.allclose(mha(x, causal=True), mha(x, causal=True))


def test_self_attention_cache_fills_its_buffers_in_place_and_grows_past_them():
    steps = [(_x(3, H, t, D // H, seed=20 + t), _x(3, H, t, D // H, seed=40 + t)) for t in (2, 1, 1, 3)]
    cache = KVCache(capacity=4)
    cache.append(*steps[0])
    buffers = cache.buffers
    assert buffers[0].shape == (3, H, 4, D // H)
    cache.append(*steps[1])
    cache.append(*steps[2])
    assert cache.buffers is buffers and cache.k.data_ptr() == buffers[0].data_ptr()  # no copy while room
    cache.append(*steps[3])  # 7 positions: past the room, the buffers grow
    assert cache.buffers is not buffers and cache.buffers[0].size(2) >= 7
    assert torch.equal(cache.k, torch.cat([k for k, _ in steps], dim=2))
    assert torch.equal(cache.v, torch.cat([v for _, v in steps], dim=2))


def test_reorder_of_a_filled_cache_then_appending_follows_the_rows():
    k, v = _x(3, H, 2, D // H, seed=5), _x(3, H, 2, D // H, seed=6)
    cache = KVCache(capacity=5)
    cache.append(k, v)
    index = torch.tensor([2, 2, 0, 1])
    cache.reorder(index)
    k2, v2 = _x(4, H, 1, D // H, seed=7), _x(4, H, 1, D // H, seed=8)
    cache.append(k2, v2)
    assert cache.buffers[0].shape == (4, H, 5, D // H)
    assert torch.equal(cache.k, torch.cat([k[index], k2], dim=2))
    assert torch.equal(cache.v, torch.cat([v[index], v2], dim=2))
