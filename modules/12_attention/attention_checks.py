# %% [markdown]
# # Module 12's given code: the hand example, a reference and the checks
#
# Given code for the lesson `attention_dev.py`, exported with it (`tito export 12`) to
# `tinytorch.core.attention_checks`: the hand example's numbers (`HAND_X`, `HAND_WEIGHTS`,
# `HAND_OUTPUT`), `reference_attention` (the formula in plain NumPy, float64), and the checks
# that run an attention function of yours and name the classic mistake its numbers show. The
# lesson and the tests import it; read it when a check fails and you want to see what it
# compared. It holds no exercise: the student edition carries this file unchanged.

# %%
#| default_exp core.attention_checks

# %%
#| export
# Given code for lesson 12, shared by the lesson and the tests: the hand example, a plain-NumPy
# reference, and checks that run an attention function and name the classic mistake they see.
import math
from typing import Any, Callable

import numpy as np

from tinytorch.core.tensor import Tensor, as_tensor, to_host
from tinytorch.testing import numeric_vjp

# The hand example of lesson 12, section 2: three tokens with four features, Q = K = V = HAND_X.
HAND_X = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
HAND_WEIGHTS = [[0.50648, 0.18632, 0.30720], [0.18632, 0.50648, 0.30720], [0.27407, 0.27407, 0.45186]]
HAND_OUTPUT = [[0.81368, 0.49352, 0.50648, 0.18632], [0.49352, 0.81368, 0.18632, 0.50648],
               [0.72593, 0.72593, 0.27407, 0.27407]]


class AttentionBug(AssertionError):
    """A check failed: the message says what differs and, when the numbers are exactly what a
    classic mistake produces, names that mistake."""


def reference_attention(q: Any, k: Any, v: Any, keep: Any = None, scale: float | None = None, *,
                        transpose_k: bool = True, softmax_axis: int = -1,
                        blocked_rows: str = "zero") -> tuple[np.ndarray, np.ndarray]:
    """Plain NumPy attention in float64, to compare with: returns (output, weights).

    keep  -- None, or anything broadcastable to (…, Tq, Tk) whose nonzero entries mean attend
    scale -- multiplies the scores; default 1/√dk
    The keyword-only switches reproduce classic mistakes, so that a check can say which one
    your numbers match: transpose_k=False computes Q @ K; softmax_axis=-2 normalises over the
    queries; blocked_rows="uniform" or "nan" is what a query with every key blocked gets in
    naive code (the correct result, "zero", is weights 0 and output 0).
    """
    q, k, v = (np.asarray(to_host(a), dtype=np.float64) for a in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = q @ (np.swapaxes(k, -1, -2) if transpose_k else k) * scale
    if keep is not None:
        keep = np.broadcast_to(np.asarray(to_host(keep)) != 0, scores.shape)
        scores = np.where(keep, scores, -np.inf)
    top = scores.max(softmax_axis, keepdims=True) if scores.size else scores
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(softmax_axis, keepdims=True)
    weights = e / np.where(total == 0, 1.0, total)
    if keep is not None and blocked_rows != "zero":
        nothing_visible = ~keep.any(-1, keepdims=True)
        weights = np.where(nothing_visible, np.nan if blocked_rows == "nan" else 1.0 / scores.shape[-1], weights)
    return weights @ v, weights


# %%
#| export
# The causes the forward and gradient checks name: what each classic mistake does, in a few words.
TRANSPOSE = "the scores are Q @ K instead of Q @ Kᵀ (transpose the last two axes of K)"
SCALE_BY_D = "the scores are divided by d_k instead of √d_k"
NO_SCALE = "the scores are not scaled: multiply them by 1/√d_k"
SCALE_UPSIDE_DOWN = "the scores are multiplied by √d_k instead of divided by it"
SCALE_IGNORED = "the scale= argument is ignored"
SOFTMAX_AXIS = "the softmax normalises over the queries (axis -2) instead of over the keys (axis -1)"
INVERTED = "the mask convention is inverted: 1/True must mean attend and 0/False blocked"
PADDING_ON_QUERIES = "the padding mask blocks queries instead of keys (a key padding mask has shape (B, 1, 1, Tk))"
CAUSAL_DIAGONAL = "the causal mask is off by one: it blocks the diagonal, but query i must see key i (itself)"
CAUSAL_NEXT = "the causal mask is off by one: query i sees key i+1 (the future); block exactly the keys j > i"
CAUSAL_IGNORED = "is_causal=True was ignored"
CAUSAL_UNASKED = "a causal mask was applied although is_causal=False"
CAUSAL_BOTTOM_RIGHT = ("is_causal must be aligned top-left (query i sees keys 0..i, as PyTorch's), "
                       "not bottom-right")
COMBINED_WITH_AND = ("the mask and the causal mask were combined with & on the blocked positions: "
                     "a key that either of them blocks is blocked (use |)")
MASK_IGNORED = "the mask was ignored when is_causal=True: apply both"
NAN_ROWS = ("a query whose keys are all blocked got NaN: a -inf fill makes that row's maximum -inf, and "
            "-inf - (-inf) = NaN; fill with the dtype's most negative finite number, or replace a -inf maximum")
UNIFORM_ROWS = ("a query whose keys are all blocked got weights 1/Tk instead of 0: set the weights of blocked "
                "positions to exactly 0 after the softmax")
FLOAT16_OVERFLOW = ("float16 scores overflow past 65,504 (inf, then NaN in the softmax): compute in float32, "
                    "as the fused path does, and return float16")
GRAD_SCALE = ("the gradient is missing the factor scale: the scores are scale · Q Kᵀ, so dQ = dS K · scale "
              "and dK = dSᵀ Q · scale")


def _name(fn: Any, name: str | None) -> str:
    return name or getattr(fn, "__name__", None) or "attention"


def _arrays(result: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """(output, weights or None) as float64 NumPy arrays, from (out, weights) or from out alone."""
    out, weights = result if isinstance(result, tuple) else (result, None)
    as_array = lambda t: np.asarray(to_host(t), dtype=np.float64)
    return as_array(out), None if weights is None else as_array(weights)


def _run(attn: Callable, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray | None]:
    return _arrays(attn(*args, **kwargs))


def _close(a: np.ndarray, b: np.ndarray, atol: float) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, atol=atol, rtol=1e-4, equal_nan=True))


