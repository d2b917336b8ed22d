"""Module 17, graded cases: memory predictions, activation checkpointing (gradients, dropout
masks, generators, modes), CheckpointedBlock with a cache, autocast nesting, GradScaler steps.

A checkpointed computation is compared with the same computation done plainly (same seeds):
the reference gives equal values, a mistake does not. Gradients in float64.
Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.activations import tanh
from tinytorch.core.autograd import BACKWARD_RULES, no_grad
from tinytorch.core.layers import Dropout, Linear, Module, Sequential
from tinytorch.core.optimizers import SGD, Adam
from tinytorch.core.tensor import Autocast, Tensor
from tinytorch.models.transformer import GPT, LayerKVCache, TransformerBlock
from tinytorch.perf.memory import (CheckpointedBlock, GradScaler, autocast, checkpoint, checkpoint_blocks,
                                   kv_cache_bytes, training_memory)


class Noisy(Module):
    """Linear, dropout (its own seeded generator), Linear; notes whether each call records a graph."""

    def __init__(self, seed):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.first = Linear(4, 6, rng=rng, dtype=np.float64)
        self.drop = Dropout(0.4, seed=seed + 1)
        self.second = Linear(6, 3, rng=rng, dtype=np.float64)
        object.__setattr__(self, "recorded", [])  # a plain list, not registered

    def forward(self, x):
        hidden = self.first(x)
        self.recorded.append(hidden._node is not None)
        return self.second(self.drop(hidden))


def grads(module):
    return np.concatenate([p.grad.numpy().ravel() for p in module.parameters()])


def _kv_cache(rng):
    return {"bytes": [kv_cache_bytes(12, 1, 1024, 768), kv_cache_bytes(2, 3, 5, 7, "float16"),
                      kv_cache_bytes(4, 2, 9, 16, np.float64)], "bad": raised(kv_cache_bytes, 0, 1, 1, 1)}


def _training_memory(rng):
    model = Sequential(Linear(6, 10, rng=rng), Linear(10, 3, rng=rng))
    adam = training_memory(model, Adam(model), (5, 6))
    sgd = training_memory(model, SGD(model, lr=0.1, momentum=0.9), (5, 6))
    plain = training_memory(model, SGD(model, lr=0.1), (5, 6))
    keys = ["parameters", "gradients", "optimizer_state", "activations", "backward_working", "total"]
    return {"adam": [adam[k] for k in keys], "sgd": [sgd[k] for k in keys], "plain": [plain[k] for k in keys]}


def _checkpoint_gradients(rng):
    seed = int(rng.integers(1000))
    plain, wrapped = Noisy(seed), Noisy(seed)
    a = Tensor(rng.standard_normal((5, 4)), requires_grad=True)
    upstream = rng.standard_normal((5, 3))
    x_plain, x_wrapped = a * 2.0, a * 2.0  # made by an op: the small backward must stop at the copy
    out_plain = plain(x_plain)
    (out_plain * Tensor(upstream)).sum().backward()
    da_plain = a.grad.numpy().copy()
    a.grad = None
    out_wrapped = checkpoint(wrapped, x_wrapped)
    (out_wrapped * Tensor(upstream)).sum().backward()
    return {"out_plain": out_plain, "out_wrapped": out_wrapped, "grads_plain": grads(plain),
            "grads_wrapped": grads(wrapped), "da_plain": da_plain, "da_wrapped": a.grad,
            "recorded": wrapped.recorded, "next_mask_plain": plain.drop.rng.random(4),
            "next_mask_wrapped": wrapped.drop.rng.random(4)}


def _checkpoint_accumulates(rng):
    seed = int(rng.integers(1000))
    plain, wrapped = Noisy(seed), Noisy(seed)
    batches = [rng.standard_normal((3, 4)) for _ in range(2)]
    for x in batches:  # two backward passes without zero_grad: the gradients add up
        plain(Tensor(x, requires_grad=True)).sum().backward()
        checkpoint(wrapped, Tensor(x, requires_grad=True)).sum().backward()
    return {"plain": grads(plain), "wrapped": grads(wrapped)}


def _checkpoint_two_calls(rng):
    """Two checkpointed calls before one backward, summed in both orders: each recomputation must
    leave the generator where it was, so the masks drawn after backward are the plain run's."""
    seed = int(rng.integers(1000))
    first, second = rng.standard_normal((2, 4)), rng.standard_normal((3, 4))
    values = {}
    for order in ("forward", "reversed"):
        plain, wrapped = Noisy(seed), Noisy(seed)
        plain_parts = [plain(Tensor(x, requires_grad=True)).sum() for x in (first, second)]
        wrapped_parts = [checkpoint(wrapped, Tensor(x, requires_grad=True)).sum() for x in (first, second)]
        if order == "reversed":
            plain_parts, wrapped_parts = plain_parts[::-1], wrapped_parts[::-1]
        (plain_parts[0] + plain_parts[1]).backward()
        (wrapped_parts[0] + wrapped_parts[1]).backward()
        values.update({f"{order}_plain": grads(plain), f"{order}_wrapped": grads(wrapped),
                       f"{order}_next_plain": plain.drop.rng.random(3),
                       f"{order}_next_wrapped": wrapped.drop.rng.random(3)})
    return values


