"""THE table of differentiable ops that module 05's tests check.

One `Case` per op (or per interesting variant): a TinyTorch function of Tensors, the
same computation in PyTorch, the input shapes and the domain each input is drawn from.
Every test file (central differences, PyTorch parity, non-contiguous inputs) iterates
over `CASES`; adding an op means adding one line here. Numerical gradients come from
`tinytorch.testing.numeric_vjp` (the one copy of central differences), and every failure
message names the case and the ops of its graph (`ops_in`).

Nothing here builds a Tensor or imports a later module at import time: forwards of
modules 02 and 04 are imported inside the case functions, so a missing or stubbed
module makes its cases fail, never the collection.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

# input domains: how to draw values where the op is smooth and well defined
DOMAINS: dict[str, Callable[[np.random.Generator, tuple], np.ndarray]] = {
    "any": lambda rng, shape: rng.standard_normal(shape),
    "positive": lambda rng, shape: rng.uniform(0.5, 2.0, shape),
    "unit": lambda rng, shape: rng.uniform(0.1, 0.9, shape),  # probabilities, away from the clip
    "away_from_zero": lambda rng, shape: rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape),
}


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable  # TinyTorch Tensors -> Tensor
    torch_fn: Callable | None  # (torch module, *torch tensors) -> torch tensor
    shapes: tuple
    domains: tuple  # one DOMAINS key per input

    def arrays(self, rng: np.random.Generator) -> list[np.ndarray]:
        return [draw(d, rng, s) for d, s in zip(self.domains, self.shapes)]


def draw(domain: str, rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """A float64 array (also for shape ()) of values from `domain`."""
    return np.asarray(DOMAINS[domain](rng, shape), dtype=np.float64)


def activations():
    return importlib.import_module("tinytorch.core.activations")


def losses():
    return importlib.import_module("tinytorch.core.losses")


# fixed non-tensor arguments (plain NumPy arrays: fine at import time)
MASK = np.array([[True, False, False, True], [False, True, False, False], [False, False, False, True]])
INDEX_REPEATS = np.array([2, 0, 2, 2, 1])
TARGETS = np.array([[0, 3, 1], [2, 2, 4]])  # for logits (2, 3, 5)
TARGETS_IGNORED = np.array([[0, -100, 1], [-100, 2, 4]])
BCE_TARGETS = np.array([[0.0, 1.0, 1.0], [0.3, 0.0, 1.0]])


def _onehot_mean_ce(torch, logits, targets, ignore_index=-100):
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), torch.as_tensor(targets).reshape(-1), ignore_index=ignore_index
    )


CASES: list[Case] = [
    # ---- module 01: arithmetic (broadcasting shapes on purpose) -------------------------
    Case("add", lambda a, b: a + b, lambda t, a, b: a + b, ((2, 3), (3,)), ("any", "any")),
    Case("add_scalar", lambda a: a + 2.5, lambda t, a: a + 2.5, ((2, 3),), ("any",)),
    Case("sub", lambda a, b: a - b, lambda t, a, b: a - b, ((2, 1), (1, 3)), ("any", "any")),
    Case("rsub_scalar", lambda a: 1.0 - a, lambda t, a: 1.0 - a, ((3,),), ("any",)),
    Case("mul", lambda a, b: a * b, lambda t, a, b: a * b, ((4, 1, 3), (2, 1)), ("any", "any")),
    Case("div", lambda a, b: a / b, lambda t, a, b: a / b, ((2, 3), (2, 1)), ("any", "away_from_zero")),
    Case("rdiv_scalar", lambda a: 2.0 / a, lambda t, a: 2.0 / a, ((2, 3),), ("away_from_zero",)),
    Case("pow", lambda a, b: a**b, lambda t, a, b: a**b, ((2, 3), (3,)), ("positive", "any")),
    Case("pow_scalar", lambda a: a**3, lambda t, a: a**3, ((2, 3),), ("any",)),
    Case("rpow_scalar", lambda a: 2.0**a, lambda t, a: 2.0**a, ((2, 3),), ("any",)),
    Case("neg", lambda a: -a, lambda t, a: -a, ((2, 3),), ("any",)),
    # ---- matmul ---------------------------------------------------------------------------
    Case("matmul", lambda a, b: a @ b, lambda t, a, b: a @ b, ((3, 4), (4, 2)), ("any", "any")),
    Case("matmul_batched", lambda a, b: a @ b, lambda t, a, b: a @ b, ((2, 3, 4), (2, 4, 5)), ("any", "any")),
    Case("matmul_broadcast_batch", lambda a, b: a @ b, lambda t, a, b: a @ b,
         ((2, 1, 3, 4), (3, 4, 2)), ("any", "any")),
    Case("matmul_shared_weight", lambda a, b: a @ b, lambda t, a, b: a @ b, ((2, 3, 3, 4), (4, 5)), ("any", "any")),
    Case("matmul_vec_left", lambda a, b: a @ b, lambda t, a, b: a @ b, ((4,), (2, 4, 3)), ("any", "any")),
    Case("matmul_vec_right", lambda a, b: a @ b, lambda t, a, b: a @ b, ((2, 3, 4), (4,)), ("any", "any")),
    Case("matmul_vec_vec", lambda a, b: a @ b, lambda t, a, b: a @ b, ((4,), (4,)), ("any", "any")),
    # ---- reductions -----------------------------------------------------------------------
    Case("sum_all", lambda a: a.sum(), lambda t, a: a.sum(), ((2, 3, 4),), ("any",)),
    Case("sum_axis", lambda a: a.sum(axis=1), lambda t, a: a.sum(dim=1), ((2, 3, 4),), ("any",)),
    Case("sum_axes_keepdims", lambda a: a.sum(axis=(0, -1), keepdims=True),
         lambda t, a: a.sum(dim=(0, 2), keepdim=True), ((2, 3, 4),), ("any",)),
    Case("mean_all", lambda a: a.mean(), lambda t, a: a.mean(), ((2, 3, 4),), ("any",)),
    Case("mean_axis", lambda a: a.mean(axis=-1), lambda t, a: a.mean(dim=-1), ((2, 3, 4),), ("any",)),
    Case("mean_keepdims", lambda a: a.mean(axis=(1, 2), keepdims=True),
         lambda t, a: a.mean(dim=(1, 2), keepdim=True), ((2, 3, 4),), ("any",)),
    Case("max_all", lambda a: a.max(), lambda t, a: a.max(), ((3, 4),), ("any",)),
    Case("max_axis", lambda a: a.max(axis=0), lambda t, a: a.max(dim=0).values, ((3, 4),), ("any",)),
    Case("max_keepdims", lambda a: a.max(axis=-1, keepdims=True),
         lambda t, a: a.max(dim=-1, keepdim=True).values, ((2, 3, 4),), ("any",)),
    # ---- elementwise functions --------------------------------------------------------------
    Case("exp", lambda a: a.exp(), lambda t, a: a.exp(), ((2, 3),), ("any",)),
    Case("log", lambda a: a.log(), lambda t, a: a.log(), ((2, 3),), ("positive",)),
    Case("sqrt", lambda a: a.sqrt(), lambda t, a: a.sqrt(), ((2, 3),), ("positive",)),
    # ---- shapes and indexing ------------------------------------------------------------------
    Case("reshape", lambda a: a.reshape(4, -1), lambda t, a: a.reshape(4, -1), ((2, 3, 2),), ("any",)),
    Case("transpose", lambda a: a.transpose(), lambda t, a: a.transpose(-2, -1), ((2, 3, 4),), ("any",)),
    Case("permute", lambda a: a.permute(2, 0, 1), lambda t, a: a.permute(2, 0, 1), ((2, 3, 4),), ("any",)),
    Case("getitem_slice", lambda a: a[1:, ::2], lambda t, a: a[1:, ::2], ((3, 5),), ("any",)),
    Case("getitem_int_none", lambda a: a[1, None, :, 2], lambda t, a: a[1, None, :, 2], ((2, 3, 4),), ("any",)),
    Case("getitem_repeats", lambda a: a[INDEX_REPEATS], lambda t, a: a[t.as_tensor(INDEX_REPEATS)],
         ((3, 2),), ("any",)),
    Case("getitem_pairs", lambda a: a[INDEX_REPEATS[:3], INDEX_REPEATS[2:] % 2],
         lambda t, a: a[t.as_tensor(INDEX_REPEATS[:3]), t.as_tensor(INDEX_REPEATS[2:] % 2)],
         ((3, 2),), ("any",)),
    Case("masked_fill", lambda a: a.masked_fill(MASK, -5.0), lambda t, a: a.masked_fill(t.as_tensor(MASK), -5.0),
         ((3, 4),), ("any",)),
    Case("masked_fill_broadcast", lambda a: a.masked_fill(MASK[0], 0.0),
         lambda t, a: a.masked_fill(t.as_tensor(MASK[0]), 0.0), ((2, 3, 4),), ("any",)),
    # ---- module 02: activations ---------------------------------------------------------------
    Case("relu", lambda a: activations().relu(a), lambda t, a: t.relu(a), ((3, 4),), ("away_from_zero",)),
    Case("sigmoid", lambda a: activations().sigmoid(a), lambda t, a: t.sigmoid(a), ((3, 4),), ("any",)),
    Case("tanh", lambda a: activations().tanh(a), lambda t, a: t.tanh(a), ((3, 4),), ("any",)),
    Case("gelu", lambda a: activations().gelu(a),
         lambda t, a: t.nn.functional.gelu(a, approximate="tanh"), ((3, 4),), ("any",)),
    Case("softmax", lambda a: activations().softmax(a, dim=-1), lambda t, a: t.softmax(a, dim=-1),
         ((2, 3, 4),), ("any",)),
    Case("softmax_dim0", lambda a: activations().softmax(a, dim=0), lambda t, a: t.softmax(a, dim=0),
         ((3, 4),), ("any",)),
    Case("log_softmax", lambda a: activations().log_softmax(a, dim=-1), lambda t, a: t.log_softmax(a, dim=-1),
         ((2, 3, 4),), ("any",)),
    Case("log_softmax_dim1", lambda a: activations().log_softmax(a, dim=1), lambda t, a: t.log_softmax(a, dim=1),
         ((2, 3, 4),), ("any",)),
    # ---- module 04: losses ------------------------------------------------------------------------
    Case("cross_entropy", lambda z: losses().CrossEntropyLoss()(z, TARGETS),
         lambda t, z: _onehot_mean_ce(t, z, TARGETS), ((2, 3, 5),), ("any",)),
    Case("cross_entropy_ignore", lambda z: losses().CrossEntropyLoss(ignore_index=-100)(z, TARGETS_IGNORED),
         lambda t, z: _onehot_mean_ce(t, z, TARGETS_IGNORED), ((2, 3, 5),), ("any",)),
    Case("binary_cross_entropy", lambda p: losses().BinaryCrossEntropyLoss()(p, BCE_TARGETS),
         lambda t, p: t.nn.functional.binary_cross_entropy(p, t.as_tensor(BCE_TARGETS)), ((2, 3),), ("unit",)),
    Case("bce_with_logits", lambda z: losses().BCEWithLogitsLoss()(z, BCE_TARGETS),
         lambda t, z: t.nn.functional.binary_cross_entropy_with_logits(z, t.as_tensor(BCE_TARGETS)),
         ((2, 3),), ("any",)),
    Case("bce_with_logits_fn", lambda z: losses().binary_cross_entropy_with_logits(z * 3.0, BCE_TARGETS),
         lambda t, z: t.nn.functional.binary_cross_entropy_with_logits(z * 3.0, t.as_tensor(BCE_TARGETS)),
         ((2, 3),), ("any",)),
    Case("cross_entropy_2d", lambda z: losses().cross_entropy(z, TARGETS[0]),
         lambda t, z: _onehot_mean_ce(t, z, TARGETS[0]), ((3, 5),), ("any",)),
    Case("mse", lambda a, b: losses().MSELoss()(a, b), lambda t, a, b: t.nn.functional.mse_loss(a, b),
         ((2, 3), (2, 3)), ("any", "any")),
]

CASE_IDS = [c.name for c in CASES]

# binary elementwise ops for the broadcasting property tests: (name, tinytorch fn, domain of b)
BINARY_OPS = {
    "add": (lambda a, b: a + b, "any", "any"),
    "sub": (lambda a, b: a - b, "any", "any"),
    "mul": (lambda a, b: a * b, "any", "any"),
    "div": (lambda a, b: a / b, "any", "away_from_zero"),
    "pow": (lambda a, b: a**b, "positive", "any"),
}


def ops_in(out) -> str:
    """The op names in `out`'s graph, output first ("mean, mul, sub"): failure messages name them."""
    names: list[str] = []
    seen: set[int] = set()
    stack = [out]
    while stack:
        t = stack.pop()
        if id(t) in seen or t._node is None:
            continue
        seen.add(id(t))
        if t._node.op not in names:
            names.append(t._node.op)
        stack.extend(t._node.inputs)
    return ", ".join(names) or "(no op recorded)"