def _matches(got: tuple, expected: tuple, atol: float) -> bool:
    """Every array the function returned (the output, and the weights when it returns them) is close."""
    return all(_close(g, e, atol) for g, e in zip(got, expected) if g is not None)


def _indices(hit: np.ndarray, size: int) -> str:
    if len(hit) == size:
        return f"all {size}" if size > 1 else "0"
    shown = ", ".join(map(str, hit[:8].tolist())) + (", ..." if len(hit) > 8 else "")
    return f"[{shown}] of {size}"


def _where_they_differ(mine: np.ndarray, right: np.ndarray, last_two: tuple, atol: float) -> str:
    """Which batch items, heads, rows and columns hold the differences, e.g. "heads [1] of 3, query rows all 5"."""
    bad = ~np.isclose(mine, right, atol=atol, rtol=1e-4, equal_nan=True)
    lead = {0: (), 1: ("batch item",), 2: ("batch item", "head")}.get(bad.ndim - 2, ("leading index",) * (bad.ndim - 2))
    parts = []
    for axis, label in enumerate(lead + last_two):
        others = tuple(i for i in range(bad.ndim) if i != axis)
        parts.append(f"{label}s {_indices(np.flatnonzero(bad.any(axis=others)), bad.shape[axis])}")
    return ", ".join(parts)


def _compare(name: str, probe: str, got: tuple, expected: tuple, causes: list, atol: float = 1e-6,
             after_weights: str = "the product weights @ V", steps: str = "section 2's table") -> None:
    """Raise AttentionBug unless `got` = (out, weights or None) matches `expected`.

    Compares every array the function returned: the output, and the weights when it returns
    them. `causes` is a list of (cause, (out, weights)) that classic mistakes would produce:
    when the numbers match one of them in everything returned (a mistake that leaves the
    weights right is recognised by its output too), the message names it. Otherwise the
    message says what differs (weights or output), where (which batch items, heads,
    positions) and by how much, and guesses nothing. Right weights with a wrong output put
    the difference in `after_weights`, the steps that come after the weights.
    """
    if _matches(got, expected, atol):
        return
    for label, mine, right in (("output", got[0], expected[0]), ("weights", got[1], expected[1])):
        if mine is not None and mine.shape != right.shape:
            raise AttentionBug(f"{name}: {label} of shape {mine.shape}, expected {right.shape} ({probe}).")
    wrong_parts = [label for label, mine, right in (("output", got[0], expected[0]), ("weights", got[1], expected[1]))
                   if mine is not None and not _close(mine, right, atol)]
    for cause, wrong in causes:
        if _matches(got, wrong, atol):
            raise AttentionBug(f"{name}: wrong {' and '.join(wrong_parts)} ({probe}): {cause}.")
    mine = got[1]
    if mine is not None and np.allclose(expected[1].sum(-1), 1) and not np.allclose(mine.sum(-1), 1):
        if np.allclose(mine.sum(-2), 1):
            raise AttentionBug(f"{name}: the weights of each query do not sum to 1, the columns do ({probe}): "
                               f"{SOFTMAX_AXIS}.")
        raise AttentionBug(f"{name}: the weights of each query must sum to 1 over the keys (axis -1); the first "
                           f"rows sum to {np.round(mine.reshape(-1, mine.shape[-1]).sum(-1)[:4], 3).tolist()} ({probe}).")
    said = []
    for label, mine, right, last_two in (("weights", got[1], expected[1], ("query row", "key column")),
                                         ("output", got[0], expected[0], ("query row", "output column"))):
        if mine is None or _close(mine, right, atol):
            continue
        finite = np.isfinite(mine)
        gap = float(np.abs(mine - right)[finite].max()) if finite.any() else float("nan")
        extra = "; it has NaN or inf where the reference is finite" if not finite.all() else ""
        said.append(f"the {label} {'differ' if label == 'weights' else 'differs'} from the reference by up to {gap:.3g} in "
                    f"{_where_they_differ(mine, right, last_two, atol)}{extra}")
    if got[1] is not None and _close(got[1], expected[1], atol):
        said.insert(0, f"the weights are right, so the difference comes after them ({after_weights})")
    raise AttentionBug(f"{name} ({probe}): {'; '.join(said)}. No classic mistake produces exactly these numbers: "
                       f"compare each step with {steps}.")


