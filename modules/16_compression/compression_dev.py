# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 16: Compression
#
# > Fewer weights, fewer bytes, less time: four ways to make a trained model smaller, each
# > one that really trains, and each claim measured on your own code.
#
# A trained network holds more than it needs. Most of its weights can be removed, the
# matrices that remain are often close to matrices of much lower rank, and a small network
# can learn a large one's behaviour faster than it learns the data. This module builds the
# four standard techniques and measures what each one buys: parameters, bytes, time and
# accuracy.
#
# * **Pruning** removes weights. *Unstructured* pruning zeroes individual weights (the
#   smallest ones); the matrix keeps its shape, so it is smaller only if it is stored in a
#   sparse format, and NumPy's matrix product is not faster. *Structured* pruning removes
#   whole hidden units: the matrices shrink, and the speed-up is real.
# * **Low rank** replaces a weight matrix by a product of two thin ones, through its
#   singular value decomposition.
# * **Distillation** trains a small *student* to match the outputs of a large *teacher*,
#   not only the labels.
#
# Every technique here is built so that it can be trained afterwards: a pruned weight
# stays zero while the rest of the network is fine-tuned, a factorised layer is two
# ordinary Linear layers, and the distillation loss is made of recorded operations, so
# autograd differentiates it.
#
# **What you will be able to do when you finish:**
#
# * prune a layer, or many layers with one global threshold, by magnitude, with a mask the
#   forward pass applies, so that pruned weights get gradient 0 and stay 0 while you
#   fine-tune; your masks equal `torch.nn.utils.prune`'s;
# * prune gradually on Zhu & Gupta's cubic schedule, and keep a digits classifier's
#   accuracy at 90% sparsity;
# * count the bytes of a sparse matrix stored densely, as a bitmask and as CSR, and derive
#   the sparsity at which each format pays;
# * remove whole hidden units of a transformer's MLP and measure the speed-up;
# * factorise a Linear layer by SVD, check the Eckart–Young theorem on your own matrices,
#   and pick the rank from the spectrum;
# * write the distillation loss, check it against PyTorch's `kl_div`, and find out (with
#   three seeds) whether it helps a small student.
#
# **Time:** about four hours: sections 1–5 (pruning) in a first sitting, 6–9 (storage,
# structured pruning, low rank, distillation) in a second.
#
# | section | you write | what it does |
# |---|---|---|
# | 2 | `magnitude_mask` | which weights a magnitude threshold removes |
# | 3 | `masked_weight`, `apply_mask`, `prune_magnitude` | a persistent mask that the forward pass applies as a recorded multiply |
# | 4 | `prune_global`, `sparsity` | one threshold over many layers; the fraction of zeros |
# | 5 | `cubic_sparsity` | the gradual-pruning schedule |
# | 6 | `to_csr`, `storage_bytes` | compressed sparse rows, and the bytes of three formats |
# | 7 | `mlp_unit_importance`, `prune_mlp_units` | a smaller MLP without its least important hidden units |
# | 8 | `low_rank`, `choose_rank` | a Linear as two thin Linears, the rank from the spectrum |
# | 9 | `distillation_loss` | the teacher's softened outputs as a training target |
#
# **Before you start:** this module builds on your modules 01–13 through the `tinytorch`
# package (tensors and autograd, Linear and Conv2d, the losses, AdamW and the Trainer, the
# DataLoader, the GPT's MLP); `tito status` should show them passed. A stub left there
# stops this module's first cell with that module's "not implemented yet" error. Modules 14
# and 15 are not needed.
#
# The lesson works on small models that train in a second: the digits classifier of
# milestone `digits_mlp` (module 08) and MLPs of the Shakespeare GPT's shape (module 13).
# The milestone after this module, `tito milestone run compress`, puts the Shakespeare GPT
# itself through structured pruning, low rank and distillation.

# %%
#| default_exp perf.compression

# %%
#| export
from __future__ import annotations

import copy
from typing import Any, Callable, Iterable

import numpy as np

from tinytorch.core.activations import log_softmax
from tinytorch.core.autograd import no_grad
from tinytorch.core.layers import Linear, Module, Sequential
from tinytorch.core.losses import cross_entropy
from tinytorch.core.spatial import Conv2d
from tinytorch.core.tensor import Tensor, as_int, as_tensor, to_array, to_host
from tinytorch.models.transformer import MLP

# %% [markdown]
# ## 1. The model we compress
#
# The digits of milestone `digits_mlp`: 1,797 images of 8×8 pixels, the same split (1,438
# for training, 359 held out) and an MLP `64 → 128 → 64 → 10` (the milestone's, without its
# dropout) trained with AdamW and a cosine schedule (module 07's `Trainer`). It trains in
# about a second; run the cell.

# %%
import copy
import time
from pathlib import Path

from threadpoolctl import threadpool_limits

from tinytorch.core.activations import ReLU, gelu
from tinytorch.core.layers import count_parameters
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import AdamW
from tinytorch.core.training import CosineWarmupLR, Trainer, accuracy
from tinytorch.data.loader import DataLoader, TensorDataset

DIGITS = Path("../../datasets/digits.npz")
if not DIGITS.exists():  # run from the repository root
    DIGITS = Path("datasets/digits.npz")
with np.load(DIGITS, allow_pickle=False) as archive:
    images, labels = archive["images"], archive["labels"]
features = images.reshape(len(images), -1).astype(np.float32) / 16.0
order = np.random.default_rng(0).permutation(len(labels))  # the milestone's split
test_rows, train_rows = order[:359], order[359:]
x_train, y_train = features[train_rows], labels[train_rows].astype(np.int64)
x_test, y_test = features[test_rows], labels[test_rows].astype(np.int64)
threadpool_limits(limits=1)  # one BLAS thread from here on: small products run fastest, timings repeat


def digits_mlp(hidden: tuple = (128, 64), seed: int = 1) -> Sequential:
    """An MLP 64 → hidden… → 10 with ReLU between the Linear layers."""
    sizes, layers = (64, *hidden, 10), []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [Linear(n_in, n_out, seed=seed + i), ReLU()]
    return Sequential(*layers[:-1])


def trainer_for(model: Module, epochs: int, lr: float = 3e-3, seed: int = 0) -> tuple:
    """(Trainer, loader): AdamW(lr, weight decay 0.01), a cosine schedule over `epochs`, batches of 32."""
    loader = DataLoader(TensorDataset(Tensor(x_train), Tensor(y_train)), batch_size=32, shuffle=True, seed=seed)
    optimizer = AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = CosineWarmupLR(optimizer, warmup_steps=0, total_steps=epochs * len(loader))
    return Trainer(model, optimizer, CrossEntropyLoss(), scheduler=schedule, verbose=False), loader


def train(model: Module, epochs: int, lr: float = 3e-3, seed: int = 0) -> Module:
    trainer, loader = trainer_for(model, epochs, lr, seed)
    for _ in range(epochs):
        trainer.train_epoch(loader)
    return model


def held_out_accuracy(model: Module) -> float:
    model.eval()
    with no_grad():
        result = accuracy(model(Tensor(x_test)), y_test)
    model.train()
    return result


dense = train(digits_mlp(), epochs=20)
dense_accuracy = held_out_accuracy(dense)
print(f"dense MLP: {count_parameters(dense):,} parameters, "
      f"{sum(p.data.nbytes for p in dense.parameters()):,} bytes, test accuracy {dense_accuracy:.2%}")

# %% [markdown]
# ## 2. Magnitude pruning: which weights to remove
#
# A weight `w` multiplies an input; if `|w|` is small, setting it to 0 changes the layer's
# output little. **Magnitude pruning** (Han et al., 2015) removes the weights of smallest
# absolute value: to prune a fraction `amount` of a tensor of `n` entries, sort `|w|` and
# remove the first `round(amount · n)`. It is a heuristic — a small weight on a large input
# can matter more than a large weight on an input that is always 0 — but a cheap one that
# works well once the network is fine-tuned afterwards.
#
# The result is a **mask** of the tensor's shape: `True` (1) keeps the weight, `False` (0)
# prunes it. Two details:
#
# * **Absolute value.** `-0.9` is a large weight. Sorting the signed values would prune the
#   most negative weights first: the most important ones.
# * **Pruning again.** Gradual pruning (section 5) prunes the same tensor several times. A
#   weight pruned before must stay pruned, and count towards the new total: `amount` is the
#   fraction of *all* entries pruned afterwards. (PyTorch's `prune` counts differently: its
#   second call prunes `amount` of the entries that are *left*. Both give the same masks
#   when you convert: `total = first + amount · (1 − first)`.)
#
# PyTorch rounds the count with Python's `round` (half to even: `round(2.5) = 2`), and so do
# we, so the masks agree. When several weights tie at the threshold, any of them could go;
# we prune the first in C order (a stable sort), PyTorch's `topk` picks one of them too.
# Ask NumPy for the stable sort, `np.argsort(..., kind="stable")`: its default (quicksort)
# puts equal values in no particular order, so the mask would depend on the sort's internals.
#
# Worked example: prune half of a 2 × 3 matrix.

# %%
example = np.array([[0.5, -0.1, 0.9], [-0.7, 0.05, -0.3]])
count = round(0.5 * example.size)
by_magnitude = np.argsort(np.abs(example), axis=None, kind="stable")
print(f"|w| in increasing order: {np.abs(example).ravel()[by_magnitude]}; prune the first {count}")
print("keep mask:\n", np.isin(np.arange(example.size), by_magnitude[count:]).reshape(example.shape))

# %% [markdown]
# `magnitude_mask` does this for an array of any shape, and takes the mask of an earlier
# pruning (`keep`): the entries it pruned score below every magnitude (use `-1`), so they are
# counted first, and the new mask is combined with it (`&`), so that none comes back even
# when `amount` is smaller than before. It works on NumPy arrays (the pruning functions
# below pass `to_host(...)` of a weight and move the mask to the weight's device).

