"""The mask convention (True = may attend), on small examples written out by hand."""

import torch

from pipeline.model.masks import causal_mask, causal_padding_mask, padding_mask
from pipeline.tokens import PAD

T, F = True, False


def test_padding_mask_marks_real_tokens_as_keys():
    tokens = torch.tensor([[7, 8, 9], [7, PAD, PAD]])
    mask = padding_mask(tokens)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 1, 3)  # broadcasts over heads and queries
    assert mask[:, 0, 0].tolist() == [[T, T, T], [T, F, F]]


def test_padding_mask_only_pad_is_masked():
    # Every other special token (UNK, BOS, EOS, SEP) is a real token.
    tokens = torch.tensor([[1, 2, 3, 4, PAD]])
    assert padding_mask(tokens)[0, 0, 0].tolist() == [T, T, T, T, F]


def test_causal_mask_is_lower_triangular():
    mask = causal_mask(3)
    assert mask.dtype == torch.bool
    assert mask.shape == (1, 1, 3, 3)
    assert mask[0, 0].tolist() == [
        [T, F, F],
        [T, T, F],
        [T, T, T],
    ]


def test_causal_mask_length_one_and_device():
    mask = causal_mask(1, torch.device("cpu"))
    assert mask.tolist() == [[[[T]]]]
    assert mask.device.type == "cpu"


def test_causal_padding_mask_hides_padding_in_the_middle():
    # A decoder-only row: source "a PAD", then SEP and target "b": padding sits inside.
    keep = torch.tensor([[T, F, T, T], [T, T, T, T]])
    mask = causal_padding_mask(keep)
    assert mask.dtype == torch.bool
    assert mask.shape == (2, 1, 4, 4)
    assert mask[0, 0].tolist() == [
        [T, F, F, F],
        [T, F, F, F],  # the padding query sees only real keys before it
        [T, F, T, F],
        [T, F, T, T],
    ]
    assert mask[1, 0].tolist() == causal_mask(4)[0, 0].tolist()


def test_masks_are_what_sdpa_takes():
    # torch's SDPA reads a boolean attn_mask as True = take part: a masked key gets no weight.
    q = k = torch.randn(1, 1, 3, 4)
    v = torch.zeros(1, 1, 3, 4)
    v[..., 2, :] = 100.0  # only the last key carries a signal
    keep = torch.tensor([[T, T, F]])
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal_padding_mask(keep))
    assert torch.equal(y, torch.zeros_like(y))