def _random(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _causal_keep(tq: int, tk: int, offset: int = 0) -> np.ndarray:
    """Keep mask of causal attention: query i sees keys j <= i + offset (top-left aligned for offset 0)."""
    return np.tril(np.ones((tq, tk), dtype=bool), k=offset)


def _unmasked_causes(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> list:
    """(cause, (output, weights)) of the classic mistakes that need no mask, for inputs q, k, v."""
    d_k = q.shape[-1]
    causes = [(SCALE_BY_D, reference_attention(q, k, v, scale=1 / d_k)),
              (NO_SCALE, reference_attention(q, k, v, scale=1.0)),
              (SCALE_UPSIDE_DOWN, reference_attention(q, k, v, scale=math.sqrt(d_k))),
              (SOFTMAX_AXIS, reference_attention(q, k, v, softmax_axis=-2)),
              (CAUSAL_UNASKED, reference_attention(q, k, v, _causal_keep(q.shape[-2], k.shape[-2])))]
    if k.shape[-1] == k.shape[-2]:  # Q @ K only runs when K is square
        causes.append((TRANSPOSE, reference_attention(q, k, v, transpose_k=False)))
    return causes


# ---- forward checks: each runs your function on small inputs and names the mistake it sees ----
def check_key_order(attn: Callable, name: str | None = None) -> None:
    """Each query is scored against each key: permuting the (key, value) pairs changes nothing."""
    name = _name(attn, name)
    q, k, v = (_random((4, 4), seed) for seed in (1, 2, 3))  # square: Q @ K would run without a shape error
    probe = "Q, K, V of shape (4, 4), no mask"
    expected = reference_attention(q, k, v)
    _compare(name, probe, _run(attn, Tensor(q), Tensor(k), Tensor(v)), expected, _unmasked_causes(q, k, v))
    order = [2, 0, 3, 1]
    moved = _run(attn, Tensor(q), Tensor(k[order]), Tensor(v[order]))[0]
    if not np.allclose(moved, expected[0], atol=1e-6):
        raise AttentionBug(f"{name}: permuting the (key, value) pairs changed the output ({probe}); "
                           "each query must be scored against each key on its own.")


def check_rows_sum_to_one(attn: Callable, name: str | None = None) -> None:
    """The weights of each query (a row) are a probability distribution over the keys."""
    name = _name(attn, name)
    q, k, v = _random((2, 5, 8), 4), _random((2, 7, 8), 5), _random((2, 7, 3), 6)
    _compare(name, "Q (2, 5, 8), K (2, 7, 8), V (2, 7, 3), no mask", _run(attn, Tensor(q), Tensor(k), Tensor(v)),
             reference_attention(q, k, v), _unmasked_causes(q, k, v))


def check_scale(attn: Callable, name: str | None = None) -> None:
    """The hand example (scale 1/√4, float32 in and out) and an explicit scale= give the reference numbers."""
    name = _name(attn, name)
    x = np.array(HAND_X, dtype=np.float64)
    result = attn(Tensor(HAND_X), Tensor(HAND_X), Tensor(HAND_X))
    _compare(name, "the hand example, Q = K = V = HAND_X", _arrays(result),
             (np.array(HAND_OUTPUT), np.array(HAND_WEIGHTS)), _unmasked_causes(x, x, x), atol=1e-5)
    dtype = (result[0] if isinstance(result, tuple) else result).dtype
    if dtype != np.float32:
        raise AttentionBug(f"{name}: float32 inputs gave a {dtype} output: keep the inputs' dtype.")
    q, k, v = _random((3, 5), 7), _random((4, 5), 8), _random((4, 2), 9)
    _compare(name, "scale=0.3", _run(attn, Tensor(q), Tensor(k), Tensor(v), scale=0.3),
             reference_attention(q, k, v, scale=0.3), [(SCALE_IGNORED, reference_attention(q, k, v))])


def check_padding(attn: Callable, name: str | None = None) -> None:
    """A (B, 1, 1, Tk) padding mask: padded keys get weight exactly 0, from every query."""
    name = _name(attn, name)
    x = _random((2, 1, 5, 4), 10)
    keep = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.float32).reshape(2, 1, 1, 5)
    probe = "Q = K = V of shape (2, 1, 5, 4), a padding mask of lengths [3, 5], shape (2, 1, 1, 5)"
    got = _run(attn, Tensor(x), Tensor(x), Tensor(x), mask=keep)
    _compare(name, probe, got, reference_attention(x, x, x, keep),
             [(INVERTED, reference_attention(x, x, x, 1 - keep)),
              (PADDING_ON_QUERIES, reference_attention(x, x, x, np.swapaxes(keep, -1, -2)))])
    if got[1] is not None and np.any(got[1][0, ..., 3:] != 0):
        raise AttentionBug(f"{name}: blocked weights must be exactly 0, got up to {np.abs(got[1][0, ..., 3:]).max():.3g} "
                           f"({probe}).")


def check_causal(attn: Callable, name: str | None = None) -> None:
    """is_causal=True, and the same mask given explicitly: query i sees keys 0..i only (top-left)."""
    name = _name(attn, name)
    x = _random((2, 6, 4), 11)
    keep = _causal_keep(6, 6)
    expected = reference_attention(x, x, x, keep)
    causes = [(CAUSAL_DIAGONAL, reference_attention(x, x, x, _causal_keep(6, 6, -1))),
              (CAUSAL_NEXT, reference_attention(x, x, x, _causal_keep(6, 6, 1))),
              (INVERTED, reference_attention(x, x, x, ~keep)),
              (CAUSAL_IGNORED, reference_attention(x, x, x))]
    _compare(name, "Q = K = V of shape (2, 6, 4), is_causal=True",
             _run(attn, Tensor(x), Tensor(x), Tensor(x), is_causal=True), expected, causes)
    _compare(name, "Q = K = V of shape (2, 6, 4), mask = the (6, 6) lower triangle of ones",
             _run(attn, Tensor(x), Tensor(x), Tensor(x), mask=keep.astype(np.float32)), expected, causes)
    q, k, v = _random((3, 4), 12), _random((5, 4), 13), _random((5, 2), 14)
    _compare(name, "Q (3, 4), K (5, 4), V (5, 2), is_causal=True (Tq < Tk)",
             _run(attn, Tensor(q), Tensor(k), Tensor(v), is_causal=True),
             reference_attention(q, k, v, _causal_keep(3, 5)),
             [(CAUSAL_BOTTOM_RIGHT, reference_attention(q, k, v, _causal_keep(3, 5, 2))),
              (CAUSAL_DIAGONAL, reference_attention(q, k, v, _causal_keep(3, 5, -1))),
              (CAUSAL_NEXT, reference_attention(q, k, v, _causal_keep(3, 5, 1))),
              (CAUSAL_IGNORED, reference_attention(q, k, v))])


def check_padding_and_causal(attn: Callable, name: str | None = None) -> None:
    """A padding mask together with is_causal=True: a key is blocked when either of them blocks it."""
    name = _name(attn, name)
    x = _random((2, 1, 6, 4), 15)
    pad = np.array([[1] * 6, [1, 1, 1, 0, 0, 0]], dtype=np.float32).reshape(2, 1, 1, 6)
    causal = _causal_keep(6, 6)
    _compare(name, "Q = K = V of shape (2, 1, 6, 4), a padding mask of lengths [6, 3] and is_causal=True",
             _run(attn, Tensor(x), Tensor(x), Tensor(x), mask=pad, is_causal=True),
             reference_attention(x, x, x, (pad != 0) & causal),
             [(COMBINED_WITH_AND, reference_attention(x, x, x, (pad != 0) | causal)),
              (MASK_IGNORED, reference_attention(x, x, x, causal)),
              (CAUSAL_IGNORED, reference_attention(x, x, x, pad))])


def _fully_blocked_probe() -> tuple:
    q, k, v = _random((2, 4, 3), 16), _random((2, 5, 3), 17), _random((2, 5, 2), 18)
    keep = np.ones((2, 4, 5), dtype=np.float32)
    keep[0, 1] = 0  # query 1 of item 0 may look at nothing
    keep[1, :, 3:] = 0  # keys 3 and 4 of item 1 are seen by nobody
    return q, k, v, keep


def check_fully_blocked(attn: Callable, name: str | None = None) -> None:
    """A query whose keys are all blocked gets weights 0 and output 0, never NaN."""
    name = _name(attn, name)
    q, k, v, keep = _fully_blocked_probe()
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        got = _run(attn, Tensor(q), Tensor(k), Tensor(v), mask=keep)
    _compare(name, "Q (2, 4, 3), K (2, 5, 3), V (2, 5, 2), query 1 of item 0 fully blocked", got,
             reference_attention(q, k, v, keep),
             [(NAN_ROWS, reference_attention(q, k, v, keep, blocked_rows="nan")),
              (UNIFORM_ROWS, reference_attention(q, k, v, keep, blocked_rows="uniform"))])


def check_float16(attn: Callable, name: str | None = None) -> None:
    """float16 in, float16 out, finite, even where q·k is far beyond float16's largest number (65,504)."""
    name = _name(attn, name)
    h = (_random((2, 6, 64), 19) * 30).astype(np.float16)  # q·q is about 57,600 on average
    keep = np.ones((6, 6), dtype=bool)
    keep[2] = False
    with np.errstate(invalid="ignore", over="ignore"):
        result = attn(Tensor(h), Tensor(h), Tensor(h), mask=keep)
    out = result[0] if isinstance(result, tuple) else result
    if out.dtype != np.float16:
        raise AttentionBug(f"{name}: float16 inputs gave a {out.dtype} output: return the inputs' dtype.")
    got = np.asarray(to_host(out), dtype=np.float64)
    if not np.isfinite(got).all():
        largest = float(np.abs(h.astype(np.float64) @ np.swapaxes(h, -1, -2).astype(np.float64)).max())
        raise AttentionBug(f"{name}: NaN or inf for float16 inputs whose q·k reaches {largest:,.0f}: "
                           f"{FLOAT16_OVERFLOW}.")
    expected = reference_attention(h, h, h, keep)[0]
    if not np.allclose(got, expected, atol=0.05 * np.abs(expected).max()):
        raise AttentionBug(f"{name}: the float16 output differs from the float64 reference by up to "
                           f"{np.abs(got - expected).max():.3g}.")


def check_shapes(attn: Callable, name: str | None = None) -> None:
    """Leading (batch, head) dims, broadcast between Q, K and V; Tq != Tk; dv != dk; plain 2-D inputs."""
    name = _name(attn, name)
    q, k, v = _random((2, 3, 5, 4), 20), _random((2, 3, 7, 4), 21), _random((2, 3, 7, 6), 22)
    for probe, args in (("Q (2, 3, 5, 4), K (2, 3, 7, 4), V (2, 3, 7, 6)", (q, k, v)),
                        ("Q (5, 4), K (7, 4), V (7, 6)", (q[0, 0], k[0, 0], v[0, 0])),
                        ("Q (2, 3, 5, 4), K (1, 3, 7, 4), V (1, 3, 7, 6): leading dims broadcast",
                         (q, k[:1], v[:1]))):
        _compare(name, probe, _run(attn, *(Tensor(a) for a in args)), reference_attention(*args), _unmasked_causes(*args))


ATTENTION_CHECKS = [check_key_order, check_rows_sum_to_one, check_scale, check_padding, check_causal,
                    check_padding_and_causal, check_fully_blocked, check_float16, check_shapes]


def check_attention(attn: Callable, name: str | None = None) -> None:
    """Every forward check above, in order; raises AttentionBug at the first that fails."""
    for check in ATTENTION_CHECKS:
        check(attn, name)


# ---- gradients -----------------------------------------------------------------------------
def _grads(attn: Callable, arrays: list, cotangent: np.ndarray, **kwargs: Any) -> list[np.ndarray]:
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    result = attn(*tensors, **kwargs)
    try:
        (result[0] if isinstance(result, tuple) else result).backward(cotangent)
    except ValueError as err:
        raise AttentionBug(f"{_name(attn, None)}: the backward pass raised ValueError ({err}) for Q {arrays[0].shape}, "
                           f"K {arrays[1].shape}: a transpose is missing or misplaced: dV = Wᵀ dO, dQ = dS K · scale, "
                           "dK = dSᵀ Q · scale") from None
    return [np.zeros(a.shape) if t.grad is None else np.asarray(to_host(t.grad), dtype=np.float64)
            for a, t in zip(arrays, tensors)]


def _output_of(attn: Callable, **kwargs: Any) -> Callable:
    def output(*tensors: Tensor) -> Tensor:
        result = attn(*tensors, **kwargs)
        return result[0] if isinstance(result, tuple) else result
    return output


def check_gradients(attn: Callable, name: str | None = None) -> None:
    """dQ, dK and dV agree with central differences (float64), with and without masks."""
    name = _name(attn, name)
    arrays = [_random((2, 3, 4), 23), _random((2, 5, 4), 24), _random((2, 5, 2), 25)]
    g = _random((2, 3, 2), 26)
    keep = np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [0, 0, 0, 0, 0]], dtype=np.float32)
    for probe, kwargs, scale in (("no mask", {}, 0.5),
                                 ("is_causal=True, scale=0.7", {"is_causal": True, "scale": 0.7}, 0.7),
                                 ("a mask with a fully blocked query", {"mask": keep}, 0.5)):
        numeric = numeric_vjp(_output_of(attn, **kwargs), arrays, g)
        mine = _grads(attn, arrays, g, **kwargs)
        for label, a, b in zip("QKV", mine, numeric):
            if np.allclose(a, b, atol=1e-6, rtol=1e-4):
                continue
            if label != "V" and np.allclose(a * scale, b, atol=1e-6, rtol=1e-4):
                raise AttentionBug(f"{name}: wrong d{label} ({probe}): {GRAD_SCALE}.")
            raise AttentionBug(f"{name}: d{label} differs from central differences by up to "
                               f"{np.abs(a - b).max():.3g} ({probe}).")