# %%
#| export
def _check_amount(amount: Any, where: str) -> float:
    """`amount` as a float, after checking that it is a fraction in [0, 1]."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float, np.integer, np.floating)) \
            or not 0.0 <= float(amount) <= 1.0:
        raise ValueError(f"{where}: amount is the fraction of weights to prune, a number in [0, 1]; got {amount!r}.")
    return float(amount)


def _check_finite(values: np.ndarray, where: str, what: str) -> None:
    """ValueError naming `what` when `values` (a NumPy array) hold NaN or ±inf: |NaN| ranks after every
    magnitude (a NaN weight would never be pruned), and an SVD of inf never returns or returns NaN."""
    bad = int(np.size(values) - np.count_nonzero(np.isfinite(values)))
    if bad:
        raise ValueError(f"{where}: {what} holds {bad} NaN or infinite value(s) (a diverged model?); "
                         "compress a model whose weights are finite.")


def magnitude_mask(weights: np.ndarray, amount: float, keep: np.ndarray | None = None) -> np.ndarray:
    """Keep-mask of magnitude pruning: False for the round(amount · size) entries of smallest |value|.

    weights -- a NumPy array of any shape (the values to rank; callers pass `to_host(...)`)
    amount  -- the fraction of ALL entries pruned afterwards, in [0, 1]; the count is Python's
               round(amount · size), as torch.nn.utils.prune counts
    keep    -- None, or the bool mask of an earlier pruning (weights' shape, False = pruned):
               those entries are counted first (score them -1, below every |value|), and the
               result is ANDed with it, so they stay False whatever `amount` says
    Returns a NumPy bool array of weights' shape: True = keep, False = pruned. Equal magnitudes
    at the threshold: the entry that comes first in C order is pruned first (a stable sort:
    np.argsort(..., kind="stable")).
    """
    amount = _check_amount(amount, "magnitude_mask")
    _check_finite(weights, "magnitude_mask", "weights")
    ### BEGIN SOLUTION
    scores = np.abs(weights).astype(np.float64).ravel()
    if keep is not None:
        scores[~keep.ravel()] = -1.0  # already pruned: below every magnitude, so counted first
    count = round(amount * scores.size)
    mask = np.ones(scores.size, dtype=bool)
    mask[np.argsort(scores, kind="stable")[:count]] = False
    if keep is not None:
        mask &= keep.ravel()
    return mask.reshape(weights.shape)
    ### END SOLUTION


# %% [markdown]
# The tests below check values and, when one is wrong, name the classic mistake that gives
# exactly that value. Those diagnoses are given code, imported in the next cell from
# `compression_checks.py` beside this lesson (`tinytorch.perf.compression_checks`), with module
# 05's `returned`, which names a function that ends without a `return`.

# %%
from tinytorch.perf.compression_checks import (  # given: modules/16_compression/compression_checks.py
    bytes_mistake, csr_mistake, expected_distillation, importance_mistake, mask_mistake, schedule_mistake,
    sparsity_mistake)
from tinytorch.testing import returned  # given: names a missing `return` (modules/05_autograd/testing.py)


# %%
def test_unit_magnitude_mask():
    got = returned(magnitude_mask(example, 0.5), "magnitude_mask(example, 0.5)", np.ndarray)
    expected = np.array([[True, False, True], [True, False, False]])
    assert got.dtype == bool and got.shape == example.shape, (
        f"a bool mask of the weights' shape, got {got.dtype} {got.shape}"
        + (": the flat mask must be reshaped to the weights' shape (mask.reshape(weights.shape))"
           if got.shape == (example.size,) else ""))
    assert np.array_equal(got, expected), (
        f"magnitude_mask(example, 0.5): expected\n{expected}\ngot\n{got}\n" + mask_mistake(got, example, 0.5))
    assert magnitude_mask(example, 0.0).all() and not magnitude_mask(example, 1.0).any(), (
        "amount 0 prunes nothing, amount 1 prunes every entry")
    eighths = magnitude_mask(np.arange(8.0), 0.3125)
    assert (~eighths).sum() == round(0.3125 * 8) == 2, (
        f"count with round(amount * size): 2 of 8 at 0.3125, got {(~eighths).sum()}: "
        + mask_mistake(eighths, np.arange(8.0), 0.3125))
    ties = np.round(np.random.default_rng(0).standard_normal(200), 1)  # many equal magnitudes
    first_in_c_order = np.argsort(np.abs(ties), kind="stable")[:round(0.37 * ties.size)]
    tied = magnitude_mask(ties, 0.37)
    assert np.array_equal(~tied, np.isin(np.arange(ties.size), first_in_c_order)), (
        "200 weights with many equal magnitudes, amount 0.37: " + mask_mistake(tied, ties, 0.37))
    first = magnitude_mask(example, 0.5)
    try:
        again = magnitude_mask(example * 0 + 1.0, 0.2, keep=first)  # all equal now: only the count decides
    except (ValueError, IndexError) as err:  # NumPy's message names shapes, not the slip: name it
        raise AssertionError(
            f"weights of shape {example.shape} with an earlier keep-mask of shape {first.shape} raised {err!r}: the "
            f"scores and the new mask are flat ({example.size},) arrays; flatten the keep-mask too (keep.ravel()) "
            "before indexing the scores with it or ANDing it with the mask") from None
    assert np.array_equal(again, first), (
        f"pruned before: {int((~first).sum())} of 6 entries; pruning again with amount 0.2 (1 of 6, already reached) "
        f"must give the same mask, got {int((~again).sum())} pruned: " + mask_mistake(again, example * 0 + 1.0, 0.2, first))
    masked = np.where(first, example, 0.0)
    more = magnitude_mask(masked, 4 / 6, keep=first)
    assert (~more).sum() == 4 and not (more & ~first).any(), (
        f"already-pruned weights count towards the total: 4/6 of the 6 entries pruned in all, the 3 pruned before "
        f"among them; got {int((~more).sum())} pruned: " + mask_mistake(more, masked, 4 / 6, first))
    print("✓ magnitude_mask: smallest |w| pruned, round(amount·n) of them, earlier pruning kept")


test_unit_magnitude_mask()

# %% [markdown]
# ## 3. A mask that the forward pass uses
#
# The obvious way to prune is to write zeros into the weights. Predict what one training
# step does to them, then run the cell: it zeroes the smallest half of the first layer of a
# copy of the digits model and takes one step of AdamW.

# %%
zeroed = copy.deepcopy(dense)
first_layer = zeroed[0]
keep_half = magnitude_mask(first_layer.weight.numpy(), 0.5)
first_layer.weight.data = first_layer.weight.data * keep_half
step_trainer, step_loader = trainer_for(zeroed, epochs=1, lr=1e-3)
print(f"zeros before the step: {np.mean(first_layer.weight.numpy() == 0):.1%}")
step_trainer.train_step(*next(iter(step_loader)))
print(f"zeros after one step:  {np.mean(first_layer.weight.numpy() == 0):.1%}")

# %% [markdown]
# They come back at once: a zero weight still gets a gradient (the gradient of `x @ W`
# with respect to `W` is `xᵀ · grad`, whatever `W` holds), and the optimizer moves it.
# Pruning by writing zeros once, as some tutorials do, is undone by the first step of
# fine-tuning — or never fine-tuned at all.
#
# The fix is to make the mask part of the computation. Keep the original weights in a
# parameter `weight_orig`, the mask in a buffer `weight_mask`, and let the layer compute
# its weight as `weight_orig * weight_mask` **in every forward pass**, as a recorded
# multiply. Then the existing `mul` backward rule does the rest: the gradient reaching
# `weight_orig` is `grad · mask`, exactly 0 at every pruned position, so no optimizer needs
# a special case. These are the names `torch.nn.utils.prune` uses, and our `state_dict`
# holds the same keys as PyTorch's pruned layer (`bias`, `weight_orig`, `weight_mask`).
#
# How can `layer.weight` become computed without changing `Linear`? `Linear.forward`
# reads `self.weight`. Python looks an attribute up on the object's *class* first when the
# class defines a property there (a data descriptor), before the object's own `__dict__`.
# So pruning gives this one layer a new class: a subclass of its own class (`PrunedLinear`
# for a Linear, made once by `_pruned_class`), the same in everything except that `weight`
# is a property returning `masked_weight(self, "weight")`, and that assigning to it is
# refused (with a message saying what to do instead). `isinstance(layer, Linear)` is still
# true, module 03's code is unchanged, and every other Linear stays a plain Linear.
# PyTorch's `torch.nn.utils.parametrize` works the same way (it swaps the module's class for
# a generated `Parametrized…` subclass); `torch.nn.utils.prune` reaches the same end with a
# forward pre-hook that reassigns `module.weight` before each call, a hook our `Module` does
# not have.
#
# Where we differ from PyTorch: the SPEC's name for the mask is `module.<name>_mask`, which is
# PyTorch's too; the class swap replaces PyTorch's hook; and `amount` counts all entries
# (section 2).
#
# You write three pieces:
#
# * `masked_weight(module, name)`: the one line the property calls, `<name>_orig * <name>_mask`;
# * `apply_mask(module, keep, name)`: the move to the reparametrised form, the first time
#   (the parameter to `<name>_orig`, the mask into a **buffer**, the class switched); later
#   times, the old mask times the new one. The mask must be registered with
#   `register_buffer` (module 03): a plain attribute is not in `state_dict()`, so a saved
#   pruned model would come back unpruned, and `to(device)` would leave the mask behind;
# * `prune_magnitude(module, amount, name)`: `magnitude_mask` on the weights the forward
#   uses, then `apply_mask`.

# %%
#| export
def masked_weight(module: Module, name: str = "weight") -> Tensor:
    """What `module.<name>` is once the module is pruned: `<name>_orig` times `<name>_mask`.

    One recorded multiply, op "mul" with inputs (module.<name>_orig, module.<name>_mask) in that
    order, made every time the attribute is read, so inside the forward pass: the mask's
    zeros then give the pruned weights gradient 0 through the existing `mul` rule. Returns a
    new Tensor of the weight's shape and dtype; changes nothing.
    """
    ### BEGIN SOLUTION
    return getattr(module, name + "_orig") * getattr(module, name + "_mask")
    ### END SOLUTION


_PRUNED_CLASSES: dict = {}


def _pruned_class(base: type, names: tuple) -> type:
    """The class a pruned module is switched to: a subclass of `base` (e.g. `PrunedLinear` for
    `Linear`) in which each attribute of `names` is a property returning `masked_weight(self,
    name)`, and assigning to it is refused. Made once per (base, names) and reused."""
    key = (base, names)
    if key not in _PRUNED_CLASSES:
        def read(self: Module, name: str) -> Tensor:
            value = masked_weight(self, name)
            if not isinstance(value, Tensor):  # named here, not as "'NoneType' object has no attribute ..." later
                raise TypeError(f"masked_weight(module, {name!r}) returned {type(value).__name__}, not a Tensor: "
                                f"return {name}_orig * {name}_mask (one recorded multiply of the two Tensors)")
            return value

        def computed(name: str) -> property:
            return property(lambda self: read(self, name),
                            doc=f"{name}_orig * {name}_mask (a recorded multiply, made on every read)")

        def __setattr__(self, attr: str, value: Any) -> None:
            if attr in names:
                raise AttributeError(
                    f"{type(self).__name__}.{attr} is pruned: it is computed as {attr}_orig * {attr}_mask. "
                    f"Change {attr}_orig (or {attr}_mask) instead, or call remove_pruning(module, {attr!r}) first.")
            base.__setattr__(self, attr, value)

        attrs = {name: computed(name) for name in names}
        attrs.update(__setattr__=__setattr__, _pruned_names=names, _unpruned_class=base, __module__=__name__)
        _PRUNED_CLASSES[key] = type(f"Pruned{base.__name__}", (base,), attrs)
    return _PRUNED_CLASSES[key]


def pruned_names(module: Any) -> tuple:
    """The names of `module`'s pruned tensors: ("weight",) after prune_magnitude, () before."""
    return getattr(type(module), "_pruned_names", ())


def _unpruned_class(module: Module) -> type:
    return getattr(type(module), "_unpruned_class", type(module))


def apply_mask(module: Module, keep: Any, name: str = "weight") -> Module:
    """Prune `module.<name>` with the keep-mask `keep` (bool or 0/1, the tensor's shape); returns module.

    The first time (`name not in pruned_names(module)`; the given lines have checked the name
    and the shape, `weight` is the parameter and `keep` a NumPy array):
      1. `delattr(module, name)`, then `setattr(module, name + "_orig", weight)`: the SAME
         Tensor object under the new name, so an optimizer made earlier still updates it;
      2. `module.register_buffer(name + "_mask", Tensor(keep, dtype=weight.dtype,
         device=weight.device))`: 0s and 1s in the weight's dtype, saved by state_dict;
      3. `module.__class__ = _pruned_class(_unpruned_class(module), pruned_names(module) + (name,))`:
         from now on reading `module.<name>` returns `masked_weight(module, name)`.
    Later times (given): the buffer's array becomes old mask × keep (pruned stays pruned).
    """
    if not isinstance(module, Module):
        raise TypeError(f"apply_mask: expected a Module (e.g. a Linear), got {type(module).__name__}.")
    if name in pruned_names(module):
        mask = getattr(module, name + "_mask")
        mask.data = mask.data * to_array(np.asarray(to_host(keep)), dtype=mask.dtype, device=mask.device)
        return module
    weight = module.__dict__.get(name)
    if not isinstance(weight, Tensor) or name not in dict(module.named_parameters()):
        raise ValueError(f"apply_mask: {type(module).__name__} has no parameter named {name!r}; "
                         f"its parameters are {[n for n, _ in module.named_parameters() if '.' not in n]}.")
    keep = np.asarray(to_host(keep))
    if keep.shape != weight.shape:
        raise ValueError(f"apply_mask: a mask of shape {keep.shape} for {name} of shape {weight.shape}.")
    ### BEGIN SOLUTION
    delattr(module, name)
    setattr(module, name + "_orig", weight)
    module.register_buffer(name + "_mask", Tensor(keep, dtype=weight.dtype, device=weight.device))
    module.__class__ = _pruned_class(_unpruned_class(module), pruned_names(module) + (name,))
    return module
    ### END SOLUTION


def remove_pruning(module: Module, name: str = "weight") -> Module:
    """Make the pruning of `module.<name>` permanent (as torch.nn.utils.prune.remove): the
    parameter `<name>` comes back holding `orig * mask` (zeros where pruned) in the same Tensor
    object that was `<name>_orig`; `<name>_orig` and `<name>_mask` are gone; the class is the
    unpruned one again when nothing else of the module is pruned. Returns module."""
    if name not in pruned_names(module):
        raise ValueError(f"remove_pruning: {name!r} of this {type(module).__name__} is not pruned.")
    weight, mask = module.__dict__[name + "_orig"], module.__dict__[name + "_mask"]
    weight.data = weight.data * mask.data
    delattr(module, name + "_orig")
    delattr(module, name + "_mask")
    rest = tuple(n for n in pruned_names(module) if n != name)
    module.__class__ = _pruned_class(_unpruned_class(module), rest) if rest else _unpruned_class(module)
    setattr(module, name, weight)
    return module


def _prunable(module: Any, name: str, where: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(the weight the forward uses, as a NumPy array; the current keep-mask, or None when the
    tensor was never pruned)."""
    if not isinstance(module, Module):
        raise TypeError(f"{where}: expected a Module (e.g. a Linear), got {type(module).__name__}.")
    if name not in pruned_names(module) and not isinstance(module.__dict__.get(name), Tensor):
        raise ValueError(f"{where}: {type(module).__name__} has no parameter named {name!r}.")
    with no_grad():
        weights = to_host(getattr(module, name))
    _check_finite(weights, where, f"{type(module).__name__}.{name}")
    keep = to_host(getattr(module, name + "_mask")) != 0 if name in pruned_names(module) else None
    return weights, keep


def prune_magnitude(module: Module, amount: float, name: str = "weight") -> Module:
    """Unstructured magnitude pruning of ONE layer, as torch.nn.utils.prune.l1_unstructured.

    Afterwards the fraction `amount` of `module.<name>`'s entries, those of smallest |value|,
    are 0 in the forward pass and get gradient 0 (a persistent mask, `module.<name>_mask`).
    Pruning again keeps what was pruned and prunes more, up to `amount` of all entries.
    Returns module (changed in place). Steps: `_prunable` (given) returns the weights the
    forward uses and the current keep-mask (None the first time); the new keep-mask from
    `magnitude_mask(weights, amount, keep)`; then `apply_mask`.
    """
    amount = _check_amount(amount, "prune_magnitude")
    weights, keep = _prunable(module, name, "prune_magnitude")
    ### BEGIN SOLUTION
    return apply_mask(module, magnitude_mask(weights, amount, keep), name)
    ### END SOLUTION


# %%
def test_unit_prune_magnitude():
    layer = Linear(5, 4, seed=0, dtype=np.float64)
    original = layer.weight
    W = original.numpy().copy()
    result = prune_magnitude(layer, 0.5)
    mask = magnitude_mask(W, 0.5)
    assert type(layer).__name__ == "PrunedLinear" and result is layer, (
        f"after prune_magnitude(layer, 0.5) the layer is a {type(layer).__name__} and prune_magnitude returned "
        f"{type(result).__name__}: " + ("the layer was never pruned: hand the new mask to apply_mask(module, mask, "
                                        "name), which prunes the layer and returns it"
                                        if type(layer) is Linear else "return the module (apply_mask returns it)"))
    names = [n for n, _ in layer.named_parameters()]
    assert "weight" not in names, (
        f"after pruning, the layer's parameters are {names}: weight is still registered as a parameter. Move it: "
        "delattr(module, name) first, then setattr(module, name + '_orig', weight)")
    assert names == ["bias", "weight_orig"] and layer.weight_orig is original, (
        f"the parameter moves to weight_orig (the SAME Tensor object, not a copy: an optimizer made before pruning "
        f"still updates it), got parameters {names}")
    assert "weight_mask" in layer.state_dict(), (
        "register the mask with register_buffer: it must be in the state_dict (a saved pruned model "
        f"would come back unpruned); state_dict keys: {list(layer.state_dict())}")
    assert np.array_equal(layer.weight_mask.numpy(), mask), (
        "weight_mask holds magnitude_mask of the weights (1 = kept, 0 = pruned)")
    assert layer.weight_mask.dtype == np.float64, (
        f"weight_mask is {layer.weight_mask.dtype}, the weight float64: make the mask's 0s and 1s in the weight's "
        "dtype, Tensor(keep, dtype=weight.dtype, device=weight.device)")
    x = np.random.default_rng(1).standard_normal((3, 5))
    xt = Tensor(x)
    out = layer(xt)
    assert np.allclose(out.numpy(), x @ (W * mask) + layer.bias.numpy(), atol=1e-12), \
        "the forward must use weight_orig * weight_mask"
    out.sum().backward()
    grad = layer.weight_orig.grad.numpy()
    assert np.all(grad[~mask] == 0) and np.allclose(grad[mask], np.broadcast_to(x.sum(0)[:, None], W.shape)[mask]), (
        "pruned weights get gradient 0: the mask must be applied in the forward as a recorded multiply "
        "(weight_orig * weight_mask), not written into the weights once")
    assert np.array_equal(layer.weight_orig.numpy(), W), "pruning keeps the original values in weight_orig"
    prune_magnitude(layer, 0.75)
    assert (layer.weight_mask.numpy() == 0).sum() == 15 and not (layer.weight_mask.numpy() > mask).any(), (
        "pruning again to 75% prunes 15 of 20 entries, and none of the first 50% comes back")
    print("✓ prune_magnitude: weight_orig + weight_mask, forward uses their product, pruned weights get gradient 0")


test_unit_prune_magnitude()

# %% [markdown]
# ### What the optimizer does to a pruned weight
#
# AdamW with weight decay, on a layer pruned *after* its optimizer was made (the optimizer
# holds the weight Tensor, which is now `weight_orig`). Predict: after ten steps, are the
# pruned weights of `layer.weight` still 0? And the pruned entries of `weight_orig`?

# %%
pruned_copy = copy.deepcopy(dense)
adam_trainer, adam_loader = trainer_for(pruned_copy, epochs=1, lr=1e-3)
adam_trainer.train_step(*next(iter(adam_loader)))  # Adam's moments now hold every weight's gradient
layer = prune_magnitude(pruned_copy[0], 0.5)
before = layer.weight_orig.numpy().copy()
for batch, _ in zip(adam_loader, range(10)):
    adam_trainer.train_step(*batch)
pruned = layer.weight_mask.numpy() == 0
with no_grad():
    print(f"pruned entries of layer.weight: max |w| = {np.abs(layer.weight.numpy()[pruned]).max()}")
moved = np.abs(layer.weight_orig.numpy() - before)[pruned]
print(f"pruned entries of weight_orig: moved by up to {moved.max():.2e}, their gradient "
      f"max |g| = {np.abs(layer.weight_orig.grad.numpy()[pruned]).max()}")

# %% [markdown]
# The weights the network uses stay exactly 0: the forward multiplies them by 0 whatever
# `weight_orig` holds. `weight_orig`'s pruned entries still move a little: their gradient is
# 0, but Adam's first moment remembers the gradients of the step before pruning and decays
# slowly, and AdamW's decoupled weight decay shrinks every entry towards 0. That is harmless
# (they are never used) — but it is why we score the weights *the forward uses* (the masked
# ones) when we prune again, never `weight_orig`, and why `remove_pruning` multiplies by the
# mask when it makes the pruning permanent.

# %% [markdown]
# ## 4. One threshold for many layers
#
# Pruning every layer by the same fraction treats a layer of 8,192 weights like a layer of
# 640, and the first layer (which reads the pixels) like the last. **Global** pruning ranks
# the weights of all layers together and removes the smallest `amount` of them: layers
# whose weights are small lose more. It is PyTorch's `prune.global_unstructured` with
# `L1Unstructured`.
#
# `prune_global(modules, amount)` concatenates the flattened weights of all the modules (and
# their current masks: a module never pruned contributes all `True`), computes *one*
# `magnitude_mask`, and hands each module its slice. Computing a threshold per layer is the
# classic mistake: it is per-layer pruning under another name.
#
# `sparsity(model)` measures the result: the fraction of zeros among the weights of every
# `Linear` and `Conv2d` (`prunable_layers`), counted on `layer.weight` (for a pruned layer,
# the masked weight the forward uses) — all the weights together, so a large layer counts
# more than a small one (not the mean of the layers' sparsities).

# %%
#| export
def prune_global(modules: Iterable[Module], amount: float, name: str = "weight") -> list:
    """Global magnitude pruning, as torch.nn.utils.prune.global_unstructured with L1Unstructured.

    ONE threshold for all the layers together: the fraction `amount` of all their entries,
    those of smallest |value|, are pruned, so a layer of small weights loses more than a layer
    of large ones. Earlier pruning is kept, as in `prune_magnitude`.
    modules -- an iterable of Modules that each have a parameter `name`
    Returns the list of modules (each changed in place).
    Steps: `found` (given) holds `_prunable(module, ...)` for each module, (weights, keep or
    None); flatten and concatenate the weights, and the keep-masks (np.ones(size, bool) for
    None); one `magnitude_mask`; then each module's slice of it, reshaped to its weights'
    shape, goes to `apply_mask`.
    """
    modules = list(modules)
    amount = _check_amount(amount, "prune_global")
    if not modules:
        raise ValueError("prune_global: no modules given.")
    found = [_prunable(module, name, "prune_global") for module in modules]
    ### BEGIN SOLUTION
    weights = np.concatenate([w.ravel() for w, _ in found])
    keep = np.concatenate([np.ones(w.size, dtype=bool) if k is None else k.ravel() for w, k in found])
    mask = magnitude_mask(weights, amount, keep)
    start = 0
    for module, (w, _) in zip(modules, found):
        apply_mask(module, mask[start:start + w.size].reshape(w.shape), name)
        start += w.size
    return modules
    ### END SOLUTION


def prunable_layers(model: Any) -> list:
    """The layers pruning is about: every Linear and Conv2d in `model` (a Module, whose
    `modules()` are searched, or a list of Modules), each once, in order."""
    roots = model if isinstance(model, (list, tuple)) else [model]
    found, seen = [], set()
    for root in roots:
        for module in root.modules() if isinstance(root, Module) else [root]:
            if isinstance(module, (Linear, Conv2d)) and id(module) not in seen:
                seen.add(id(module))
                found.append(module)
    return found


def sparsity(model: Any) -> float:
    """The fraction of zeros among the weights of `prunable_layers(model)`, counted on the
    weights the forward uses (`layer.weight`, masked for a pruned layer; `weights` below, as
    NumPy arrays): the zeros of all of them together over the number of all their entries,
    so a large layer counts more than a small one. A Python float in [0, 1]."""
    layers = prunable_layers(model)
    if not layers:
        raise ValueError(f"sparsity: {type(model).__name__} has no Linear or Conv2d layer.")
    with no_grad():
        weights = [to_host(layer.weight) for layer in layers]
    ### BEGIN SOLUTION
    zeros = sum(int(np.count_nonzero(w == 0)) for w in weights)
    return zeros / sum(w.size for w in weights)
    ### END SOLUTION


# %%
def test_unit_prune_global():
    small, large = Linear(6, 5, seed=0, dtype=np.float64), Linear(4, 3, seed=1, dtype=np.float64)
    small.weight.data = small.weight.data * 0.01  # tiny weights: global pruning takes these first
    everything = np.concatenate([small.weight.numpy().ravel(), large.weight.numpy().ravel()])
    try:
        prune_global([small, large], 0.5)
    except ValueError as err:
        if "concatenat" not in str(err):
            raise
        raise AssertionError(
            f"prune_global on weights of shapes {small.weight.shape} and {large.weight.shape} raised {err}: "
            "np.concatenate joins 2-D arrays only when their other dimensions agree. Flatten each layer's weights "
            "and keep-mask first (w.ravel()): one threshold over one flat array of all the weights") from None
    pruned_small = (small.weight_mask.numpy() == 0).sum()
    assert pruned_small == 21, (
        f"one threshold over all layers together: the 21 smallest of the 42 weights are all in the "
        f"layer of tiny weights, got {pruned_small} pruned there (a threshold per layer prunes half of each)")
    expected = magnitude_mask(everything, 0.5)
    got_large = large.weight_mask.numpy().ravel() == 1
    assert np.array_equal(got_large, expected[30:]), (
        f"the second layer's mask must be the global mask's entries 30 to 41 (after the first layer's 30)"
        + (": it got entries 0 to 11, the first layer's slice again. Advance the start by each layer's size "
           "(start += w.size) after handing a layer its slice" if np.array_equal(got_large, expected[:12]) else
           f": it prunes {int((~got_large).sum())} of its 12 weights, the global mask {int((~expected[30:]).sum())}"))
    together = np.concatenate([small.weight_mask.numpy().ravel(), large.weight_mask.numpy().ravel()]) == 1
    assert np.array_equal(together, expected), (
        "the masks together must equal magnitude_mask of all the weights concatenated")
    weights = [small.weight.numpy(), large.weight.numpy()]
    got = returned(sparsity([small, large]), "sparsity([small, large])", (float, np.floating))
    assert abs(got - 21 / 42) < 1e-12, (
        f"sparsity([small, large]) should be 21/42, got {got}: " + sparsity_mistake(got, weights))
    model = Sequential(Linear(10, 10, seed=2), ReLU(), Linear(10, 2, seed=3))
    prune_magnitude(model[2], 0.5)
    got = sparsity(model)
    assert abs(got - 10 / 120) < 1e-12, (
        f"sparsity of a 10x10 layer (no zeros) and a 10x2 layer with 10 zeros: expected {10 / 120:.4f}, got "
        f"{got:.4f}: " + sparsity_mistake(got, [model[0].weight.numpy(), model[2].weight.numpy()]))
    print("✓ prune_global: one threshold for all layers; sparsity counts every weight once")


test_unit_prune_global()

# %% [markdown]
# ### Predict, then run: how much can go without fine-tuning?
#
# Prune copies of the trained digits model to 50%, 80%, 90% and 95% sparsity, once per
# layer and once globally, and measure the test accuracy with no training afterwards.
# Predict where it starts to fall, and which of the two falls first.

# %%
print(f"dense: {dense_accuracy:.2%}")
print(f"{'sparsity':>8} | {'per layer':>9} | {'global':>7} | global, per layer: fraction pruned")
for target in (0.5, 0.8, 0.9, 0.95):
    per_layer, shared = copy.deepcopy(dense), copy.deepcopy(dense)
    for layer in prunable_layers(per_layer):
        prune_magnitude(layer, target)
    prune_global(prunable_layers(shared), target)
    fractions = ", ".join(f"{1 - layer.weight_mask.numpy().mean():.2f}" for layer in prunable_layers(shared))
    print(f"{sparsity(shared):8.0%} | {held_out_accuracy(per_layer):9.2%} | {held_out_accuracy(shared):7.2%} | {fractions}")

# %% [markdown]
# At moderate sparsity nothing is lost: half of the weights of a trained network can go for
# free. Further out the accuracy collapses, per-layer pruning first: it forces the small last
# layer (640 weights, every one of which decides a class) to lose as much as the large first
# one. Global pruning leaves the last layer more of its weights. Neither survives 90%
# without help: the network has to adapt to what is gone.

# %% [markdown]
# ## 5. Gradual pruning with fine-tuning
#
# Cut a little, let the network recover, cut again. Zhu & Gupta (2017, "To prune, or not to
# prune") raise the sparsity over `n` pruning steps on a cubic schedule,
#
# $$s_t = s_f + (s_i - s_f)\left(1 - \frac{t}{n}\right)^3, \qquad t = 0, 1, \dots, n,$$
#
# from the initial sparsity `s_i` at `t = 0` to the final `s_f` at `t = n`, with training in
# between. The cube prunes fast at first, while the network holds many redundant weights,
# and slowly near the end, where every weight that goes costs accuracy. (Their paper counts
# `t` in training steps from a start `t₀` with one pruning every `Δt` steps; here `t` counts
# the pruning steps themselves, `t = (step − t₀)/Δt`.)
#
# `cubic_sparsity(step, total_steps, final_sparsity, initial_sparsity=0.0)` returns `s_t`
# (clamped: `s_i` before step 0, `s_f` after `n`). `prune_gradually` (given) runs the loop:
# prune globally to `s_t`, then call `fine_tune(step)`.

# %%
#| export
def cubic_sparsity(step: int, total_steps: int, final_sparsity: float, initial_sparsity: float = 0.0) -> float:
    """Zhu & Gupta's (2017) gradual-pruning schedule: the target sparsity at pruning step `step`.

    s = s_f + (s_i − s_f) · (1 − t / n)³ with t = step clamped to [0, n], n = total_steps,
    s_i = initial_sparsity (at step 0), s_f = final_sparsity (at step n and after).
    Returns a Python float. Both sparsities are fractions in [0, 1] (nan, inf and -1 gave a
    "sparsity" prune_global refused only later, or nan).
    """
    step = as_int(step, "cubic_sparsity: step")
    total_steps = as_int(total_steps, "cubic_sparsity: total_steps")
    if total_steps < 1:
        raise ValueError(f"cubic_sparsity: total_steps must be at least 1, got {total_steps}.")
    _check_amount(final_sparsity, "cubic_sparsity (final_sparsity)")
    _check_amount(initial_sparsity, "cubic_sparsity (initial_sparsity)")
    ### BEGIN SOLUTION
    progress = min(max(step, 0), total_steps) / total_steps
    return final_sparsity + (initial_sparsity - final_sparsity) * (1.0 - progress) ** 3
    ### END SOLUTION


def prune_gradually(modules: Iterable[Module], final_sparsity: float, steps: int,
                    fine_tune: Callable[[int], Any], initial_sparsity: float = 0.0) -> list[float]:
    """Gradual global pruning: for step = 1 … steps, `prune_global(modules, cubic_sparsity(step,
    steps, final_sparsity, initial_sparsity))`, then `fine_tune(step)` (e.g. an epoch of
    training), so the network recovers before the next cut. Returns each step's target."""
    modules = list(modules)
    steps = as_int(steps, "prune_gradually: steps", minimum=1)
    cubic_sparsity(steps, steps, final_sparsity, initial_sparsity)  # checks both sparsities before any pruning
    targets = []
    for step in range(1, steps + 1):
        target = cubic_sparsity(step, steps, final_sparsity, initial_sparsity)
        prune_global(modules, target)
        fine_tune(step)
        targets.append(target)
    return targets


# %%
def test_unit_cubic_sparsity():
    got = [returned(cubic_sparsity(t, 4, 0.9), f"cubic_sparsity({t}, 4, 0.9)", (float, np.floating)) for t in range(5)]
    expected = [0.9 - 0.9 * (1 - t / 4) ** 3 for t in range(5)]
    assert np.allclose(got, expected), (
        f"s_t = s_f + (s_i - s_f)(1 - t/n)^3: from s_i at t = 0 to s_f at t = n, fast at first; "
        f"expected {np.round(expected, 4)}, got {np.round(got, 4)}: " + schedule_mistake(got, range(5), 4, 0.9))
    assert got[0] == 0.0 and got[-1] == 0.9, f"s_i at step 0, s_f at step n; got {got}"
    outside = [cubic_sparsity(t, 4, 0.9) for t in (-1, 9)]
    assert outside == [0.0, 0.9], (
        f"before step 0 the target is s_i, after step n it is s_f: expected [0.0, 0.9] at steps -1 and 9, got "
        f"{outside}: " + schedule_mistake(outside, (-1, 9), 4, 0.9))
    half = cubic_sparsity(1, 2, 0.8, initial_sparsity=0.4)
    assert abs(half - (0.8 - 0.4 / 8)) < 1e-12, (
        f"with initial_sparsity 0.4: s = 0.8 + (0.4 - 0.8)(1 - 1/2)^3 = 0.75 at step 1 of 2, got {half}: "
        + schedule_mistake([half], [1], 2, 0.8, 0.4))
    print("✓ cubic_sparsity: s_i at step 0, s_f at step n, the cube in between")


test_unit_cubic_sparsity()
print("targets for 10 steps to 90%:", [round(cubic_sparsity(t, 10, 0.9), 3) for t in range(1, 11)])

# %% [markdown]
# ### Predict, then run: 90% of the weights, one point of accuracy?
#
# The recipe: start from the trained dense model; 10 pruning steps to 90% global sparsity,
# two epochs of fine-tuning after each, then six more epochs; AdamW at a third of the
# training rate (`1e-3`) with a cosine decay over all 26 epochs. Predict the test accuracy
# at 90% sparsity. The second model is the control: the dense model fine-tuned for the same
# 26 epochs without pruning, so that "after more training" is not mistaken for "after
# pruning".

# %%
def gradual_prune_digits(model: Module, final_sparsity: float = 0.9, steps: int = 10, epochs_between: int = 2,
                         final_epochs: int = 6, seed: int = 5) -> Module:
    """The recipe above (final_sparsity 0: the control, the same epochs with nothing pruned)."""
    total = steps * epochs_between + final_epochs
    trainer, loader = trainer_for(model, epochs=total, lr=1e-3, seed=seed)

    def fine_tune(step: int, epochs: int = epochs_between) -> None:
        for _ in range(epochs):
            trainer.train_epoch(loader)

    if final_sparsity > 0:
        prune_gradually(prunable_layers(model), final_sparsity, steps, fine_tune)
        fine_tune(steps, final_epochs)
    else:
        fine_tune(0, total)
    return model


def remaining_weights(model: Module) -> int:
    return round((1 - sparsity(model)) * sum(layer.weight.size for layer in prunable_layers(model)))


start = time.perf_counter()
gradual = gradual_prune_digits(copy.deepcopy(dense))
control = gradual_prune_digits(copy.deepcopy(dense), final_sparsity=0.0)
print(f"64-128-64-10: dense {dense_accuracy:.2%}, fine-tuned 26 more epochs without pruning {held_out_accuracy(control):.2%}")
print(f"  gradually pruned to {sparsity(gradual):.1%} sparsity: {held_out_accuracy(gradual):.2%} "
      f"({100 * (held_out_accuracy(gradual) - dense_accuracy):+.2f} points against dense), "
      f"{remaining_weights(gradual):,} weights left; each layer's sparsity "
      + ", ".join(f"{1 - layer.weight_mask.numpy().mean():.1%}" for layer in prunable_layers(gradual)))
wide = train(digits_mlp(hidden=(256, 128)), epochs=20)
wide_accuracy = held_out_accuracy(wide)
wide_pruned = gradual_prune_digits(copy.deepcopy(wide))
print(f"64-256-128-10: dense {wide_accuracy:.2%}; gradually pruned to {sparsity(wide_pruned):.1%}: "
      f"{held_out_accuracy(wide_pruned):.2%} ({100 * (held_out_accuracy(wide_pruned) - wide_accuracy):+.2f} points), "
      f"{remaining_weights(wide_pruned):,} weights left  [{time.perf_counter() - start:.1f} s for the three runs]")

# %% [markdown]
# One-shot pruning to 90% lost tens of points; gradual pruning with fine-tuning gets most
# of them back. How close it comes depends on how much the network had to spare. The
# milestone's MLP is small: at 90% it keeps fewer than two thousand weights, about what a
# dense MLP with a hidden layer of 16 to 24 units has (section 9 trains one), and it
# usually ends a point or two below the dense model — try other seeds (`seed=` of
# `gradual_prune_digits`, and of `digits_mlp`) to see the spread. The wider MLP, the same
# task with three times the weights, keeps its accuracy within about a point at 90%: the
# more a network is over-sized for its task, the more pruning can take away.
# `tests/16_compression/test_zz_gradual_pruning.py` holds that wide recipe to one point.
#
# The test set has 359 images, so one point is three or four of them: differences of a
# point are at the edge of what this test set can tell apart.
#
# The pruned models have a tenth of their weights — but every matrix still has its full
# shape. The next section asks what that buys.

# %% [markdown]
# ## 6. What a sparse matrix costs: time and bytes
#
# **Time.** Predict: the first layer of the gradually pruned model is 90% zeros. Is
# `x @ W` faster than with the dense weights?

# %%
def median_seconds(fn: Callable[[], Any], repeats: int = 25) -> float:
    """Median wall time of fn() over `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


batch = np.random.default_rng(3).standard_normal((1024, 64)).astype(np.float32)
with no_grad():
    sparse_W = gradual[0].weight.numpy()
dense_W = dense[0].weight.numpy()
t_dense = median_seconds(lambda: batch @ dense_W)
t_sparse = median_seconds(lambda: batch @ sparse_W)
print(f"x @ W, W 64x128: dense {t_dense * 1e6:.0f} µs, {np.mean(sparse_W == 0):.0%} zeros {t_sparse * 1e6:.0f} µs")

# %% [markdown]
# The same: a dense matrix product multiplies every entry, zero or not. Unstructured
# sparsity buys time only from kernels written for sparse matrices, and on CPUs and GPUs
# those beat dense BLAS only at very high sparsity (the exact point depends on the hardware
# and the kernel; measure it before you count on it). What it buys for certain is **bytes**,
# if the matrix is stored in a sparse format:
#
# * **dense**: every entry, 4 bytes each (float32): `4·R·C` bytes for `R` rows and `C` columns;
# * **bitmask**: one bit per entry saying "nonzero", then the nonzeros:
#   `⌈R·C/8⌉ + 4·nnz` bytes;
# * **CSR** (compressed sparse rows): the nonzeros row by row (`values`), the column of each
#   (`col_indices`, int32) and where each row starts (`row_ptr`, `R + 1` int32):
#   `4·nnz + 4·nnz + 4·(R + 1)` bytes.
#
# Worked example, a 2 × 4 matrix:

# %%
tiny_matrix = np.array([[0.0, 1.5, 0.0, -2.0], [0.0, 0.0, 3.0, 0.0]], dtype=np.float32)
rows, cols = np.nonzero(tiny_matrix)
print("values", tiny_matrix[rows, cols], "col_indices", cols, "row_ptr", np.concatenate([[0], np.cumsum(np.bincount(rows))]))

# %% [markdown]
# Row 0's values are `values[0:2]` (columns 1 and 3), row 1's are `values[2:3]`. `row_ptr`
# is the running count of nonzeros, starting at 0: a row with no nonzeros repeats the
# previous number (use `np.bincount(rows, minlength=R)`, so that empty rows at the end are
# counted too). These are the three arrays of PyTorch's `to_sparse_csr()` (`values`,
# `col_indices`, `crow_indices`), and of `scipy.sparse.csr_matrix` (`data`, `indices`,
# `indptr`).
#
# Write `to_csr` (vectorised: `np.nonzero` returns the positions in row-major order) and
# `storage_bytes`, which builds the real arrays of each format and adds up their `.nbytes`
# (`np.packbits` packs 8 booleans into one byte).

# %%
#| export
def to_csr(matrix: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compressed sparse rows of a 2-D matrix: (values, col_indices, row_ptr), NumPy arrays.

    values      -- the nonzero entries in row-major order, in the matrix's dtype
    col_indices -- int32, the column of each value
    row_ptr     -- int32, length rows + 1: row i's values are values[row_ptr[i]:row_ptr[i + 1]]
                   (row_ptr[0] = 0, row_ptr[-1] = the number of nonzeros)
    The same three arrays as torch's `to_sparse_csr()` (values, col_indices, crow_indices).
    No Python loop over rows or entries.
    """
    matrix = np.asarray(to_host(matrix))
    if matrix.ndim != 2:
        raise ValueError(f"to_csr: expected a 2-D matrix, got shape {matrix.shape}.")
    ### BEGIN SOLUTION
    rows, cols = np.nonzero(matrix)
    counts = np.bincount(rows, minlength=matrix.shape[0])
    row_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return matrix[rows, cols], cols.astype(np.int32), row_ptr
    ### END SOLUTION


def from_csr(values: np.ndarray, col_indices: np.ndarray, row_ptr: np.ndarray, shape: tuple) -> np.ndarray:
    """The dense matrix back from its CSR arrays (to check `to_csr`)."""
    dense = np.zeros(shape, dtype=values.dtype)
    dense[np.repeat(np.arange(shape[0]), np.diff(row_ptr)), col_indices] = values
    return dense


def storage_bytes(matrix: Any) -> dict[str, int]:
    """Bytes to store a 2-D matrix three ways, each the sum of `.nbytes` of the real arrays:

    "dense"   -- every entry as float32
    "bitmask" -- `np.packbits(matrix != 0)` (one bit per entry) plus the nonzeros as float32
    "csr"     -- `to_csr`'s arrays, the values as float32 (col_indices and row_ptr int32)
    Returns {"dense": int, "bitmask": int, "csr": int}.
    """
    matrix = np.asarray(to_host(matrix))
    ### BEGIN SOLUTION
    values, col_indices, row_ptr = to_csr(matrix)
    values = values.astype(np.float32)
    return {"dense": matrix.astype(np.float32).nbytes,
            "bitmask": np.packbits(matrix != 0).nbytes + values.nbytes,
            "csr": values.nbytes + col_indices.nbytes + row_ptr.nbytes}
    ### END SOLUTION


# %%
def test_unit_storage():
    values, col_indices, row_ptr = returned(to_csr(tiny_matrix), "to_csr(tiny_matrix)", tuple)
    assert np.array_equal(row_ptr, [0, 2, 3]) and row_ptr.dtype == np.int32, (
        f"row_ptr has rows + 1 entries, starts at 0 and ends at nnz (a running count: cumsum of the "
        f"nonzeros per row): expected [0, 2, 3], got {row_ptr}: " + csr_mistake(tiny_matrix, values, col_indices, row_ptr))
    assert np.array_equal(values, [1.5, -2.0, 3.0]) and np.array_equal(col_indices, [1, 3, 2]), (
        f"values row by row [1.5, -2, 3] at columns [1, 3, 2]; got {values}, {col_indices}: "
        + csr_mistake(tiny_matrix, values, col_indices, row_ptr))
    assert col_indices.dtype == np.int32 and values.dtype == np.float32, (
        f"col_indices int32, values in the matrix's dtype; got {col_indices.dtype}, {values.dtype}")
    empty_rows = np.zeros((4, 3), np.float32)
    empty_rows[1, 2] = 7.0
    empty_csr = to_csr(empty_rows)
    assert np.array_equal(empty_csr[2], [0, 0, 1, 1, 1]), (
        f"a 4 x 3 matrix whose only nonzero is in row 1: row_ptr must be [0, 0, 1, 1, 1], got {empty_csr[2]}: "
        + csr_mistake(empty_rows, *empty_csr))
    rng = np.random.default_rng(4)
    m = rng.standard_normal((30, 20)).astype(np.float32) * (rng.random((30, 20)) < 0.3)
    assert np.array_equal(from_csr(*to_csr(m), m.shape), m), "to_csr then from_csr must give the matrix back"
    nnz = int(np.count_nonzero(m))
    for matrix in (m, m.astype(np.float64)):  # the bytes of float32 storage, whatever the matrix's dtype
        expected = {"dense": 4 * 600, "bitmask": 600 // 8 + 4 * nnz, "csr": 8 * nnz + 4 * 31}
        got = returned(storage_bytes(matrix), f"storage_bytes(a {matrix.dtype} matrix)", dict)
        assert got == expected, (
            f"storage_bytes of a 30 x 20 {matrix.dtype} matrix with {nnz} nonzeros: expected {expected}, got {got}: "
            + bytes_mistake(got, matrix))
    print("✓ to_csr and storage_bytes: the arrays of CSR, and the bytes of three formats")


test_unit_storage()

# %% [markdown]
# ### Predict, then run: when does each format pay?
#
# Derive it first. With sparsity `s` (so `nnz = (1 − s)·R·C`):
#
# * the bitmask beats dense when `R·C/8 + 4(1 − s)R·C < 4R·C`, that is `s > 1/32 ≈ 3.1%`:
#   almost always — one bit per entry is cheap next to 32;
# * CSR beats dense when `8(1 − s)R·C + 4(R + 1) < 4R·C`, that is
#   `s > 1/2 + (R + 1)/(2R·C)`: a little over **50%**, because every nonzero now costs two
#   numbers, its value and its column;
# * CSR beats the bitmask when `8·nnz + 4(R + 1) < R·C/8 + 4·nnz`, that is
#   `s > 1 − 1/32 + (R + 1)/(R·C)`: above about **97%**.
#
# The cell measures the three formats on the 64 × 128 first layer of the digits model at
# several sparsities, and finds each crossover by scanning the sparsity in steps of one
# weight.

# %%
W_first = dense[0].weight.numpy()
R, C = W_first.shape
print(f"{'sparsity':>8} | {'dense':>7} | {'bitmask':>7} | {'csr':>7}   (bytes, 64 x 128 float32)")
for s in (0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99):
    sizes = storage_bytes(W_first * magnitude_mask(W_first, s))
    print(f"{s:8.0%} | {sizes['dense']:7,} | {sizes['bitmask']:7,} | {sizes['csr']:7,}")


def first_sparsity_where(better: str, worse: str) -> float:
    """The lowest sparsity (in steps of one weight) at which format `better` takes fewer bytes than `worse`."""
    order = np.argsort(np.abs(W_first), axis=None, kind="stable")
    for pruned in range(W_first.size + 1):
        m = W_first.copy().ravel()
        m[order[:pruned]] = 0
        sizes = storage_bytes(m.reshape(R, C))
        if sizes[better] < sizes[worse]:
            return pruned / W_first.size
    return float("nan")


for better, worse, formula in (("bitmask", "dense", 1 / 32), ("csr", "dense", 0.5 + (R + 1) / (2 * R * C)),
                               ("csr", "bitmask", 1 - 1 / 32 + (R + 1) / (R * C))):
    measured = first_sparsity_where(better, worse)
    print(f"{better} beats {worse} from sparsity {measured:.4f}; derived {formula:.4f}")

# %% [markdown]
# The measured crossovers sit on the derived ones (within one weight: the scan moves in steps
# of `1/(R·C)`, and the bitmask's bytes round up to whole bytes). At the 90% of section 5,
# CSR stores the layer in about a fifth of the dense bytes and the bitmask in about a
# seventh. Storing indices in int16 (enough for up to 65,536 columns) would move CSR's
# crossover down to `1/3`: an exercise.

# %% [markdown]
# ## 7. Structured pruning: remove whole hidden units
#
# To be faster with ordinary dense kernels, the matrices themselves must shrink. In a
# transformer's MLP (module 13: `fc` `E → H`, GELU, `proj` `H → E`), hidden unit `j` is
# column `j` of `fc.weight` (shape `(E, H)`: what the unit reads), entry `j` of `fc.bias`,
# and row `j` of `proj.weight` (shape `(H, E)`: what it writes). Removing the unit removes
# that column and that row: `fc` becomes `E → H'` and `proj` `H' → E`, and the MLP's output
# is exactly what the old MLP gave with unit `j`'s activation set to 0.
#
# Which units? The unit's contribution to the output is `gelu(x · fc[:, j] + b_j) ·
# proj[j, :]`: it is small when what it reads is small **or** when what it writes is small.
# We score
#
# $$\text{importance}_j = \lVert \text{fc.weight}[:, j] \rVert_2 \cdot \lVert \text{proj.weight}[j, :] \rVert_2 ,$$
#
# the product of the two sizes. Scoring by `fc` alone would keep a unit that reads loudly
# but writes (almost) nothing; and with our `(in, out)` weight layout, unit `j` of `fc` is a
# **column** (norm over axis 0), while unit `j` of `proj` is a **row** (norm over axis 1).
# The score ignores the inputs' sizes (LayerNorm makes them similar) and the bias; a
# data-driven score (the mean |activation| of each unit on a batch) is an exercise.
#
# `prune_mlp_units(mlp, amount)` returns a **new**, smaller MLP (the same `MLP` class, with
# the same settings) holding copies of the kept units' weights, in their original order.
# `prune_mlps(model, amount)` (given) does it to every MLP of a model, in a deep copy: the
# milestone uses it on the GPT.

# %%
#| export
def mlp_unit_importance(mlp: MLP) -> np.ndarray:
    """One score per hidden unit j of `mlp` (module 13's MLP: fc E → H, GELU, proj H → E):

        importance[j] = ‖fc.weight[:, j]‖₂ · ‖proj.weight[j, :]‖₂

    the size of what unit j reads (column j of fc's (E, H) weight: norm over axis 0) times the
    size of what it writes (row j of proj's (H, E) weight: norm over axis 1). `w_in` and
    `w_out` (given) are those weights as float64 NumPy arrays. Returns shape (H,), float64.
    """
    with no_grad():
        w_in, w_out = to_host(mlp.fc.weight).astype(np.float64), to_host(mlp.proj.weight).astype(np.float64)
    ### BEGIN SOLUTION
    return np.linalg.norm(w_in, axis=0) * np.linalg.norm(w_out, axis=1)
    ### END SOLUTION


def _copy_into(param: Tensor, array: Any) -> None:
    """param.data = a copy of `array` in param's dtype, on param's device."""
    param.data = to_array(np.ascontiguousarray(array), dtype=param.dtype, device=param.device)


def prune_mlp_units(mlp: MLP, amount: float) -> MLP:
    """Structured pruning: a new, smaller MLP without the round(amount · H) hidden units of
    smallest `mlp_unit_importance` (at least one unit stays; ValueError otherwise).

    `dropped` (given) is that number and `w_in`, `w_out` the (E, H) and (H, E) weights as
    NumPy arrays. The dropped units are the first `dropped` of a stable argsort of the
    importance (equal scores: the lower index goes first, as in `magnitude_mask`). Keep the
    other units in their ORIGINAL order (`kept` = their indices, sorted: unit i of the new MLP
    is the i-th kept unit of the old one; shuffled indices give the same outputs but weights
    that no longer line up with the old MLP's), build
    `MLP(E, H - dropped, dropout=mlp.dropout.p, bias=mlp.fc.bias is not None,
    dtype=fc_weight.dtype, device=fc_weight.device)` (E = mlp.fc.in_features; dtype and device
    are keyword-only), and copy with `_copy_into`: fc.weight ← w_in[:, kept],
    proj.weight ← w_out[kept, :], and with biases fc.bias ← to_host(mlp.fc.bias)[kept],
    proj.bias ← to_host(mlp.proj.bias) (proj's bias has E entries, one per output: all kept).
    On any input the result equals `mlp` with the dropped units' outputs set to 0.
    `mlp` itself is not changed.
    """
    amount = _check_amount(amount, "prune_mlp_units")
    hidden = mlp.fc.out_features
    dropped = round(amount * hidden)
    if dropped >= hidden:
        raise ValueError(f"prune_mlp_units: amount {amount} would remove all {hidden} hidden units; keep at least one.")
    with no_grad():
        fc_weight = mlp.fc.weight  # the weight the forward uses (masked, if fc was pruned)
        w_in, w_out = to_host(fc_weight), to_host(mlp.proj.weight)
    _check_finite(w_in, "prune_mlp_units", "mlp.fc.weight")
    _check_finite(w_out, "prune_mlp_units", "mlp.proj.weight")
    importance = mlp_unit_importance(mlp)
    ### BEGIN SOLUTION
    kept = np.sort(np.argsort(importance, kind="stable")[dropped:])
    small = MLP(mlp.fc.in_features, hidden - dropped, dropout=mlp.dropout.p, bias=mlp.fc.bias is not None,
                dtype=fc_weight.dtype, device=fc_weight.device)
    _copy_into(small.fc.weight, w_in[:, kept])
    _copy_into(small.proj.weight, w_out[kept, :])
    if mlp.fc.bias is not None:
        _copy_into(small.fc.bias, to_host(mlp.fc.bias)[kept])
        _copy_into(small.proj.bias, to_host(mlp.proj.bias))
    return small
    ### END SOLUTION


def prune_mlps(model: Module, amount: float) -> Module:
    """A deep copy of `model` in which every MLP (e.g. each block's `mlp` in a GPT) is replaced
    by `prune_mlp_units(mlp, amount)`; `model` itself is untouched."""
    amount = _check_amount(amount, "prune_mlps")
    small = copy.deepcopy(model)
    found = [(name, child) for name, child in small.named_modules()[1:] if isinstance(child, MLP)]
    for name, child in found:
        small.set_submodule(name, prune_mlp_units(child, amount))  # module 03: the dotted name, lists too
    if not found:
        raise ValueError(f"prune_mlps: {type(model).__name__} holds no MLP.")
    return small


# %%
def test_unit_prune_mlp_units():
    mlp = MLP(4, 6, seed=0, dtype=np.float64)
    mlp.proj.weight.data[2] = 0.0      # unit 2 writes nothing: least important, however loudly it reads
    mlp.fc.weight.data[:, 2] *= 100.0
    mlp.fc.weight.data[:, 4] *= 0.01   # unit 4 reads almost nothing
    mlp.fc.weight.data[:, 0] *= 3.0    # unit 0 the most important: by importance, the kept units are 1, 3, 5, 0
    try:
        importance = returned(mlp_unit_importance(mlp), "mlp_unit_importance(mlp)", np.ndarray)
    except ValueError as err:  # NumPy's broadcast error names shapes, not the slip
        raise AssertionError(
            f"mlp_unit_importance of fc.weight (4, 6) and proj.weight (6, 4) raised {err}: fc's norms over axis 0 "
            "are one per hidden unit, shape (6,); a norm of proj.weight over axis 0 has shape (4,), one per output. "
            "Unit j of proj is ROW j: norm over axis 1, shape (6,)") from None
    assert importance.shape == (6,), (
        f"one importance per hidden unit: norm of fc.weight's column j (axis 0) times norm of proj.weight's "
        f"row j (axis 1); expected shape (6,), got {importance.shape}")
    expected = np.linalg.norm(mlp.fc.weight.numpy(), axis=0) * np.linalg.norm(mlp.proj.weight.numpy(), axis=1)
    assert np.allclose(importance, expected), (
        f"importance = ||fc.weight[:, j]|| * ||proj.weight[j, :]||: expected {np.round(expected, 3)}, got "
        f"{np.round(importance, 3)}: " + importance_mistake(importance, mlp.fc.weight.numpy(), mlp.proj.weight.numpy()))
    try:
        small = returned(prune_mlp_units(mlp, 1 / 3), "prune_mlp_units(mlp, 1/3)", MLP)
    except IndexError as err:  # indexing (E, H) and (H, E) the same way runs off the shorter axis
        raise AssertionError(f"prune_mlp_units: {err}. fc.weight keeps the COLUMNS of the kept units (E, H'), "
                             "proj.weight their ROWS (H', E): w_in[:, kept] and w_out[kept, :]") from err
    assert isinstance(small, MLP) and small is not mlp and small.fc.out_features == 4, (
        "a NEW MLP (the MLP class) with 6 - 2 = 4 hidden units")
    assert small.fc.weight.shape == (4, 4) and small.proj.weight.shape == (4, 4) and small.fc.bias.shape == (4,), (
        f"fc (4, 4), proj (4, 4), fc.bias (4,); got {small.fc.weight.shape}, {small.proj.weight.shape}, {small.fc.bias.shape}")
    assert mlp.fc.weight.shape == (4, 6), "prune_mlp_units returns a new MLP and leaves the old one as it was"
    assert small.fc.weight.dtype == np.float64, (
        f"the old MLP is float64, the new one {small.fc.weight.dtype}: build it in the old one's dtype and on its "
        "device, MLP(..., dtype=fc_weight.dtype, device=fc_weight.device)")
    old_columns, new_columns = mlp.fc.weight.numpy(), small.fc.weight.numpy()
    units = [next((j for j in range(6) if np.array_equal(new_columns[:, i], old_columns[:, j])), None) for i in range(4)]
    least = sorted(np.argsort(importance, kind="stable")[:4].tolist())
    found = sorted(units, key=lambda j: -1 if j is None else j)  # None: a column that is no old unit's
    assert units == [0, 1, 3, 5], (
        f"fc.weight's columns must be the old columns 0, 1, 3, 5 (units 2 and 4 have the smallest importance), in "
        f"that order; they are the old columns {units}: "
        + ("keep the units in their original order (sort the kept indices: unit i of the new MLP is the i-th kept "
           "unit of the old one)" if found == [0, 1, 3, 5] else
           "you kept the LEAST important units: drop the first `dropped` of the ascending argsort and keep the rest "
           "([dropped:])" if found == least else
           "keep the columns w_in[:, kept] of the units that are not dropped"))
    assert np.array_equal(small.fc.bias.numpy(), mlp.fc.bias.numpy()[[0, 1, 3, 5]]) and np.array_equal(
        small.proj.bias.numpy(), mlp.proj.bias.numpy()), (
        "the new MLP's biases are not the old ones: fc.bias keeps the kept units' entries (to_host(mlp.fc.bias)[kept]), "
        "proj.bias is a copy of the old one (one entry per output); a new MLP starts with its own initial biases")
    x = np.random.default_rng(5).standard_normal((3, 4))
    h = mlp.fc(Tensor(x)).numpy()
    h = gelu(Tensor(h)).numpy()
    h[:, [2, 4]] = 0.0
    assert np.allclose(small(Tensor(x)).numpy(), h @ mlp.proj.weight.numpy() + mlp.proj.bias.numpy(), atol=1e-12), (
        "the smaller MLP must equal the old one with the dropped units set to 0: keep fc.weight's columns, "
        "fc.bias's entries and proj.weight's rows of the kept units, in order")
    print("✓ prune_mlp_units: drops the units of smallest ||in||·||out||, equals the old MLP without them")


test_unit_prune_mlp_units()

# %% [markdown]
# ### Predict, then run: is it faster?
#
# The MLP of the Shakespeare GPT: `E = 128`, `H = 512`, on a batch of 12 sequences of 64
# tokens (768 rows). Three versions: dense; with 50% of its hidden units removed
# (structured); with 90% of its weights pruned by magnitude (unstructured). Predict the time
# of forward + backward for each, relative to dense. The matrix products are most of the
# work, and halving `H` halves each of them.

# %%
gpt_mlp = MLP(128, 512, bias=False, seed=0)
half_units = prune_mlp_units(gpt_mlp, 0.5)
unstructured = copy.deepcopy(gpt_mlp)
prune_global([unstructured.fc, unstructured.proj], 0.9)
tokens = np.random.default_rng(6).standard_normal((12, 64, 128)).astype(np.float32)


def forward_backward(mlp: MLP) -> Callable[[], None]:
    def run() -> None:
        mlp.zero_grad()
        mlp(Tensor(tokens, requires_grad=True)).sum().backward()
    return run


mlp_times = {name: median_seconds(forward_backward(m), repeats=15)
             for name, m in (("dense", gpt_mlp), ("50% of units removed", half_units),
                             ("90% of weights pruned", unstructured))}
for name, seconds in mlp_times.items():
    params = sum(p.size for p in (half_units if name.startswith("50") else gpt_mlp).parameters())
    print(f"{name:>22}: {seconds * 1e3:6.2f} ms ({mlp_times['dense'] / seconds:.2f}x dense), {params:,} parameters stored")
sparse_speedup = mlp_times["dense"] / mlp_times["90% of weights pruned"]
print(f"90% of the weights pruned: {abs(sparse_speedup - 1):.0%} {'faster' if sparse_speedup >= 1 else 'slower'} "
      f"than dense; half the units removed: {mlp_times['dense'] / mlp_times['50% of units removed']:.2f}x faster")

# %% [markdown]
# Removing half the units halves the matrices and the forward + backward takes about half
# the time. 90% unstructured sparsity runs at about dense speed, a few percent either way
# (the line above words this run's ratio from its sign): the products still multiply every
# weight, zeros included, and the mask multiply is one elementwise pass over the weights,
# small next to them. The milestone and
# `benchmarks/compression.py` measure the GPT's MLP and its whole training step, on one
# thread, interleaved; the milestone also checks what the removed units cost in validation
# loss after a short fine-tune.

# %% [markdown]
# ## 8. Low rank: one matrix as two thin ones
#
# A Linear layer's weight `W` (ours is `(in, out)`: `y = x @ W + b`) has a singular value
# decomposition `W = U · diag(σ) · Vᵀ`, with `U` `(in, k)` and `Vᵀ` `(k, out)` having
# orthonormal columns and rows, `k = min(in, out)`, and `σ₁ ≥ σ₂ ≥ … ≥ 0`. Keeping the first
# `r` terms gives `W_r = U[:, :r] · diag(σ[:r]) · Vᵀ[:r]`, and the **Eckart–Young theorem**
# says no matrix of rank `r` is closer to `W` in the Frobenius norm, with
#
# $$\lVert W - W_r \rVert_F^2 = \sum_{i > r} \sigma_i^2 .$$
#
# So the squared singular values say how much each rank is worth. As layers, `x @ W_r` is
# `(x @ A) @ B` with `A = U[:, :r]·√σ[:r]` `(in, r)` and `B = √σ[:r]·Vᵀ[:r]` `(r, out)`: a
# Linear `in → r` without bias, then a Linear `r → out` that takes the bias. It stores
# `r·(in + out)` weights instead of `in·out`, fewer when `r < in·out/(in + out)`, and does
# proportionally fewer multiplications. (Splitting `√σ` to both sides keeps the two factors
# of similar size, which suits fine-tuning; `A = U·σ`, `B = Vᵀ` is the same product.)
#
# Mind the orientation: `np.linalg.svd(W)` of our `(in, out)` weight gives `U` on the
# **input** side, so `U`'s columns go into the first layer. PyTorch stores the transpose,
# `(out, in)`, and its SVD puts `U` on the output side.
#
# `low_rank(linear, rank)` returns `Sequential(first, second)`; `choose_rank(σ, energy)`
# returns the smallest rank whose `Σ_{i<r} σ_i²` reaches the fraction `energy` of `Σ σ_i²`
# (`‖W‖_F²`): the rank that keeps that much of the matrix's "energy".

# %%
#| export
def low_rank(linear: Linear, rank: int) -> Sequential:
    """Replace a Linear by two, through the truncated SVD of its weight.

    Our weight W is (in, out) (y = x @ W + b); `weight` (given) is W as a float64 NumPy array,
    `first` and `second` (given) the two new layers. With U, S, Vt = np.linalg.svd(W,
    full_matrices=False) and r = rank:
        first.weight  ← U[:, :r] · sqrt(S[:r])            (in, r), no bias
        second.weight ← sqrt(S[:r])[:, None] · Vt[:r]     (r, out)
        second.bias   ← a copy of linear.bias (when it has one)
    (copy with `_copy_into`). Then first.weight @ second.weight is the best rank-r
    approximation of W (Eckart–Young). Returns Sequential(first, second), in linear's dtype
    and on its device; `linear` is not changed.
    """
    with no_grad():
        weight = to_host(linear.weight).astype(np.float64)
    _check_finite(weight, "low_rank", "the Linear's weight")  # LAPACK on inf never returns, and Ctrl-C cannot stop it
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 1 <= rank <= min(weight.shape):
        raise ValueError(f"low_rank: rank must be an int from 1 to min(in, out) = {min(weight.shape)}, got {rank!r}.")
    dtype, device = linear.weight.dtype, linear.weight.device
    first = Linear(linear.in_features, int(rank), bias=False, dtype=dtype, device=device)
    second = Linear(int(rank), linear.out_features, bias=linear.bias is not None, dtype=dtype, device=device)
    ### BEGIN SOLUTION
    U, S, Vt = np.linalg.svd(weight, full_matrices=False)
    root = np.sqrt(S[:rank])
    _copy_into(first.weight, U[:, :rank] * root)
    _copy_into(second.weight, root[:, None] * Vt[:rank])
    if linear.bias is not None:
        _copy_into(second.bias, to_host(linear.bias))
    return Sequential(first, second)
    ### END SOLUTION


def choose_rank(singular_values: Any, energy: float) -> int:
    """The smallest rank r whose singular values keep at least the fraction `energy` of the
    squared Frobenius norm: Σ_{i<r} σ_i² >= energy · Σ σ_i² (σ in decreasing order, as
    np.linalg.svd returns them; `sigma` below, float64). energy in (0, 1]; returns a Python int
    from 1 to len(σ).
    Compare FRACTIONS, with a tolerance of 1e-12: kept = cumsum(σ²) / sum(σ²) (kept[r − 1] is
    the fraction the first r values keep), r = the smallest with kept[r − 1] >= energy − 1e-12.
    The tolerance is on the fraction, so the answer does not depend on the scale of σ (on the
    raw sums, 1e-12 is far below their rounding error once ‖W‖² is large); and it makes
    energy 1.0 give len(σ) when the last cumulative fraction rounds to just below 1.
    """
    sigma = np.asarray(to_host(singular_values), dtype=np.float64)
    if sigma.size == 0 or not np.isfinite(sigma).all():  # a NaN in the cumulative sum gave rank 1 in silence
        raise ValueError(f"choose_rank: singular values must be finite numbers (at least one), got {sigma.size} "
                         f"with {int(np.sum(~np.isfinite(sigma)))} not finite.")
    if not 0.0 < energy <= 1.0:
        raise ValueError(f"choose_rank: energy is a fraction in (0, 1], got {energy!r}.")
    ### BEGIN SOLUTION
    kept = np.cumsum(sigma ** 2) / np.sum(sigma ** 2)
    return int(min(np.searchsorted(kept, energy - 1e-12) + 1, sigma.size))
    ### END SOLUTION


# %%
def test_unit_low_rank():
    layer = Linear(7, 5, seed=0, dtype=np.float64)
    W = layer.weight.numpy()
    sigma = np.linalg.svd(W, compute_uv=False)
    for r in (1, 3, 5):
        pair = returned(low_rank(layer, r), f"low_rank(layer, {r})", Sequential)
        first, second = pair[0], pair[1]
        assert first.weight.shape == (7, r) and second.weight.shape == (r, 5), (
            f"first Linear (in, r) from U's first r columns, second (r, out) from Vt's first r rows (our weight is "
            f"(in, out) = U·S·Vt); got {first.weight.shape} and {second.weight.shape}"
            + (f": the first factor is U's first r ROWS, U[:r], shape ({r}, 5); take its first r columns, U[:, :r]"
               if first.weight.shape == (r, 5) and second.weight.shape == (r, 5) else ""))
        assert first.bias is None and np.array_equal(second.bias.numpy(), layer.bias.numpy()), (
            "the first Linear has no bias; the second takes a copy of the layer's bias")
        product = first.weight.numpy() @ second.weight.numpy()
        error = np.sum((W - product) ** 2)
        assert abs(error - np.sum(sigma[r:] ** 2)) < 1e-10, (
            f"Eckart-Young: ||W - W_r||_F^2 must equal the sum of the dropped sigma^2 ({np.sum(sigma[r:] ** 2):.6f}), "
            f"got {error:.6f}: scale by the singular values, U's columns on the input side, Vt's rows on the output side")
        x = np.random.default_rng(7).standard_normal((2, 7))
        assert np.allclose(pair(Tensor(x)).numpy(), x @ product + layer.bias.numpy(), atol=1e-12), (
            "the pair computes x @ (first.weight @ second.weight) + bias")
    assert np.allclose(low_rank(layer, 5)[0].weight.numpy() @ low_rank(layer, 5)[1].weight.numpy(), W, atol=1e-12), (
        "at full rank the two factors multiply back to W")
    assert np.allclose(np.linalg.norm(first.weight.numpy(), axis=0), np.linalg.norm(second.weight.numpy(), axis=1)), (
        "sqrt(S) on each side: column i of the first factor and row i of the second have the same norm")
    ranks = [returned(choose_rank([3.0, 2.0, 1.0], energy), f"choose_rank([3, 2, 1], {energy:.4g})", (int, np.integer))
             for energy in (9 / 14, 0.65)]
    assert ranks == [1, 2], (
        f"choose_rank([3, 2, 1], energy) for energies 9/14 and 0.65: expected ranks [1, 2], got {ranks}: the smallest "
        "r with sum(sigma[:r]^2) >= energy * sum(sigma^2) (energies 9, 4, 1 of 14)"
        + ("; yours are one less: kept[r - 1] is the fraction the first r values keep, so the rank is the index "
           "searchsorted finds plus 1" if ranks == [0, 1] else ""))
    assert choose_rank([3.0, 2.0, 1.0], 1.0) == 3 and choose_rank([3.0, 2.0, 1.0], 13 / 14) == 2, (
        "choose_rank: the smallest r with sum(sigma[:r]^2) >= energy * sum(sigma^2)")
    assert choose_rank([3e4, 2e4, 1e4], 9 / 14) == 1, (
        f"choose_rank([3e4, 2e4, 1e4], 9/14) must be 1, as for [3, 2, 1], got {choose_rank([3e4, 2e4, 1e4], 9 / 14)}: "
        "compare the fractions cumsum(sigma^2) / sum(sigma^2) with energy - 1e-12, not the raw sums "
        "(a tolerance of 1e-12 is below their rounding error)")
    # a spectrum whose last cumulative fraction cumsum(σ²) / sum(σ²) rounds to just below 1 (cumsum and NumPy's
    # pairwise sum add in different orders); an SVD's last fraction lands on either side of 1, by machine
    ten = np.array([9.0, 8.7, 8.2, 8.0, 7.8, 6.3, 4.7, 3.0, 2.3, 0.1])
    assert choose_rank(ten, 1.0) == 10, (
        f"energy 1.0 keeps every singular value: expected rank 10, got {choose_rank(ten, 1.0)} (the last "
        "cumulative fraction rounds to just below 1 here: compare with energy - 1e-12, and never return more than "
        "len(sigma))")
    twenty = np.linalg.svd(np.random.default_rng(0).standard_normal((20, 30)), compute_uv=False)
    assert choose_rank(twenty, 1.0) == 20, (
        f"energy 1.0 keeps every singular value: expected rank 20, got {choose_rank(twenty, 1.0)} (the last "
        "cumulative fraction rounds to just below 1 here: compare with energy - 1e-12, and never return more than len(sigma))")
    print("✓ low_rank: two Linears whose product is the rank-r SVD truncation (Eckart-Young holds); choose_rank")


test_unit_low_rank()

# %% [markdown]
# ### The spectrum of a trained layer
#
# The second layer of the digits model, `128 → 64`. Its parameters break even at
# `r = 128·64/(128 + 64) ≈ 42.7`. Predict: how many of its 64 singular values are needed
# for 90% of the energy? For 99%? Compare with a random matrix of the same shape and scale.

# %%
W_second = dense[2].weight.numpy().astype(np.float64)
sigma_trained = np.linalg.svd(W_second, compute_uv=False)
sigma_random = np.linalg.svd(np.random.default_rng(8).standard_normal(W_second.shape) * W_second.std(), compute_uv=False)
for energy in (0.5, 0.9, 0.99):
    print(f"energy {energy:.0%}: rank {choose_rank(sigma_trained, energy):2d} of 64 for the trained layer, "
          f"{choose_rank(sigma_random, energy):2d} for a random one")
r90 = choose_rank(sigma_trained, 0.9)
pair = low_rank(dense[2], r90)
error = np.sum((W_second - pair[0].weight.numpy().astype(np.float64) @ pair[1].weight.numpy()) ** 2)
print(f"rank {r90}: ||W - W_r||² = {error:.4f}, sum of the dropped σ² = {np.sum(sigma_trained[r90:] ** 2):.4f} "
      f"(float32 factors); {r90 * (128 + 64):,} weights instead of {128 * 64:,}")

# %% [markdown]
# A trained layer concentrates its energy in fewer directions than a random one, but not
# dramatically: at this size the gain of a low-rank layer is modest. Replace the layer by
# its 90%-energy factorisation and measure, before and after a short fine-tune of the whole
# model (the two factors are ordinary Linear layers, so they train):

# %%
factored = copy.deepcopy(dense)
factored[2] = low_rank(dense[2], r90)
print(f"rank {r90} in place of layer 2: {count_parameters(factored):,} parameters "
      f"(dense {count_parameters(dense):,}); accuracy {held_out_accuracy(factored):.2%} without training, ", end="")
train(factored, epochs=5, lr=1e-3)
print(f"{held_out_accuracy(factored):.2%} after 5 epochs (dense {dense_accuracy:.2%})")

# %% [markdown]
# ## 9. Distillation: learning from a teacher's outputs
#
# A label says "this is a 3". A trained network's output says more: "a 3, a bit like an 8,
# not at all like a 1". Hinton, Vinyals and Dean (2015) train a small **student** on the
# softened outputs of a large **teacher**:
#
# $$\mathcal L = \alpha\,T^2\,\mathrm{KL}\big(p_t^{T} \,\Vert\, p_s^{T}\big) + (1-\alpha)\,\mathrm{CE}(z_s, y),
# \qquad p^{T} = \mathrm{softmax}(z / T).$$
#
# * **The temperature** `T > 1` softens both distributions, so that the small probabilities
#   of the wrong classes (the "dark knowledge") carry weight. Run the cell below: the
#   teacher's 0.047 becomes 0.27 at `T = 4`.
# * **The direction**: `KL(p_t ‖ p_s) = Σ_c p_t,c (log p_t,c − log p_s,c)`, the teacher's
#   distribution first. It is the cross-entropy of the student against the teacher's soft
#   targets minus the teacher's entropy (a constant for the student): where the teacher puts
#   probability, the student is made to put it too. `KL(p_s ‖ p_t)` is a different loss
#   (it lets the student ignore classes the teacher finds likely).
# * **`T²`**: the soft term's gradient with respect to a student logit is
#   `(p_s,c − p_t,c)/T`, and for large `T` the difference itself shrinks like `1/T`: the
#   gradient falls like `1/T²`. Multiplying by `T²` keeps the soft term's weight the same
#   when you change `T`.
# * **Batchmean**: sum over classes, mean over the positions (the batch; leading dims of
#   `(B, T, V)` language-model logits count as positions). A mean over classes too would
#   shrink the term by the number of classes. This is PyTorch's `F.kl_div(...,
#   reduction="batchmean")`.
# * **Logs from `log_softmax`**, never `log(softmax(z))`, which gives `-inf` once a
#   probability rounds to 0 (module 02).
# * **The teacher is fixed**: detach its logits. Only the student learns. We take the
#   teacher's values as a new Tensor in the student's dtype and on its device: a new leaf
#   has no graph (it is detached), and a float64 teacher then cannot turn a float32
#   student's loss (and all its softmaxes) into float64.
#
# `distillation_loss` is built from recorded operations (`log_softmax`, `exp`, `mul`,
# `sum`, `cross_entropy`): autograd differentiates it with the rules it already has, and
# `gradcheck` (module 05) checks it.

# %%
teacher_row = np.array([4.0, 1.0, -1.0])
for T in (1.0, 4.0):
    p = np.exp(teacher_row / T) / np.exp(teacher_row / T).sum()
    print(f"softmax(z / {T:.0f}) = {np.round(p, 3)}")

# %%
#| export
def distillation_loss(student_logits: Tensor, teacher_logits: Any, targets: Any,
                      temperature: float = 2.0, alpha: float = 0.5) -> Tensor:
    """Knowledge distillation (Hinton, Vinyals & Dean, 2015):

        alpha · T² · KL(softmax(t/T) ‖ softmax(s/T))  +  (1 − alpha) · cross_entropy(s, targets)

    s: student logits (..., C), a Tensor (the one input that gets a gradient);
    t: teacher logits of the same shape (Tensor or array), used as a new Tensor of its values
       in s's dtype and on s's device, `Tensor(to_array(t, dtype=s.dtype, device=s.device))`:
       a new leaf, so it is detached (no gradient reaches the teacher), and a float64 teacher
       leaves a float32 student's loss float32;
    targets: integer labels (...), as for module 04's cross_entropy. T = temperature > 0,
    alpha in [0, 1] (checked by the given lines).
    KL(p ‖ q) = Σ_c p_c (log p_c − log q_c), the teacher's p first, with both logs from
    log_softmax(… / T, dim=-1) and p = exp of the teacher's; summed over everything and divided
    by the number of positions N = s.size / C ("batchmean"). Equals PyTorch's
    alpha·T²·F.kl_div(F.log_softmax(s/T, -1), F.log_softmax(t/T, -1), reduction="batchmean",
    log_target=True) + (1 − alpha)·F.cross_entropy(s, y) on logits flattened to (N, C).
    Returns a 0-d Tensor in s's dtype, built from recorded ops (no new backward rule).
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)) \
            or not 0 < temperature < np.inf:
        raise ValueError(f"distillation_loss: temperature must be a finite number > 0, got {temperature!r}.")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"distillation_loss: alpha weighs the two terms and must be in [0, 1], got {alpha!r}.")
    student = as_tensor(student_logits)
    teacher_shape = tuple(teacher_logits.shape) if hasattr(teacher_logits, "shape") else np.shape(teacher_logits)
    if tuple(teacher_shape) != student.shape:
        raise ValueError(f"distillation_loss: student logits {student.shape} and teacher logits "
                         f"{tuple(teacher_shape)} must have the same shape.")
    teacher_values = to_host(teacher_logits) if hasattr(teacher_logits, "shape") else np.asarray(teacher_logits)
    if np.isnan(teacher_values).any():  # a student trained towards NaN learns NaN, with no error anywhere
        raise ValueError(f"distillation_loss: the teacher's logits hold {int(np.isnan(teacher_values).sum())} NaN "
                         "value(s) (a diverged teacher?); distil from a teacher whose outputs are numbers.")
    T = float(temperature)
    ### BEGIN SOLUTION
    teacher = Tensor(to_array(teacher_logits, dtype=student.dtype, device=student.device))
    log_p_student = log_softmax(student / T, dim=-1)
    log_p_teacher = log_softmax(teacher / T, dim=-1)
    positions = student.size // student.shape[-1]
    kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum() / positions
    return alpha * T * T * kl + (1.0 - alpha) * cross_entropy(student, targets)
    ### END SOLUTION


# %%
from tinytorch.core.autograd import gradcheck


def check_distillation_value(got: float, s, t, y, T: float, alpha: float) -> None:
    expected, wrong = expected_distillation(s, t, y, T, alpha)
    named = [cause for cause, value in wrong.items() if abs(got - value) < 1e-9]
    assert abs(got - expected) < 1e-10, (
        f"distillation_loss: expected {expected:.6f}, got {got:.6f}: "
        + (named[0] if named else "alpha·T²·KL(teacher ‖ student), batchmean, plus (1 − alpha)·cross-entropy"))


def test_unit_distillation_loss():
    rng = np.random.default_rng(9)
    s, t, y = rng.standard_normal((4, 5)), rng.standard_normal((4, 5)) * 3, rng.integers(0, 5, 4)
    loss = returned(distillation_loss(Tensor(s), t, y, temperature=3.0, alpha=0.6), "distillation_loss(...)", Tensor)
    check_distillation_value(loss.item(), s, t, y, 3.0, 0.6)
    s3, t3, y3 = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4)), rng.integers(0, 4, (2, 3))
    check_distillation_value(distillation_loss(Tensor(s3), t3, y3).item(), s3, t3, y3, 2.0, 0.5)
    teacher = Tensor(t, requires_grad=True)
    distillation_loss(Tensor(s, requires_grad=True), teacher, y).backward()
    assert teacher.grad is None, "detach the teacher's logits: only the student learns"
    mixed = distillation_loss(Tensor(s.astype(np.float32)), t, y)  # t is float64
    assert mixed.dtype == np.float32, (
        f"a float32 student with float64 teacher logits must give a float32 loss, got {mixed.dtype}: take the "
        "teacher's values in the student's dtype, Tensor(to_array(t, dtype=s.dtype, device=s.device))")
    assert gradcheck(lambda z: distillation_loss(z, t, y, temperature=2.5, alpha=0.3), [Tensor(s, requires_grad=True)]), (
        "the gradient of the student's logits must match central differences")
    print("✓ distillation_loss: the formula's value, batchmean over positions, teacher detached, gradcheck")


test_unit_distillation_loss()

# %% [markdown]
# ### Predict, then run: does a small student learn more from the teacher?
#
# The teacher is the dense digits model (17,226 parameters). The student is an MLP
# `64 → 16 → 10` (1,210 parameters). Two arms, the same 20 epochs, the same optimiser,
# schedule and batches: on the labels alone (cross-entropy), and distilled from the teacher
# with the loss's defaults (`T = 2`, `α = 0.5`). Three seeds per arm; we report the mean and
# the spread (max − min) of the test accuracy, and call a difference real only if it is
# larger than both spreads. The settings were fixed before the run, and the verdict below
# is printed by the code, whichever way it goes. Predict it.

# %%
with no_grad():
    dense.eval()
    teacher_logits = dense(Tensor(x_train)).numpy()  # the teacher, fixed, on every training image
    dense.train()


def train_student(seed: int, distill: bool, epochs: int = 20, hidden: int = 16) -> float:
    student = digits_mlp(hidden=(hidden,), seed=100 + 10 * seed)
    loader = DataLoader(TensorDataset(Tensor(np.arange(len(y_train))), Tensor(y_train)),
                        batch_size=32, shuffle=True, seed=seed)
    optimizer = AdamW(student.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = CosineWarmupLR(optimizer, warmup_steps=0, total_steps=epochs * len(loader))
    for _ in range(epochs):
        for rows, targets in loader:
            rows = rows.numpy()
            logits = student(Tensor(x_train[rows]))
            loss = (distillation_loss(logits, teacher_logits[rows], targets) if distill
                    else cross_entropy(logits, targets))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    return held_out_accuracy(student)


start = time.perf_counter()
arms = {name: [train_student(seed, distill) for seed in range(3)]
        for name, distill in (("labels only", False), ("distilled", True))}
for name, results in arms.items():
    print(f"{name:>11}: mean {np.mean(results):.2%}, spread {np.ptp(results):.2%}  ({', '.join(f'{a:.2%}' for a in results)})")
gain = np.mean(arms["distilled"]) - np.mean(arms["labels only"])
spread = max(np.ptp(arms["distilled"]), np.ptp(arms["labels only"]))
verdict = ("helps: the gain is larger than the spread over seeds" if gain > spread else
           "does not help here: the difference is within the spread over seeds" if abs(gain) <= spread else
           "hurts here: the student does worse, by more than the spread over seeds")
print(f"distillation {verdict} (gain {100 * gain:+.2f} points, spread {100 * spread:.2f}); "
      f"{time.perf_counter() - start:.1f} s for six students")

# %% [markdown]
# Read the verdict your run printed, not a claim in this text. When this lesson was
# written, it said that distillation does **not** help the digits student (the distilled
# arm's mean was below the labels-only arm's). There are good reasons at this size. The
# teacher fits its training images almost perfectly, so on exactly those images its outputs
# are close to one-hot and carry little more than the labels; ten classes leave little
# "dark knowledge" to pass on; and the student trains to convergence on the labels in
# twenty epochs anyway. Distillation pays where the teacher's distribution holds what
# labels cannot: a language model's next-character distribution is genuinely uncertain
# (after "th", both "e" and "a" are right), so a 2-layer student can learn from a 4-layer
# teacher's whole distribution instead of the one character that came next. The milestone
# `compress` measures exactly that on the Shakespeare GPT, with three seeds per arm.

# %% [markdown]
# ## 10. Checking against PyTorch
#
# Where PyTorch is installed, its pruning utilities give the same masks as ours on the same
# weights (ours are `(in, out)`, PyTorch's `(out, in)`: compare with a transpose), and its
# `kl_div` the same loss. The test suite checks more (global pruning, pruning twice, CSR
# arrays, gradients) in `tests/16_compression/`.

# %%
try:
    import torch
    import torch.nn.functional as F
    from torch.nn.utils import prune as torch_prune
except ImportError:
    torch = None
    print("PyTorch is not installed: skipping the comparison (pip install torch, the CPU build is enough).")

if torch is not None:
    ours = Linear(12, 8, seed=10, dtype=np.float64)
    theirs = torch.nn.Linear(12, 8).double()
    theirs.weight.data = torch.tensor(ours.weight.numpy().T.copy())
    prune_magnitude(ours, 0.3)
    torch_prune.l1_unstructured(theirs, "weight", amount=0.3)
    print("l1_unstructured mask equal:", np.array_equal(ours.weight_mask.numpy(), theirs.weight_mask.numpy().T))
    rng = np.random.default_rng(11)
    s, t, y = rng.standard_normal((6, 10)), rng.standard_normal((6, 10)), rng.integers(0, 10, 6)
    kl = F.kl_div(F.log_softmax(torch.tensor(s) / 2.0, -1), F.log_softmax(torch.tensor(t) / 2.0, -1),
                  reduction="batchmean", log_target=True)
    reference = (0.5 * 4.0 * kl + 0.5 * F.cross_entropy(torch.tensor(s), torch.tensor(y))).item()
    print(f"distillation loss: ours {distillation_loss(Tensor(s), t, y).item():.12f}, PyTorch {reference:.12f}")

# %% [markdown]
# ## Summary
#
# * Magnitude pruning removes the weights of smallest `|w|`; a persistent mask applied in
#   the forward (`weight = weight_orig * weight_mask`, a recorded multiply) gives pruned
#   weights gradient 0, so they stay 0 while the network is fine-tuned, with any optimizer.
#   The mask is a buffer: saved, loaded and moved with the model.
# * One global threshold spares the small layers; gradual pruning on the cubic schedule,
#   with fine-tuning in between, keeps the accuracy at sparsities that one-shot pruning
#   destroys.
# * Zeros do not make dense products faster. In bytes, a bitmask pays above `1/32` sparsity,
#   CSR with int32 indices above about one half, and CSR beats the bitmask above about 97%.
# * Structured pruning removes whole hidden units (`‖fc[:, j]‖·‖proj[j, :]‖`): smaller
#   matrices, real speed-ups.
# * A Linear is two thin Linears through its truncated SVD; Eckart–Young: the squared
#   error is the sum of the dropped `σ²`, so the spectrum picks the rank.
# * Distillation: `α·T²·KL(p_t^T ‖ p_s^T) + (1 − α)·CE`, through autograd. Whether it helps
#   is measured, with seeds, not assumed.
#
# ## Exercises
#
# 1. **Pruning the whole curve.** Run `gradual_prune_digits` to 50%, 80%, 90%, 95% and 98%
#    and tabulate accuracy against sparsity next to the one-shot numbers of section 4.
#    Where does gradual pruning stop helping?
# 2. **A data-driven importance.** Score each hidden unit of the GPT-shaped `gpt_mlp` by the
#    mean absolute value of its activation (after GELU) on a batch instead of the weight
#    norms. Do the two scores choose the same units? (Train a small model first: on random
#    weights every unit looks alike.)
# 3. **int16 indices.** Change a copy of `storage_bytes` to store CSR's column indices as
#    int16. Derive the new crossover with dense, and check it with `first_sparsity_where`.
# 4. **Where low rank pays.** For each Linear of the digits model, find the rank that keeps
#    99% of the energy and the rank at which the parameters break even. Which layer, if any,
#    is worth factorising?
# 5. **Temperature and weight.** Rerun the distillation experiment with `T` in {1, 4, 8} and
#    `α` in {0.5, 0.9}, three seeds each. Does any setting beat the labels by more than the
#    spread? Then train the student on only 10% of the labelled images, with the teacher's
#    outputs on all of them: does distillation help then?
#
# ## Questions (answer them by running your code)
#
# 1. After `prune_magnitude(layer, 0.5)`, what does `layer.state_dict()` hold, and what
#    happens when you `load_state_dict` it into a fresh, unpruned `Linear`? How would you
#    load it?
# 2. Prune a layer to 50%, then call `prune_magnitude(layer, 0.3)`. What is its sparsity,
#    and why? What would PyTorch's `l1_unstructured(module, "weight", 0.3)` do on a module
#    already pruned to 50%?
# 3. In section 3, how far did the pruned entries of `weight_orig` move in ten AdamW steps?
#    Which part is weight decay and which part is Adam's momentum? (Set `weight_decay=0`.)
# 4. For the 64 × 128 layer, at what sparsity do the bitmask and CSR take the same number of
#    bytes? Check it with `storage_bytes`.
# 5. `distillation_loss(s, t, y, temperature=T, alpha=1.0)` for `t = s`: what is its value,
#    and its gradient? Why?
