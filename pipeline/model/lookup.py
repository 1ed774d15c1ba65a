"""Embedding lookups that train bitwise the same run after run under torch.compile on CPU.

Inductor lowers an embedding's backward to an accumulating index_put, which its CPU kernels sum
with atomic adds from several threads: rows that repeat in a batch add up in an order that
changes from run to run, so two compiled trainings (or a run and its resume) drift apart from the
first update. Compiled, `lookup` goes through two opaque ops instead, the forward gather and aten's
own CPU backward (which is deterministic), so inductor fuses everything around them and nothing in
them; eager, it is the module's own call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


@torch.library.custom_op("pipeline::embedding_backward", mutates_args=())
def embedding_backward(grad: torch.Tensor, ids: torch.Tensor, rows: int, padding_idx: int) -> torch.Tensor:
    """The weight's gradient (rows, D) of an embedding lookup, by aten's kernel."""
    return torch.ops.aten.embedding_dense_backward(grad, ids, rows, padding_idx, False)


@embedding_backward.register_fake
def _(grad: torch.Tensor, ids: torch.Tensor, rows: int, padding_idx: int) -> torch.Tensor:
    return grad.new_empty((rows, grad.size(-1)))


@torch.library.custom_op("pipeline::embedding", mutates_args=())
def embedding(weight: torch.Tensor, ids: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """F.embedding(ids, weight) (padding_idx -1: none), as one op torch.compile keeps whole."""
    return F.embedding(ids, weight, None if padding_idx < 0 else padding_idx)


@embedding.register_fake
def _(weight: torch.Tensor, ids: torch.Tensor, padding_idx: int) -> torch.Tensor:
    return weight.new_empty((*ids.shape, weight.size(1)))


def _setup(ctx, inputs, output) -> None:
    weight, ids, padding_idx = inputs
    ctx.save_for_backward(ids)
    ctx.rows, ctx.padding_idx = weight.size(0), padding_idx


def _backward(ctx, grad: torch.Tensor):
    (ids,) = ctx.saved_tensors
    return embedding_backward(grad.contiguous(), ids, ctx.rows, ctx.padding_idx), None, None


embedding.register_autograd(_backward, setup_context=_setup)


def lookup(table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    """table(ids), through the opaque ops above when compiling for a CPU."""
    if torch.compiler.is_compiling() and ids.device.type == "cpu":
        padding = -1 if table.padding_idx is None else table.padding_idx
        return embedding(table.weight, ids, padding)
    return table(ids)