def _checkpoint_backward_modes(rng):
    seed = int(rng.integers(1000))
    plain, wrapped = Noisy(seed), Noisy(seed)
    plain.eval()
    wrapped.eval()
    x = rng.standard_normal((2, 4))
    plain_loss = plain(Tensor(x)).sum()
    wrapped_loss = checkpoint(wrapped, Tensor(x)).sum()
    with no_grad():  # backward() called with recording off
        plain_loss.backward()
        outcome = raised(wrapped_loss.backward)
    return {"outcome": outcome, "plain": grads(plain),
            "wrapped": grads(wrapped) if outcome == "nothing" else np.zeros(0)}


def _checkpoint_function(rng):
    w = Tensor(rng.standard_normal((3, 3)), requires_grad=True)
    x = Tensor(rng.standard_normal((2, 3)), requires_grad=True)
    out = checkpoint(lambda t: tanh(t @ w), x, params=[w])
    (out * Tensor(rng.standard_normal((2, 3)))).sum().backward()
    forgotten = checkpoint(lambda t: tanh(t @ w), Tensor(rng.standard_normal((2, 3)), requires_grad=True))
    return {"out": out, "dx": x.grad, "dw": w.grad, "params_missing": raised(forgotten.sum().backward),
            "not_a_tensor": raised(checkpoint, lambda t: (t, t), x)}


def _checkpoint_arguments(rng):
    """Plain numbers among the arguments reach the recomputation; an argument that needs no gradient gets None."""
    w = Tensor(rng.standard_normal((3, 3)), requires_grad=True)
    x = Tensor(rng.standard_normal((2, 3)), requires_grad=True)
    out = checkpoint(lambda t, factor, shift: tanh(t @ w) * factor + shift, x, 3.0, 0.5, params=[w])
    outcome = raised((out * Tensor(rng.standard_normal((2, 3)))).sum().backward)
    constant = checkpoint(lambda t: tanh(t @ w), Tensor(rng.standard_normal((2, 3))), params=[w])
    returned = BACKWARD_RULES["checkpoint"](np.ones((2, 3)), constant._node)
    return {"outcome": outcome, "dx": x.grad if x.grad is not None else np.zeros(0),
            "dw": w.grad if w.grad is not None else np.zeros(0), "none_for_constant": [g is None for g in returned]}


def _checkpoint_blocks_twice(rng):
    model = GPT(11, 8, 2, 2, 6, seed=int(rng.integers(1000)), dtype=np.float64)
    checkpoint_blocks(model)
    checkpoint_blocks(model)  # already wrapped: nothing changes
    return {"wrapped": [type(b.block).__name__ for b in model.blocks]}


def _checkpointed_block(rng):
    seed = int(rng.integers(1000))
    block = TransformerBlock(8, 2, dtype=np.float64, seed=seed)
    wrapped = CheckpointedBlock(TransformerBlock(8, 2, dtype=np.float64, seed=seed))
    prompt, token = rng.standard_normal((1, 3, 8)), rng.standard_normal((1, 1, 8))
    outputs = {}
    for label, layer in (("plain", block), ("wrapped", wrapped)):
        cache = LayerKVCache(1, 2, 6, 4, dtype=np.float64)
        with no_grad():
            layer(Tensor(prompt), cache=cache)
            outputs[label] = layer(Tensor(token), cache=cache)
        outputs[f"{label}_length"] = cache.length
    x = Tensor(rng.standard_normal((2, 4, 8)), requires_grad=True)
    wrapped(x).sum().backward()
    return {**outputs, "names": [n for n, _ in wrapped.named_parameters()][:4], "dx": x.grad}


def _autocast(rng):
    seen = [Autocast.dtype is None]
    with autocast():
        seen.append(str(Autocast.dtype))
        with autocast(enabled=False):
            seen.append(Autocast.dtype is None)
        seen.append(str(Autocast.dtype))
        product = Tensor(rng.standard_normal((2, 3)).astype(np.float32)) @ Tensor(rng.standard_normal((3, 2)).astype(np.float32))
    seen.append(Autocast.dtype is None)

    def fails():
        with autocast():
            raise KeyError("inside")

    return {"seen": seen, "product_dtype": str(product.dtype), "error": raised(fails),
            "after_error": Autocast.dtype is None, "bfloat": raised(autocast, "float32")}


def _autocast_reentered(rng):
    off, on = autocast(enabled=False), autocast()

    def nested():  # the same object entered again inside its own block
        seen = []
        with off:
            with on:
                with off:
                    seen.append(Autocast.dtype is None)
                seen.append(str(Autocast.dtype))
            seen.append(Autocast.dtype is None)
        return seen

    outcome = raised(nested)
    Autocast.dtype = None
    with autocast() as ctx:
        entered = type(ctx).__name__
    return {"outcome": outcome, "seen": nested() if outcome == "nothing" else [], "entered": entered}