def check_fully_blocked_gradients(attn: Callable, name: str | None = None) -> None:
    """A fully blocked query, and keys nobody may see, get zero (and finite) gradients."""
    name = _name(attn, name)
    q, k, v, keep = _fully_blocked_probe()
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        dq, dk, dv = _grads(attn, [q, k, v], np.ones((2, 4, 2)), mask=keep)
    for label, grad in (("dQ", dq), ("dK", dk), ("dV", dv)):
        if not np.isfinite(grad).all():
            raise AttentionBug(f"{name}: {label} has NaN or inf where a query's keys are all blocked: {NAN_ROWS}.")
    if np.any(dq[0, 1] != 0) or np.any(dk[1, 3:] != 0) or np.any(dv[1, 3:] != 0):
        raise AttentionBug(f"{name}: a blocked query or key received a gradient: blocked positions have weight 0, "
                           "so their gradient is 0.")


GRADIENT_CHECKS = [check_gradients, check_fully_blocked_gradients]


# %%
#| export
DROPOUT_IN_EVAL = "dropout was applied with training=False (eval mode): dropout is for training only"
DROPOUT_NOT_RESCALED = "the kept weights are not rescaled by 1/(1-p)"
DROPOUT_MISSING = "dropout_p > 0 with training=True dropped no weight"
DROPOUT_BACKWARD = ("the backward ignores dropout: the forward used W = P ⊙ M/(1-p), so multiply dW = dO Vᵀ "
                    "by the same M/(1-p) before the softmax rule")
