# %% [markdown]
# # Module 05's given code: central differences
#
# Given code for the lesson `autograd_dev.py`, exported with it (`tito export 05`) to
# `tinytorch.testing`: the numerical gradients every backward rule is checked against, and
# `returned`, which later lessons' tests use to name a missing `return`. The lessons, the test
# suite and the benchmarks all import these, so there is one copy to trust.
# It holds no exercise: the student edition carries this file unchanged.

# %%
#| default_exp testing

# %%
#| export
# Central differences: the numerical gradients every backward rule is checked against.
# Given code, not a student exercise; the notebooks, the tests and the benchmarks all
# import these, so there is one copy to trust.
from typing import Any, Callable, Sequence

import numpy as np


def central_difference(f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """df/dx at `x`: `(f(x + eps·e_i) - f(x - eps·e_i)) / (2·eps)` for every element i.

    f   -- a function of one array shaped like x, returning a number
    x   -- the point (left unchanged); the arithmetic happens in x's dtype, so a
           float32 x shows how coarse single precision is: check in float64
    Returns an array of x's shape and dtype.
    """
    grad = np.zeros_like(x)
    flat = grad.reshape(-1)
    two_eps = x.dtype.type(2 * eps)
    for j in range(x.size):  # one element at a time: a test, not a kernel
        step = np.zeros_like(x)
        step.reshape(-1)[j] = eps
        flat[j] = (f(x + step) - f(x - step)) / two_eps
    return grad


def numeric_vjp(fn: Callable[..., Any], arrays: Sequence[np.ndarray], cotangent: np.ndarray,
                eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of `Σ cotangent ⊙ fn(*tensors)`, one gradient per input array.

    fn        -- takes one Tensor per array and returns a Tensor (only its forward runs,
                 so this needs no autograd at all)
    arrays    -- the inputs, as arrays; computed in float64
    cotangent -- an array of fn's output shape (a random one hides nothing that cancels)
    Returns [d/d arrays[0], d/d arrays[1], ...], each of its array's shape, float64.
    """
    from tinytorch.core.tensor import Tensor

    points = [np.asarray(a, dtype=np.float64) for a in arrays]
    weights = np.asarray(cotangent, dtype=np.float64)

    def total(values: list[np.ndarray]) -> float:
        return float((np.asarray(fn(*[Tensor(v) for v in values]).numpy(), dtype=np.float64) * weights).sum())

    grads = []
    for i, point in enumerate(points):
        def f(x: np.ndarray, i: int = i) -> float:
            return total([x if j == i else p for j, p in enumerate(points)])

        grads.append(central_difference(f, point, eps))
    return grads


# %%
#| export
def returned(value: Any, call: str, kind: Any) -> Any:
    """`value`, after checking that it is a `kind` (a type or a tuple of types): a function whose `return` is
    missing gives None, named here instead of as "'NoneType' object has no attribute ..." a line later."""
    names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
    assert isinstance(value, kind), (
        f"{call} returned {type(value).__name__}, expected a {names}"
        + (": the function ends without a `return` (or returns nothing on this path)" if value is None else ""))
    return value
