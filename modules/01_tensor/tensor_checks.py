# %% [markdown]
# # Module 01's given code: the helpers of the inline tests
#
# Given code for the lesson `tensor_dev.py`, exported with it (`tito export 01`) to
# `tinytorch.core.tensor_checks`: small helpers the lesson's tests use to say what was
# expected, what came out and the likely cause. They take your Tensors as arguments and do
# not import `tinytorch.core.tensor` (the module you are writing). They hold no exercise:
# the student edition carries this file unchanged.

# %%
#| default_exp core.tensor_checks

# %%
#| export
from __future__ import annotations

import numpy as np


# %%
#| export
def expect_error(error: type, call, *facts: str, what: str = "the call", cause: str = "") -> str:
    """Inline-test helper: `call()` must raise `error` and its message must contain each fact.

    what  -- the call as the student should read it, e.g. "to_array([1.0, None])"
    cause -- the likely reason when nothing (or another error) is raised
    """
    why = f": {cause}" if cause else ""
    try:
        call()
    except error as err:
        missing = [fact for fact in facts if fact not in str(err)]
        assert not missing, f"{what}: the {error.__name__} must mention {missing}; it says: {err}{why}"
        return str(err)
    except Exception as err:
        raise AssertionError(f"{what} must raise {error.__name__}, but it raised {type(err).__name__}: {err}{why}") from err
    raise AssertionError(f"{what} must raise {error.__name__}, but nothing was raised{why}")


def expect_equal(got, expected, what: str, cause: str = "") -> None:
    """Inline-test helper: `got` (a Tensor, an array or numbers) must equal `expected`; the message shows both."""
    values = np.asarray(got.numpy() if hasattr(got, "numpy") else got)  # a Tensor, an array or numbers
    right = np.asarray(expected)
    if values.shape != right.shape or not np.allclose(values, right, equal_nan=True):
        raise AssertionError(f"{what}: expected {right.tolist()} (shape {right.shape}), got {values.tolist()} "
                             f"(shape {values.shape})" + (f": {cause}" if cause else ""))


def broadcast_mistake(left: tuple, right: tuple, got: tuple | None) -> str:
    """What a wrong broadcast_shape(left, right) most likely did (`got` None: it raised)."""
    n = max(len(left), len(right))
    pad = lambda shape: tuple(shape) + (1,) * (n - len(shape))  # noqa: E731 (lined up from the left)
    from_the_left = "it lined the shapes up from the LEFT: compare from the right, a missing size on the left counts as 1"
    try:
        if got == np.broadcast_shapes(pad(left), pad(right)):
            return from_the_left
    except ValueError:
        if got is None:  # lined up from the left these shapes clash: that is why it raised
            return from_the_left
    if 0 in left + right:
        return "a size 0 against 1 gives 0 (an empty batch stays empty): take the size that is not 1, not the larger"
    return "compare from the right; each pair of sizes must be equal or contain a 1, and the result takes the other"


def product(a: Tensor, b: Tensor) -> Tensor:
    """a @ b for shapes that fit: a ValueError here is a matmul that refuses a valid product."""
    try:
        return a @ b
    except ValueError as err:
        raise AssertionError(
            f"{a.shape} @ {b.shape} is a valid product, but matmul raised ValueError ({err}): the inner sizes are "
            "the left's LAST and the right's SECOND-TO-LAST (its only size when it is 1-D); the dimensions before "
            "the last two are a batch and broadcast") from None