DROPOUT_DV = ("dV is computed from the probabilities before dropout: dV = Wᵀ dO with W the weights as applied to V "
              "(saved `weights`), not `probs`")


# ---- dropout (scaled_dot_product_attention's dropout_p, training and rng) -----------------------
def check_dropout(attn: Callable, name: str | None = None) -> None:
    """Dropout on the weights: only while training, rescaled by 1/(1-p), reproducible with rng=."""
    name = _name(attn, name)
    x = Tensor(np.ones((1, 40, 4)))
    uniform = 1 / 40
    v = np.arange(160.0).reshape(1, 40, 4)
    out, weights = _run(attn, x, x, Tensor(v), dropout_p=0.25, rng=2)
    if not np.allclose(out, weights @ v):  # first: every check below reads the returned weights
        raise AttentionBug(f"{name}: with dropout_p=0.25 the returned weights are not the ones applied to V "
                           "(output != weights @ V): return the weights after dropout, as applied.")
    w = _run(attn, x, x, x, dropout_p=0.25, rng=1)[1]
    values = set(np.unique(w.round(9)).tolist())
    if values == {round(uniform, 9)}:
        raise AttentionBug(f"{name}: {DROPOUT_MISSING}.")
    if values == {0.0, round(uniform, 9)}:
        raise AttentionBug(f"{name}: {DROPOUT_NOT_RESCALED} (kept weights are {uniform:.4f}, "
                           f"expected {uniform / 0.75:.4f}).")
    if values != {0.0, round(uniform / 0.75, 9)} or not 0.15 < np.mean(w == 0) < 0.35:
        raise AttentionBug(f"{name}: with dropout_p=0.25 each weight must be 0 (about a quarter of them) or "
                           f"{uniform / 0.75:.4f} (1/40 rescaled by 1/(1-p)); got values {sorted(values)[:4]}, "
                           f"{np.mean(w == 0):.0%} of them 0: p is the probability of DROPPING a weight "
                           "(keep = random >= p).")
    if not np.array_equal(w, _run(attn, x, x, x, dropout_p=0.25, rng=1)[1]):
        raise AttentionBug(f"{name}: the same rng=1 gave a different dropout mask: draw it from make_rng(rng).")
    if not np.allclose(_run(attn, x, x, x, dropout_p=0.25, training=False)[1], uniform):
        raise AttentionBug(f"{name}: {DROPOUT_IN_EVAL}.")


