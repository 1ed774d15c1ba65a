"""The update step, built directly on a tiny model and hand-made batches (no files): its arithmetic
equals a hand-written AdamW step, accumulation equals one big batch, a non-finite loss changes nothing,
and a forward wrapped from outside (tests/gpu/step.py) is the one it runs."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch

from pipeline.errors import UserError
from pipeline.model.transformer import build_model
from pipeline.training import step as step_module
from pipeline.training.step import UpdateStep, resolve_train
from tests.support.models import VOCAB, tiny_params
from tests.support.steps import make_batch, random_rows, weights

CPU = torch.device("cpu")


def make_step(seed: int = 0, model: dict | None = None, **train) -> UpdateStep:
    params = tiny_params(dict(dropout=0.0) | (model or {}), **train)
    torch.manual_seed(seed)
    return UpdateStep(resolve_train(params, CPU), build_model(params.model, VOCAB, VOCAB), CPU)


def test_an_update_is_a_hand_written_adamw_step():
    lr, warmup, wd, clip = 5e-3, 10, 0.01, 0.5
    step = make_step(optimizer="adamw", lr=lr, warmup_steps=warmup, weight_decay=wd, clip_norm=clip)
    reference = copy.deepcopy(step.model)
    decay_ids = {id(p) for p in step.optimizer.param_groups[0]["params"]}  # AdamW's decayed group
    decayed = {name for name, p in step.model.named_parameters() if id(p) in decay_ids}
    batch = make_batch(random_rows(6, seed=1))

    loss_sum, n_tokens = step.update([batch])

    assert n_tokens == batch.n_tgt_tokens
    loss = reference(batch.src, batch.tgt_in, batch.tgt_out, step.cfg.label_smoothing)
    assert loss_sum == pytest.approx(float(loss.detach()), rel=1e-6)
    (loss / n_tokens).backward()
    params = list(reference.named_parameters())
    norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for _, p in params))
    coef = min(clip / (norm + 1e-6), 1.0)
    assert coef < 1.0  # the clip acted, so it is checked too
    first_lr = lr * 1 / warmup  # warmup: update 1 of 10 gets a tenth of the peak
    (b1, b2), eps = step.cfg.betas, step.cfg.eps
    with torch.no_grad():
        for name, p in params:
            g = p.grad * coef
            m, v = (1 - b1) * g, (1 - b2) * g * g  # first moments, from zero
            m_hat, v_hat = m / (1 - b1), v / (1 - b2)
            expected = p * (1 - first_lr * wd) if name in decayed else p
            expected = expected - first_lr * m_hat / (v_hat.sqrt() + eps)
            assert torch.allclose(step.model.get_parameter(name), expected, atol=1e-6), name
    assert step.last_lr == pytest.approx(first_lr)
    assert step.optimizer.param_groups[0]["lr"] == pytest.approx(lr * 2 / warmup)  # set for update 2
    assert all(p.grad is None for p in step.model.parameters())


def test_gradient_accumulation_equals_one_big_batch():
    # Attention's key biases have a true gradient of 0 (softmax ignores a shift shared by all
    # keys), so their float noise differs between the two ways of summing; Adam with eps 1e-8
    # divides that noise by its own size and moves them by +-lr. A larger eps keeps Adam's
    # update proportional to the gradient there, and the comparison meaningful.
    split, whole = make_step(eps=1e-4), make_step(eps=1e-4)
    before = weights(split)
    for round_ in range(3):
        rows = random_rows(8, seed=round_)
        # update_freq 2: two micro-batches of different sizes and widths
        loss_a, tokens_a = split.update([make_batch(rows[:3]), make_batch(rows[3:])])
        loss_b, tokens_b = whole.update([make_batch(rows)])
        assert tokens_a == tokens_b and loss_a == pytest.approx(loss_b, rel=1e-5)
    for (name, a), b in zip(split.model.named_parameters(), whole.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert not torch.equal(split.model.out_weight, before["out_weight"])  # it did train


def test_a_non_finite_loss_is_reported_and_changes_nothing():
    step, twin = make_step(), make_step()
    good = [make_batch(random_rows(5, seed=s)) for s in range(2)]
    step.update([good[0]])
    twin.update([good[0]])
    before, optimizer = weights(step), copy.deepcopy(step.optimizer.state_dict())
    scheduler, lr = step.scheduler.state_dict(), step.last_lr

    real_net = step.net
    step.net = lambda *args: real_net(*args) * float("nan")
    assert step.update([good[1]]) is None
    step.net = real_net

    for name, tensor in weights(step).items():
        assert torch.equal(tensor, before[name]), name
    after = step.optimizer.state_dict()
    for key, state in optimizer["state"].items():
        assert all(torch.equal(state[k], after["state"][key][k]) for k in state)
    assert step.scheduler.state_dict() == scheduler and step.last_lr == lr
    assert all(p.grad is None for p in step.model.parameters())  # no NaN gradient left to accumulate
    # ... so the next update is the one a run that never met the bad batch makes.
    step.update([good[1]])
    twin.update([good[1]])
    for name, tensor in weights(step).items():
        assert torch.equal(tensor, weights(twin)[name]), name


def test_a_step_made_the_same_way_updates_bitwise_the_same():
    a, b = make_step(seed=3, model=dict(dropout=0.1)), make_step(seed=3, model=dict(dropout=0.1))
    batch = make_batch(random_rows(6, seed=4))
    torch.manual_seed(7)
    result_a = a.update([batch])
    torch.manual_seed(7)  # the dropout stream
    result_b = b.update([batch])
    assert result_a == result_b
    for name, tensor in weights(a).items():
        assert torch.equal(tensor, weights(b)[name]), name


def test_fp16_on_cpu_is_refused():
    with pytest.raises(UserError, match="fp16 needs a GPU"):
        make_step(precision="fp16")


@pytest.mark.parametrize("native, expected", [(True, "bf16"), (False, "fp32")])
def test_auto_precision_is_bf16_only_where_the_device_has_it_natively(monkeypatch, native, expected):
    monkeypatch.setattr(step_module, "native_bf16", lambda device: native)
    assert step_module.resolve_precision("auto", CPU) == expected
    assert make_step(precision="auto").cfg.precision == expected


def test_explicit_bf16_without_native_support_warns_with_the_fix(monkeypatch):
    monkeypatch.setattr(step_module, "native_bf16", lambda device: False)
    with pytest.warns(UserWarning, match=r"train.precision bf16: cpu has no native bf16.*auto"):
        assert step_module.resolve_precision("bf16", CPU) == "bf16"
    monkeypatch.setattr(step_module, "native_bf16", lambda device: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert step_module.resolve_precision("bf16", CPU) == "bf16"


@pytest.mark.parametrize(
    "precision, device, compiler, expected",
    [
        ("bf16", "cpu", True, True),  # measured 1.15-1.2x (bench/train_speed)
        ("fp32", "cpu", True, False),  # measured 0.9x
        ("bf16", "cpu", False, False),  # no C++ compiler to build inductor's kernels
        ("bf16", "cuda", True, False),  # not measured here: bench/gpu_check compares both
    ],
)
def test_auto_compile_is_on_only_where_it_was_measured_faster(
    monkeypatch, precision, device, compiler, expected
):
    monkeypatch.setattr(step_module, "cpp_compiler", lambda: compiler)
    assert step_module.resolve_compile("auto", precision, torch.device(device)) is expected
    assert step_module.resolve_compile(False, precision, torch.device(device)) is False
    if compiler or device == "cuda":
        assert step_module.resolve_compile(True, precision, torch.device(device)) is True


def test_compile_true_without_a_cpp_compiler_names_the_fix(monkeypatch):
    """Refused before training starts, not by inductor at the first update."""
    monkeypatch.setattr(step_module, "cpp_compiler", lambda: False)
    with pytest.raises(UserError, match=r"train.compile: true needs a C\+\+ compiler.*apt install g\+\+"):
        step_module.resolve_compile(True, "fp32", CPU)


def test_an_auto_compiled_step_compiles_its_forward(monkeypatch):
    monkeypatch.setattr(step_module, "native_bf16", lambda device: True)
    monkeypatch.setattr(step_module, "cpp_compiler", lambda: True)
    compiled = make_step(precision="auto", compile="auto")
    assert compiled.cfg.compile is True and compiled.net is not compiled.model
    eager = make_step(precision="fp32", compile="auto")
    assert eager.cfg.compile is False and eager.net is eager.model


def test_compiled_updates_on_two_threads_are_the_same_every_run():
    """Inductor's CPU embedding backward sums repeated rows with atomic adds across threads, in an
    order that changes run to run; pipeline.model.lookup keeps aten's deterministic one. In the
    precision train.precision auto picks here, as the pipeline compiles by default: bf16 where the
    CPU multiplies it natively, fp32 elsewhere (where compiled bf16 does not repeat:
    docs/exact-resume.md)."""
    precision = step_module.resolve_precision("auto", CPU)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        batches = [make_batch(random_rows(64, seed) * 4) for seed in range(3)]  # ids repeat often
        runs = []
        for _ in range(2):
            step = make_step(model=dict(d_model=64, d_ff=128), precision=precision, compile=True)
            for batch in batches:
                step.update([batch])
            runs.append(weights(step))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0]), [
        k for k in runs[0] if not torch.equal(runs[0][k], runs[1][k])
    ]