def _grad_scaler_contract(rng):
    wide = GradScaler(init_scale=4.0).scale(Tensor(np.array(2.5), requires_grad=True))  # float64 stays float64
    p = Tensor(np.zeros(3, np.float32), requires_grad=True)
    p.grad = Tensor(rng.standard_normal(3).astype(np.float32) * 4)
    array = p.grad.data
    GradScaler(init_scale=4.0).unscale_(SGD([p], lr=0.1))
    top = GradScaler(init_scale=2.0**127, growth_interval=1)  # growing would overflow float32: keep the scale
    q = Tensor(np.zeros(2, np.float32), requires_grad=True)
    q.grad = Tensor(np.ones(2, np.float32))
    top.step(SGD([q], lr=0.1))
    top.update()
    return {"wide": wide, "wide_dtype": str(wide.dtype), "in_place": p.grad.data is array, "unscaled": p.grad,
            "top_scale": top.get_scale()}


def _grad_scaler(rng):
    p = Tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
    optimizer = SGD([p], lr=0.1)
    scaler = GradScaler(init_scale=1500.5, growth_factor=1.1, backoff_factor=0.3, growth_interval=2)
    plan = ["ok", "ok", "ok", "inf", "ok", "nan", "ok", "ok", "ok", "unscale-first"]
    taken, scales, weights = [], [], []
    for kind in plan:
        grad = (rng.standard_normal(4) * scaler.get_scale()).astype(np.float32)
        if kind == "inf":
            grad[1] = np.inf
        if kind == "nan":
            grad[2] = np.nan
        p.grad = Tensor(grad)
        if kind == "unscale-first":
            scaler.unscale_(optimizer)
        taken.append(scaler.step(optimizer))
        scaler.update()
        scales.append(np.float32(scaler.get_scale()).view(np.int32))  # the float32's bits: compared exactly
        weights.append(p.numpy().copy())
    half_loss = Tensor(np.array(3.0, dtype=np.float16), requires_grad=True)
    scaled = GradScaler().scale(half_loss)
    return {"taken": taken, "scale_bits": scales, "weights": np.stack(weights), "scaled": scaled,
            "scaled_dtype": str(scaled.dtype), "update_first": raised(GradScaler().update)}


def _grad_scaler_two_params(rng):
    """An inf in the FIRST of two parameters' gradients must skip the step as one in the last does."""
    first = Tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    second = Tensor(rng.standard_normal(5).astype(np.float32), requires_grad=True)
    optimizer = SGD([first, second], lr=0.2)
    scaler = GradScaler(init_scale=64.0, growth_interval=3)
    taken, weights = [], []
    for bad in (None, 0, 1, None):  # which parameter's gradient holds the inf
        grads = [(rng.standard_normal(t.shape) * 64.0).astype(np.float32) for t in (first, second)]
        if bad is not None:
            grads[bad][-1] = np.inf
        first.grad, second.grad = Tensor(grads[0]), Tensor(grads[1])
        taken.append(scaler.step(optimizer))
        scaler.update()
        weights.append(np.concatenate([first.numpy(), second.numpy()]))
    return {"taken": taken, "scale": scaler.get_scale(), "weights": np.stack(weights)}


CASES = {
    "kv-cache": (_kv_cache, "kv_cache_bytes: 2 · layers · batch · length · width · itemsize"),
    "training-memory": (_training_memory, "training_memory parts for Adam, SGD with and without momentum"),
    "checkpoint-gradients": (_checkpoint_gradients, "checkpoint of a module with dropout: same outputs, gradients, masks as plain"),
    "checkpoint-accumulates": (_checkpoint_accumulates, "two checkpointed backward passes add their gradients once each"),
    "checkpoint-two-calls": (_checkpoint_two_calls, "two checkpointed calls, one backward: generators end where the plain run's do"),
    "checkpoint-backward-modes": (_checkpoint_backward_modes, "a checkpointed backward called under no_grad still recomputes with a graph"),
    "checkpoint-function": (_checkpoint_function, "checkpoint of a function with params=[w]; a missing param or a tuple raises"),
    "checkpoint-arguments": (_checkpoint_arguments, "checkpoint with plain-number arguments; None for an argument needing no gradient"),
    "checkpoint-blocks-twice": (_checkpoint_blocks_twice, "checkpoint_blocks twice wraps each block once"),
    "checkpointed-block": (_checkpointed_block, "CheckpointedBlock uses the KV cache in generation; its names and gradients"),
    "autocast": (_autocast, "autocast nests, restores the outer state, and lets errors through"),
    "autocast-reentered": (_autocast_reentered, "one autocast object entered inside its own block; `with ... as` binds it"),
    "grad-scaler-contract": (_grad_scaler_contract, "scale keeps a float64 loss, unscale_ works in place, the scale never grows to inf"),
    "grad-scaler-two-params": (_grad_scaler_two_params, "GradScaler with two parameters: an inf in the first one's gradient skips the step"),
    "grad-scaler": (_grad_scaler, "GradScaler over 10 scripted steps: skips on inf/NaN, init 1500.5, backoff 0.3, growth 1.1 every 2"),
}