def _fused_rule(q, k, v, g, probs, drop, scale, with_dropout=True, dv_from_probs=False) -> list[np.ndarray]:
    """The fused backward in NumPy; the switches make the dropout mistakes (to name them)."""
    weights = probs * drop
    out = weights @ v
    d_w = g @ np.swapaxes(v, -1, -2)
    if with_dropout:
        d_w = d_w * drop
    d_s = probs * (d_w - (g * out).sum(-1, keepdims=True))
    d_v = np.swapaxes(probs if dv_from_probs else weights, -1, -2) @ g
    return [d_s @ k * scale, np.swapaxes(d_s, -1, -2) @ q * scale, d_v]


def check_dropout_backward(attn: Callable, name: str | None = None) -> None:
    """With dropout (a fixed rng), the gradients agree with central differences of the same function."""
    name = _name(attn, name)
    arrays = [_random((1, 4, 3), 27), _random((1, 5, 3), 28), _random((1, 5, 2), 29)]
    g = _random((1, 4, 2), 30)
    kwargs = {"dropout_p": 0.5, "rng": 7}
    mine = _grads(attn, arrays, g, **kwargs)
    numeric = numeric_vjp(_output_of(attn, **kwargs), arrays, g)
    if all(np.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(mine, numeric)):
        return
    probs = _run(attn, *(Tensor(a) for a in arrays), training=False)[1]
    weights = _run(attn, *(Tensor(a) for a in arrays), **kwargs)[1]
    drop = np.divide(weights, probs, out=np.zeros_like(weights), where=probs > 0)
    for cause, switch in ((DROPOUT_BACKWARD, {"with_dropout": False}), (DROPOUT_DV, {"dv_from_probs": True}),
                          (f"{DROPOUT_BACKWARD}; and {DROPOUT_DV}", {"with_dropout": False, "dv_from_probs": True})):
        wrong = _fused_rule(*arrays, g, probs, drop, 1 / math.sqrt(3), **switch)
        if all(np.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(mine, wrong)):
            raise AttentionBug(f"{name}: wrong gradients with dropout_p=0.5: {cause}.")
    worst = max(range(3), key=lambda i: np.abs(mine[i] - numeric[i]).max())
    raise AttentionBug(f"{name}: with dropout_p=0.5 (rng=7), d{'QKV'[worst]} differs from central differences "
                       f"by up to {np.abs(mine[worst] - numeric[worst]).max():.3g}.")


# %%
#| export
HEAD_SPLIT = ("the heads are split by reshaping (B, T, E) straight to (B, H, T, D): reshape to (B, T, H, D), "
              "then move the head axis in front of T")
HEAD_MERGE = ("the heads are merged by reshaping (B, H, T, D) straight to (B, T, E): move the head axis "
              "behind T first, then reshape")
MHA_DROPOUT_IN_EVAL = "MultiHeadAttention applied dropout after .eval(): pass training=self.training"
_AFTER_WEIGHTS_MHA = "v_proj, the weighted sum of the values, the merge of the heads, or out_proj"
VALUES_PROJECTED_WITH = "the values are projected with {} instead of v_proj"
OUT_PROJ_MISSING = "out_proj is missing: the merged heads (B, Tq, E) go through self.out_proj"
PADDING_AS_ATTN_MASK = ("key_padding_mask (B, Tk) was read as a (Tq, Tk) mask: it must become (B, 1, 1, Tk), "
                        "blocking the keys of its own batch item for every head and query")


# ---- multi-head attention ------------------------------------------------------------------------
def _project(linear: Any, x: np.ndarray) -> np.ndarray:
    weight = np.asarray(to_host(linear.weight), dtype=np.float64)
    bias = 0.0 if linear.bias is None else np.asarray(to_host(linear.bias), dtype=np.float64)
    return x @ weight + bias


def reference_multi_head(mha: Any, query: np.ndarray, key: np.ndarray, value: np.ndarray, keep: Any = None,
                         split: str = "right", merge: str = "right", value_proj: str = "v_proj",
                         out_proj: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """NumPy multi-head attention with `mha`'s weights: (output (B, Tq, E), weights (B, H, Tq, Tk)).

    The switches reproduce classic mistakes, so that a check can name them: split="reshape" or
    merge="reshape" (a reshape without moving the head axis), value_proj="q_proj" or "k_proj"
    (the values projected with another projection), out_proj=False (no output projection).
    """
    H = mha.num_heads
    D = mha.embed_dim // H

    def heads(x: np.ndarray) -> np.ndarray:
        B, T, _ = x.shape
        return x.reshape(B, H, T, D) if split == "reshape" else x.reshape(B, T, H, D).transpose(0, 2, 1, 3)

    q, k = heads(_project(mha.q_proj, query)), heads(_project(mha.k_proj, key))
    v = heads(_project(getattr(mha, value_proj), value))
    out, weights = reference_attention(q, k, v, keep)
    B, _, Tq, _ = out.shape
    merged = out.reshape(B, Tq, H * D) if merge == "reshape" else out.transpose(0, 2, 1, 3).reshape(B, Tq, H * D)
    return (_project(mha.out_proj, merged) if out_proj else merged), weights


def check_multi_head(mha_class: Callable, name: str = "MultiHeadAttention") -> None:
    """Cross-, causal self- and padded attention against NumPy with the module's own weights."""
    mha = mha_class(12, 3, dtype=np.float64, seed=1)
    x, memory = _random((2, 5, 12), 31), _random((2, 7, 12), 32)
    layouts = [(HEAD_SPLIT, "reshape", "right"), (HEAD_MERGE, "right", "reshape"),
               (f"{HEAD_SPLIT}; and {HEAD_MERGE}", "reshape", "reshape")]
    pad = np.array([[1] * 7, [1, 1, 1, 0, 0, 0, 0]], dtype=np.float32).reshape(2, 1, 1, 7)
    for probe, key, kwargs, keep in (
            ("cross-attention, query (2, 5, 12), key = value (2, 7, 12)", memory, {}, None),
            ("self-attention (2, 5, 12), is_causal=True", None, {"is_causal": True}, _causal_keep(5, 5)),
            ("cross-attention with a (2, 1, 1, 7) padding mask", memory, {"mask": pad}, pad)):
        context = x if key is None else key
        try:
            got = _run(mha, Tensor(x), None if key is None else Tensor(key), **kwargs)
        except ValueError as err:
            raise AttentionBug(f"{name} ({probe}) raised ValueError ({err}): the keys and values have their own "
                               "length Tk, which differs from the queries' Tq in cross-attention") from None
        causes = [(cause, reference_multi_head(mha, x, context, context, keep, split, merge))
                  for cause, split, merge in layouts]
        causes += [(VALUES_PROJECTED_WITH.format(proj), reference_multi_head(mha, x, context, context, keep, value_proj=proj))
                   for proj in ("q_proj", "k_proj")]
        causes += [(OUT_PROJ_MISSING, reference_multi_head(mha, x, context, context, keep, out_proj=False))]
        _compare(name, probe, got, reference_multi_head(mha, x, context, context, keep), causes,
                 after_weights=_AFTER_WEIGHTS_MHA, steps="section 9's diagram")


def check_key_padding_mask(mha_class: Callable, name: str = "MultiHeadAttention") -> None:
    """key_padding_mask (B, Tk) blocks padded keys of each batch item, also when B == Tq."""
    mha = mha_class(8, 2, dtype=np.float64, seed=2)
    x = _random((4, 4, 8), 35)  # B = Tq = Tk = 4: a (B, Tk) mask also fits a (Tq, Tk) reading
    keep = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=np.float32)
    for probe, kwargs, full in (
            ("self-attention (4, 4, 8), key_padding_mask of lengths [4, 2, 3, 1]", {}, keep[:, None, None, :]),
            ("the same with is_causal=True", {"is_causal": True}, keep[:, None, None, :] * _causal_keep(4, 4))):
        got = _run(mha, Tensor(x), key_padding_mask=keep, **kwargs)
        wrong = keep if not kwargs else keep * _causal_keep(4, 4)
        _compare(name, probe, got, reference_multi_head(mha, x, x, x, full),
                 [(PADDING_AS_ATTN_MASK, reference_multi_head(mha, x, x, x, wrong))],
                 after_weights=_AFTER_WEIGHTS_MHA, steps="section 9's diagram")


def check_multi_head_dropout(mha_class: Callable, name: str = "MultiHeadAttention") -> None:
    """Dropout on the weights while training, none after .eval()."""
    mha = mha_class(8, 2, dropout=0.5, seed=0)
    x = Tensor(_random((1, 6, 8), 33).astype(np.float32))
    if not np.any(_run(mha, x)[1] == 0):
        raise AttentionBug(f"{name}: dropout=0.5 in training mode dropped no weight: pass dropout_p=self.dropout.")
    mha.eval()
    weights = _run(mha, x)[1]
    mha.train()
    if np.any(weights == 0) or not np.allclose(weights.sum(-1), 1, atol=1e-5):
        raise AttentionBug(f"{name}: {MHA_DROPOUT_IN_EVAL}.")


# %%
#| export
FLASH_RESCALE = ("flash_attention does not rescale what it accumulated when a later key block raises the row "
                 "maximum: multiply row_sum and acc by exp(m_old - m_new)")


# ---- flash attention -----------------------------------------------------------------------------
def check_flash_attention(flash: Callable, name: str = "flash_attention") -> None:
    """The forward checks with one key block, then several blocks whose maxima fall or rise, then small blocks."""
    check_attention(lambda *a, **kw: flash(*a, block_size=64, **kw), f"{name} (one key block)")
    q = np.ones((1, 1, 4))
    rising = (np.linspace(-2, 2, 6)[:, None] * np.ones((1, 4)))[None]  # scores grow with the key index
    falling = rising[:, ::-1]
    v = _random((1, 6, 3), 34)
    right_when_falling = _close(_run(flash, q, falling, v, block_size=2)[0], reference_attention(q, falling, v)[0], 1e-6)
    right_when_rising = _close(_run(flash, q, rising, v, block_size=2)[0], reference_attention(q, rising, v)[0], 1e-6)
    if right_when_falling and not right_when_rising:
        raise AttentionBug(f"{name}: right when the first key block holds the largest score, wrong when a later "
                           f"one does (block_size=2): {FLASH_RESCALE}.")
    check_attention(lambda *a, **kw: flash(*a, block_size=2, **kw), f"{name} (block_size=2)")


# %%
#| export
def _keys_not_transposed(attn: Callable) -> Callable:
    """Q @ K instead of Q @ Kᵀ: give attn K already transposed, and its own transpose undoes it."""
    return lambda q, k, v, **kw: attn(q, as_tensor(k).transpose(-2, -1), v, **kw)


def _unscaled(attn: Callable) -> Callable:
    return lambda q, k, v, **kw: attn(q, k, v, **{**kw, "scale": 1.0})


def _softmax_over_queries(attn: Callable) -> Callable:
    """softmax over the queries of Q Kᵀ = the transpose of a softmax over the last axis of K Qᵀ."""
    def run(q, k, v, scale=None, **kw):
        q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        placeholder = Tensor(np.zeros(q.shape[:-1] + (1,)))  # a V of the right length; only the weights are used
        weights = attn(k, q, placeholder, scale=scale, **kw)[1].transpose(-2, -1)
        return weights @ v, weights
    return run


def _padding_on_queries(attn: Callable) -> Callable:
    return lambda q, k, v, mask=None, **kw: attn(
        q, k, v, mask=None if mask is None else np.swapaxes(to_host(mask), -1, -2), **kw)


def _explicit_causal(attn: Callable, offset: int, invert: bool) -> Callable:
    """is_causal=True turned into an explicit mask shifted by `offset` (0: right) and optionally inverted."""
    def run(q, k, v, mask=None, is_causal=False, **kw):
        q, k = as_tensor(q), as_tensor(k)
        keep = None if mask is None else np.asarray(to_host(mask)) != 0
        if is_causal:
            causal = _causal_keep(q.shape[-2], k.shape[-2], offset)
            keep = causal if keep is None else keep & causal
        if invert and keep is not None:
            keep = ~keep
        return attn(q, k, v, mask=keep, **kw)
    return run


CLASSIC_BUGS = {  # name: (make the bug with an attention function, the check that sees it, the cause it names)
    "Q @ K instead of Q @ Kᵀ": (_keys_not_transposed, check_key_order, TRANSPOSE),
    "forgotten 1/√d_k": (_unscaled, check_scale, NO_SCALE),
    "softmax over the wrong axis": (_softmax_over_queries, check_rows_sum_to_one, SOFTMAX_AXIS),
    "padding mask along the queries": (_padding_on_queries, check_padding, PADDING_ON_QUERIES),
    "flipped mask convention": (lambda attn: _explicit_causal(attn, 0, True), check_causal, INVERTED),
    "causal mask blocks the diagonal": (lambda attn: _explicit_causal(attn, -1, False), check_causal, CAUSAL_DIAGONAL),
    "causal mask sees the next token": (lambda attn: _explicit_causal(attn, 1, False), check_causal, CAUSAL_NEXT),
}


def demonstrate_bugs(attn: Callable) -> list[tuple[str, str]]:
    """[(bug, what its check says)] for each of CLASSIC_BUGS made with `attn`; raises if a check misses one."""
    said = []
    for bug, (make, check, cause) in CLASSIC_BUGS.items():
        check(attn)  # your function passes
        try:
            check(make(attn), "with the bug")
        except AttentionBug as err:
            if cause not in str(err):
                raise AssertionError(f"{check.__name__} caught '{bug}' but blamed another cause: {err}") from None
            said.append((bug, str(err)))
            continue
        raise AssertionError(f"{check.__name__} does not catch '{bug}'")
    return said


# %%
#| export
# ---- helpers of the lesson's inline tests -------------------------------------------------------
def expect_error(error: type, *calls, says: tuple = ()) -> None:
    """Inline-test helper: each call must raise `error`, and its message must contain every text in `says`."""
    for call in calls:
        try:
            call()
        except error as err:
            missing = [text for text in says if text not in str(err)]
            assert not missing, f"{error.__name__} raised, but its message lacks {missing}: {err}"
            continue
        raise AssertionError(f"expected {error.__name__} from {call}")


def grads_of(fn, arrays, cotangent):
    """(output, weights, [dQ, dK, dV]) of `fn(Q, K, V)` -> (output, weights), backward from `cotangent`."""
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    out, w = fn(*tensors)
    out.backward(cotangent)
    return out.numpy(), w.numpy(), [t.grad.numpy() for t in tensors]


def weights_rule_mistake(dq: np.ndarray, dk: np.ndarray, q: np.ndarray, k: np.ndarray, g: np.ndarray,
                         node) -> str:
    """The classic mistake of the sdpa_weights rule that gives exactly (dq, dk), if one does."""
    probs, drop, scale = node.saved["probs"], node.saved["drop"], node.saved["scale"]

    def rule(with_drop=True, with_rowsum=True, with_scale=True):
        d_p = g * drop if (drop is not None and with_drop) else g
        d_s = probs * (d_p - (d_p * probs).sum(-1, keepdims=True) if with_rowsum else d_p)
        factor = scale if with_scale else 1.0
        return d_s @ k * factor, np.swapaxes(d_s, -1, -2) @ q * factor

    for cause, switch in (("the dropout factor is missing: dP = dW ⊙ drop", {"with_drop": False}),
                          ("the softmax step lost its row sum: dS = P ⊙ (dP − rowsum(dP ⊙ P))", {"with_rowsum": False}),
                          (GRAD_SCALE, {"with_scale": False})):
        wrong_q, wrong_k = rule(**switch)
        if np.allclose(dq, wrong_q, atol=1e-8) and np.allclose(dk, wrong_k, atol=1e-8):
            return f"it matches a known mistake: {cause}"
    return "compare each step with the derivation: dP = dW ⊙ drop, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = dS K · scale"
