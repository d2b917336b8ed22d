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
# # Module 08: DataLoader
#
# > Feeding a model: batches, shuffling, and an order you can reproduce.
#
# **When you finish this module you will be able to**
#
# * write a `Dataset` (how many examples, what is example `i`) and `TensorDataset`, which
#   hands out whole batches with one indexing operation;
# * stack a list of examples into a batch (`collate`) with the right axis and dtypes;
# * write a `DataLoader(dataset, batch_size=1, shuffle=False, drop_last=False, seed=None)`
#   that visits every example exactly once per epoch, shuffles with a new order every
#   epoch, and repeats the very same orders for the same seed;
# * say how many batches an epoch has, with and without `drop_last`;
# * measure what the batch size does to the time of an epoch and to what one epoch learns,
#   and show why a sorted data set must be shuffled.
#
# **Time:** about 2 hours: 30 minutes for the data sets, 15 for `collate`, 45 for the
# `DataLoader`, the rest for the measurements and the exercises.
#
# Module 07's `Trainer` loops over "any iterable of `(x, y)` batches". Where do those
# batches come from? For a real data set we want:
#
# * **batches**: a few dozen examples at a time, stacked into one tensor, so that one
#   matrix multiplication handles all of them (fast) while the batch still fits in memory;
# * **every example exactly once per epoch**, none forgotten, none repeated;
# * **shuffling**: a new random order every epoch, so that consecutive batches are not
#   correlated (sorted data trains badly, as you will measure);
# * **reproducibility**: with a seed, the same orders again, epoch by epoch, so that a
#   run can be repeated and a checkpointed run resumed exactly.
#
# PyTorch splits this job in two, and so do we:
#
# | piece | question it answers |
# |---|---|
# | `Dataset` | how many examples are there, and what is example `i`? |
# | `DataLoader` | in which order, how many at a time, and how are they stacked? |

# %%
#| default_exp data.loader

# %%
#| export
from __future__ import annotations

import math
import numbers
from typing import Any, Iterator, Sequence

import numpy as np

from tinytorch.core.tensor import Tensor, array_module, as_tensor

# %% [markdown]
# ## 1. Datasets
#
# A **map-style** data set is anything with `len(ds)` and `ds[i]`. Examples are usually
# tuples, `(features, label)`. The base class `Dataset` (given) only states that contract.
#
# `TensorDataset(x, y, ...)` is the data set you will use most: tensors whose first
# dimension is the example index. Example `i` is `(x[i], y[i], ...)`. You write:
#
# * `__init__(*tensors)`: keep `self.tensors`, a tuple with each argument made a Tensor by
#   `as_tensor` (module 01: a Tensor stays itself, an array keeps its dtype, a list
#   becomes float32). Three things are errors, each a `ValueError`: no tensor at all; a
#   0-d tensor (it has no example dimension); tensors whose first dimensions differ. That
#   last message must name every tensor's first dimension (e.g. "tensor 0 has 4 examples,
#   tensor 1 has 5"): pairing 4 images with 5 labels silently would pair every image
#   after the mismatch with the wrong label, or crash deep inside an epoch;
# * `__len__`: the number of examples, the shared first dimension (not the number of tensors);
# * `__getitem__(i)`: the tuple of `Tensor(xp.asarray(t.data[i]))` for each tensor, same
#   dtype (`xp.asarray` turns the scalar of a 1-D tensor into a 0-d array). A negative `i`
#   counts from the end; an index out of range raises `IndexError` (NumPy does that for you);
# * `get_batch(indices)`: the examples at `indices` (a NumPy integer array), already
#   stacked: the tuple of `Tensor(t.data[xp.asarray(indices)])` for each tensor. One
#   fancy-indexing gather per tensor instead of `batch_size` calls to `__getitem__` and a
#   stack (section 5 measures the difference). `xp.asarray` moves the indices to the
#   tensor's device.
#
# The DataLoader uses `get_batch` whenever a data set has one.

# %%
#| export
class Dataset:
    """A map-style data set: `len(ds)` examples, `ds[i]` is example i (0 <= i < len).

    Subclasses may add `get_batch(indices)` returning a whole, already stacked batch;
    the DataLoader then uses it instead of one `__getitem__` per example.
    """

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must implement __len__.")

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__.")


class TensorDataset(Dataset):
    """Example i is `tuple(t[i] for t in tensors)`; the tensors share their first dimension.

    Accepts Tensors, NumPy/CuPy arrays or lists (made Tensors by `as_tensor`).
    """

    def __init__(self, *tensors: Any):
        """self.tensors = tuple of as_tensor(t). ValueError when there is no tensor, when a
        tensor is 0-d, or when the first dimensions differ (the message names each one)."""
        ### BEGIN SOLUTION
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor.")
        self.tensors = tuple(as_tensor(t) for t in tensors)
        for i, t in enumerate(self.tensors):
            if t.ndim == 0:
                raise ValueError(f"TensorDataset: tensor {i} is a scalar; each tensor needs a first (example) dimension.")
        lengths = [t.shape[0] for t in self.tensors]
        if len(set(lengths)) > 1:
            described = ", ".join(f"tensor {i} has {n} (shape {t.shape})"
                                  for i, (n, t) in enumerate(zip(lengths, self.tensors)))
            raise ValueError(f"TensorDataset: all tensors need the same number of examples (first dimension): {described}.")
        ### END SOLUTION

    def __len__(self) -> int:
        """The number of examples (the tensors' shared first dimension)."""
        ### BEGIN SOLUTION
        return self.tensors[0].shape[0]
        ### END SOLUTION

    def __getitem__(self, index: int) -> tuple:
        """Example `index`: a tuple with one Tensor per tensor, `Tensor(xp.asarray(t.data[index]))`."""
        ### BEGIN SOLUTION
        return tuple(Tensor(array_module(t.data).asarray(t.data[index])) for t in self.tensors)
        ### END SOLUTION

    def get_batch(self, indices: Any) -> tuple:
        """The examples at `indices` (an integer array), stacked: one gather per tensor,
        `Tensor(t.data[xp.asarray(indices)])`, in the order of `indices`."""
        ### BEGIN SOLUTION
        out = []
        for t in self.tensors:
            xp = array_module(t.data)
            out.append(Tensor(t.data[xp.asarray(indices, dtype=np.int64)]))
        return tuple(out)
        ### END SOLUTION


# %% [markdown]
# A worked example: six examples of two features and a label.

# %%
_x = np.arange(12, dtype=np.float32).reshape(6, 2)
_y = np.array([0, 1, 2, 0, 1, 2])
_ds = TensorDataset(_x, _y)
print("len:", len(_ds))
print("ds[4]:", [t.numpy().tolist() for t in _ds[4]], " label dtype:", _ds[4][1].dtype)
print("ds[-1]:", [t.numpy().tolist() for t in _ds[-1]])
print("get_batch([5, 0, 3]):", [t.numpy().tolist() for t in _ds.get_batch(np.array([5, 0, 3]))])
try:
    TensorDataset(_x, _y[:5])
except ValueError as err:
    print("6 features, 5 labels ->", err)

# %%
def test_unit_tensor_dataset():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.array([0, 1, 2, 0, 1, 2])
    ds = TensorDataset(x, y)
    assert len(ds) == 6, f"a dataset of 6 rows has len 6, got {len(ds)}"
    xi, yi = ds[4]
    assert xi.numpy().tolist() == [8.0, 9.0] and yi.item() == 1 and yi.dtype == y.dtype, (
        f"ds[4] is row 4 of every array: ([8, 9], 1) with y's dtype; got ({xi.numpy().tolist()}, {yi.numpy()}) {yi.dtype}")
    bx, by = ds.get_batch(np.array([5, 0, 3]))
    assert bx.numpy().tolist() == [[10, 11], [0, 1], [6, 7]] and by.numpy().tolist() == [2, 0, 0], (
        f"get_batch([5, 0, 3]) gathers those rows, in that order; got {bx.numpy().tolist()} and {by.numpy().tolist()}")
    try:
        TensorDataset(x, y[:5])
    except ValueError as err:
        assert "6" in str(err) and "5" in str(err), f"name both lengths: {err}"
    else:
        raise AssertionError("different lengths must raise ValueError")
    print("✓ TensorDataset: items, vectorised batches, length check")


test_unit_tensor_dataset()

# %% [markdown]
# ## 2. Collating: a list of examples → one batch
#
# A data set without `get_batch` gives one example at a time. `collate(examples)` stacks
# a list of them, field by field:
#
# * a list of tuples (or lists) `[(x0, y0), (x1, y1), ...]` becomes the **tuple**
#   `(collate([x0, x1, ...]), collate([y0, y1, ...]))`; examples with different numbers of
#   fields are a `ValueError`;
# * a list of dicts is collated key by key into a dict (the keys of the first example);
# * Tensors and arrays are stacked along a **new first axis**: `B` examples of shape
#   `(2, 3)` make one `(B, 2, 3)` batch, keeping their dtype (`xp.stack` of the arrays;
#   not a concatenation, which would give `(2B, 3)`, and not the last axis). Examples of
#   different shapes cannot be stacked: `ValueError` naming the shapes;
# * Python `bool`s become a bool tensor, Python ints an **int64** tensor (class labels must
#   stay integers: cross-entropy indexes with them), Python floats float32 (check `bool`
#   before `int`: in Python a bool *is* an int);
# * an empty list is a `ValueError`, anything else a `TypeError`.

# %%
#| export
def collate(examples: Sequence[Any]) -> Any:
    """Stack a list of examples into a batch: tuples field by field (a tuple), dicts key by
    key (a dict), Tensors/arrays along a new first axis (dtype kept), bools → bool, ints →
    int64, floats → float32. ValueError: no examples, different numbers of fields,
    different shapes (named). TypeError: anything else."""
    ### BEGIN SOLUTION
    if len(examples) == 0:
        raise ValueError("collate: cannot make a batch from no examples.")
    first = examples[0]
    if isinstance(first, (tuple, list)):
        width = len(first)
        if any(len(e) != width for e in examples):
            raise ValueError("collate: examples have different numbers of fields.")
        return tuple(collate([e[k] for e in examples]) for k in range(width))
    if isinstance(first, dict):
        return {key: collate([e[key] for e in examples]) for key in first}
    if isinstance(first, Tensor) or hasattr(first, "shape"):
        arrays = [e.data if isinstance(e, Tensor) else e for e in examples]
        xp = array_module(arrays[0])
        shapes = sorted({tuple(a.shape) for a in arrays})
        if len(shapes) > 1:
            raise ValueError(f"collate: examples of different shapes cannot be stacked: {shapes}.")
        return Tensor(xp.stack([xp.asarray(a) for a in arrays]))
    if isinstance(first, (bool, np.bool_)):
        return Tensor(np.array(examples, dtype=bool))
    if isinstance(first, numbers.Integral):
        return Tensor(np.array(examples, dtype=np.int64))
    if isinstance(first, numbers.Real):
        return Tensor(np.array(examples, dtype=np.float32))
    raise TypeError(f"collate: do not know how to batch a {type(first).__name__}.")
    ### END SOLUTION


# %% [markdown]
# Worked example: two `(features, label)` examples, then four 2×3 "images".

# %%
_pair = collate([(np.array([1.0, 2.0]), 3), (np.array([4.0, 5.0]), 7)])
print("features:", _pair[0].numpy().tolist(), _pair[0].dtype, " labels:", _pair[1].numpy().tolist(), _pair[1].dtype)
print("four (2, 3) examples ->", collate([np.full((2, 3), i, dtype=np.float32) for i in range(4)]).shape)

# %%
def test_unit_collate():
    x, y = collate([(np.array([1.0, 2.0]), 3), (np.array([4.0, 5.0]), 7)])
    assert x.numpy().tolist() == [[1, 2], [4, 5]] and x.dtype == np.float64, (
        f"pairs are collated field by field: the arrays stacked along a new first axis, [[1, 2], [4, 5]] float64 "
        f"(arrays keep their dtype); got {x.numpy().tolist()} {x.dtype}")
    assert y.numpy().tolist() == [3, 7] and y.dtype == np.int64, \
        f"Python ints collate to int64 [3, 7], got {y.numpy().tolist()} {y.dtype}"
    shape = collate([np.zeros((2, 3))] * 4).shape
    assert shape == (4, 2, 3), f"four (2, 3) examples stack on a new first axis, (4, 2, 3); got {shape}"
    floats = collate([0.5, 1.5])
    assert floats.dtype == np.float32 and floats.numpy().tolist() == [0.5, 1.5], \
        f"Python floats collate to float32 [0.5, 1.5], got {floats.numpy().tolist()} {floats.dtype}"
    fields = collate([{"a": 1}, {"a": 2}])["a"].numpy().tolist()
    assert fields == [1, 2], f"dicts collate key by key: {{'a': [1, 2]}}, got {fields}"
    print("✓ collate: arrays stacked on a new first axis, ints stay int64, floats become float32")


test_unit_collate()

# %% [markdown]
# ## 3. The DataLoader
#
# Each time you iterate over a loader, one **epoch** starts:
#
# 1. **the order** (`order(epoch)`): `0, 1, ..., n−1` without shuffling; with
#    `shuffle=True` a random permutation of it;
# 2. cut the order into slices of `batch_size`; the last slice may be short, and
#    `drop_last=True` drops it (useful when every batch must have the same size), while
#    with `drop_last=False` (the default) it is kept: every example is seen;
# 3. for each slice, **fetch** the examples (`_fetch(indices)`): the data set's
#    `get_batch(indices)` when it has one, else `collate([dataset[int(i)] for i in indices])`.
#
# **How many batches** (`len(loader)`): with `n` examples, `ceil(n / batch_size)`, or
# `n // batch_size` with `drop_last=True`. 10 examples in batches of 4: 3 batches
# (4, 4, 2), or 2 with `drop_last`.
#
# **Seeds.** With `seed=s`, epoch `e`'s permutation is
# `np.random.default_rng([s, e]).permutation(n)`: a generator seeded with the *pair*.
# Each epoch gets its own order, and a new loader with the same seed produces the very
# same sequence of orders. Two tempting shortcuts are wrong: `default_rng(s)` gives the
# same order in every epoch, and `default_rng(s + e)` makes seed 11's second epoch the
# same as seed 12's first. Without a seed, each epoch draws from a fresh
# `np.random.default_rng()` (not reproducible, by design).
#
# **The epoch counter.** The loader counts its epochs in `.epoch` (0 at first).
# `__iter__` takes `order(self.epoch)`, **then adds one to `self.epoch` at once** (not
# when the epoch ends), then yields the batches. Given: `set_epoch(e)`, and
# `state_dict()` / `load_state_dict()`, which save and restore the counter, so a training
# run resumed from a checkpoint sees exactly the data it would have seen.
#
# The permutation is always a NumPy array of indices on the host (8 bytes per example);
# only the gathered batch goes to the data's device. The constructor's checks are given.

# %%
#| export
class DataLoader:
    """Iterate over a data set in batches, optionally shuffled with a reproducible seed.

    dataset    -- a Dataset (len and [i]; `get_batch(indices)` is used when present)
    batch_size -- examples per batch (>= 1); the last batch may be smaller
    shuffle    -- a new random order every epoch
    drop_last  -- drop the last, smaller batch
    seed       -- with shuffle: epoch e uses np.random.default_rng([seed, e]).permutation(n)
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int | None = None):
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}.")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        """Number of batches in one epoch: ceil(n / batch_size), or n // batch_size with drop_last."""
        ### BEGIN SOLUTION
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        ### END SOLUTION

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The example indices of `epoch` (default: self.epoch, the next one), in the order
        they come: np.arange(n), or with shuffle np.random.default_rng([seed, epoch]).permutation(n)
        (np.random.default_rng() without a seed)."""
        epoch = self.epoch if epoch is None else epoch
        ### BEGIN SOLUTION
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        rng = np.random.default_rng(None if self.seed is None else [self.seed, epoch])
        return rng.permutation(n)
        ### END SOLUTION

    def _fetch(self, indices: np.ndarray) -> Any:
        """One batch: dataset.get_batch(indices) if the data set has it, else
        collate([dataset[int(i)] for i in indices])."""
        ### BEGIN SOLUTION
        if hasattr(self.dataset, "get_batch"):
            return self.dataset.get_batch(indices)
        return collate([self.dataset[int(i)] for i in indices])
        ### END SOLUTION

    def __iter__(self) -> Iterator[Any]:
        """Start the next epoch: order(self.epoch), then self.epoch += 1 at once, then yield
        len(self) batches, batch b being _fetch(order[b * batch_size:(b + 1) * batch_size])."""
        ### BEGIN SOLUTION
        order = self.order(self.epoch)
        self.epoch += 1
        n_batches = len(self)
        return (self._fetch(order[b * self.batch_size:(b + 1) * self.batch_size]) for b in range(n_batches))
        ### END SOLUTION

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "seed": -1 if self.seed is None else self.seed}

    def load_state_dict(self, state: dict) -> None:
        """Restore the epoch counter; a state saved with another seed is refused (nothing changes)."""
        saved_seed = int(state.get("seed", -1))
        if saved_seed >= 0 and self.seed is not None and saved_seed != self.seed:
            raise ValueError(f"load_state_dict: the state was saved with seed {saved_seed}, this loader has seed {self.seed}.")
        self.epoch = int(state["epoch"])

    def __repr__(self) -> str:
        return (f"DataLoader({len(self.dataset)} examples, batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, seed={self.seed}, epoch={self.epoch})")


# %% [markdown]
# Worked example: ten examples whose label is their index, so the labels show the order.

# %%
_ten = TensorDataset(np.arange(10, dtype=np.float32).reshape(10, 1), np.arange(10))
for _kwargs in ({"batch_size": 4}, {"batch_size": 4, "drop_last": True},
                {"batch_size": 4, "shuffle": True, "seed": 0}):
    _loader = DataLoader(_ten, **_kwargs)
    _epochs = [[yb.numpy().tolist() for _, yb in _loader] for _ in range(2)]
    print(f"{str(_kwargs):45s} len {len(_loader)}: epoch 0 {_epochs[0]}  epoch 1 {_epochs[1]}")

# %%
def test_unit_dataloader():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    batches = list(loader)
    sizes = [len(b[1].numpy()) for b in batches]
    assert len(loader) == 3 and sizes == [4, 4, 2], (
        f"10 examples in batches of 4: len 3, batches of [4, 4, 2] (with drop_last=False the short last batch counts "
        f"and is kept); got len {len(loader)}, {sizes}")
    order = np.concatenate([b[1].numpy() for b in batches]).tolist()
    assert order == list(range(10)), f"without shuffle every example comes once, in order; got {order}"
    dropped = len(DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True))
    assert dropped == 2, f"drop_last=True drops the short last batch: 2 batches, got {dropped}"

    shuffled = DataLoader(TensorDataset(x, y), batch_size=3, shuffle=True, seed=42)
    epoch0 = np.concatenate([b[1].numpy() for b in shuffled])
    epoch1 = np.concatenate([b[1].numpy() for b in shuffled])
    assert sorted(epoch0.tolist()) == list(range(10)) and sorted(epoch1.tolist()) == list(range(10)), \
        f"a shuffled epoch still holds every example exactly once; got {epoch0.tolist()} and {epoch1.tolist()}"
    assert shuffled.epoch == 2, (f"two passes over the loader are epochs 0 and 1: epoch is 2 after them, got "
                                 f"{shuffled.epoch}: each iteration starts the next epoch (__iter__ advances .epoch)")
    assert epoch0.tolist() != list(range(10)) and epoch0.tolist() != epoch1.tolist(), \
        f"shuffle=True: each epoch in a new order (default_rng([seed, epoch])); got {epoch0.tolist()} then {epoch1.tolist()}"
    again = DataLoader(TensorDataset(x, y), batch_size=3, shuffle=True, seed=42)
    replay = np.concatenate([b[1].numpy() for b in again]).tolist()
    assert replay == epoch0.tolist(), f"the same seed must give the same first epoch {epoch0.tolist()}, got {replay}"
    followed = np.concatenate([b[0].numpy()[:, 0] for b in again]).tolist()
    assert followed == epoch1.tolist(), "x must follow y: each batch gathers the same rows of every array"
    print("✓ DataLoader: batches, exactly once, seeded epochs, drop_last")


test_unit_dataloader()

# %% [markdown]
# ## 4. Why shuffle?
#
# Many data sets arrive sorted: all the 0s, then all the 1s... Without shuffling, every
# batch holds one or two classes, each gradient step pulls the model towards the classes
# in that batch, and the next batches pull it elsewhere: the model mostly remembers the
# last classes it saw. A shuffled batch is a small random sample of the whole data set,
# so its gradient is an unbiased (if noisy) estimate of the full gradient.
#
# First, the classes in the batches of a sorted, 10-class data set of 1,000 labels:

# %%
labels = np.repeat(np.arange(10), 100)
features = np.zeros((1000, 1), dtype=np.float32)
for name, loader in [("in order", DataLoader(TensorDataset(features, labels), batch_size=32)),
                     ("shuffled", DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True, seed=0))]:
    per_batch = [np.unique(yb.numpy()).size for _, yb in loader]
    counts = np.bincount(next(iter(loader))[1].numpy(), minlength=10)
    print(f"{name:9s}: classes per batch (first 8 batches) {per_batch[:8]}; first batch's class counts {counts.tolist()}")

# %% [markdown]
# ### Predict, then run: training on sorted data
#
# Four overlapping Gaussian blobs (4 classes, 200 points each, **sorted by class**), a
# linear classifier, SGD with `lr = 0.5`, batches of 20, 3 epochs: once in the stored
# order, once shuffled. **Predict** the training accuracy of each (25% is chance; the
# overlap keeps the best possible near 75%), and which classes the sorted run gets
# right. Then run (a second).

# %%
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import SGD, Adam
from tinytorch.core.training import Trainer, accuracy

_rng = np.random.default_rng(0)
_centers = 1.5 * np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
_blob_x = np.concatenate([c + _rng.standard_normal((200, 2)) for c in _centers]).astype(np.float32)
_blob_y = np.repeat(np.arange(4), 200)
_blobs = TensorDataset(_blob_x, _blob_y)
for _shuffle in (False, True):
    _model = Sequential(Linear(2, 4, seed=0))
    _trainer = Trainer(_model, SGD(_model.parameters(), lr=0.5), CrossEntropyLoss(), verbose=False)
    _trainer.fit(DataLoader(_blobs, batch_size=20, shuffle=_shuffle, seed=0), epochs=3)
    _predicted = _model(Tensor(_blob_x)).numpy().argmax(-1)
    _per_class = [float((_predicted[_blob_y == c] == c).mean()) for c in range(4)]
    print(f"shuffle={_shuffle!s:5s}: training accuracy {float((_predicted == _blob_y).mean()):.3f}, "
          f"per class {[round(a, 2) for a in _per_class]}")

# %% [markdown]
# Sorted, each epoch ends with ten batches of class 3 only: the model leaves every epoch
# leaning towards the last classes it saw (class 3 right almost always, class 0 rarely).
# Shuffled, the same model with the same number of steps treats the four classes alike
# and reaches the best accuracy the overlap allows.
#
# ## 5. Systems view: the batch size, and how a batch is gathered
#
# A batch's memory is `batch_size × (bytes per example)`. For the 8×8 digits in float32
# that is `32 × 64 × 4` = 8 KiB, nothing. For 224×224 RGB images it is
# `256 × 3 × 224 × 224 × 4` bytes ≈ 154 MB per batch *of inputs*, before any activation:
# the batch size is often chosen by what fits on the GPU.
#
# Time is the other side. Every step costs a fixed Python overhead (dozens of small
# operations, each recorded in the graph) plus arithmetic that grows with the batch.
#
# ### Predict, then run: time per epoch against the batch size
#
# One epoch of training a 32 → 64 → 2 MLP on 2,048 examples, with batch sizes 4, 16,
# 64, 256 and 1,024. **Predict** how the time of an epoch changes from batch 4 to batch
# 1,024 (the number of steps falls from 512 to 2), and which batch size ends the single
# epoch with the lowest training loss. Then run (about a second; timings on a busy
# machine are noisy, so look at the trend).

# %%
import time

_rng = np.random.default_rng(1)
_xs = _rng.standard_normal((2048, 32)).astype(np.float32)
_ys = (_xs[:, :4].sum(axis=1) > 0).astype(np.int64)
for _bs in (4, 16, 64, 256, 1024):
    _model = Sequential(Linear(32, 64, seed=0), ReLU(), Linear(64, 2, seed=1))
    _trainer = Trainer(_model, SGD(_model.parameters(), lr=0.1), CrossEntropyLoss(), verbose=False)
    _loader = DataLoader(TensorDataset(_xs, _ys), batch_size=_bs, shuffle=True, seed=0)
    _start = time.perf_counter()
    _loss = _trainer.train_epoch(_loader)
    _seconds = time.perf_counter() - _start
    print(f"batch {_bs:5d}: {len(_loader):4d} steps, {_seconds * 1e3:7.1f} ms per epoch "
          f"({2048 / _seconds:9,.0f} examples/s), mean training loss {_loss:.3f}")

# %% [markdown]
# Small batches spend the epoch on overhead: hundreds of steps, each doing too little
# arithmetic to be efficient. Large batches are fast per example but take few steps, so
# one epoch teaches less (the loss stays higher for the same learning rate). The usual
# choice is the smallest batch that keeps the hardware busy, with the learning rate tuned
# for it.
#
# ### Predict, then run: one gather against one item at a time
#
# The same 20,000 × 64 data set through the DataLoader twice: once with `get_batch` (one
# fancy index per tensor per batch) and once through a wrapper that only has
# `__getitem__` (64 calls and a `collate` per batch). **Predict** the ratio of the two
# epoch times. Then run.

# %%
class ItemOnly(Dataset):
    """The same data, but only item by item (no get_batch): the DataLoader must collate."""

    def __init__(self, ds):
        self.ds = ds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.ds[i]


big = TensorDataset(np.random.default_rng(0).standard_normal((20_000, 64)).astype(np.float32),
                    np.random.default_rng(1).integers(0, 10, 20_000))
_times = {}
for name, ds in [("vectorised get_batch", big), ("per-item + collate", ItemOnly(big))]:
    loader = DataLoader(ds, batch_size=64, shuffle=True, seed=0)
    start = time.perf_counter()
    n = sum(xb.shape[0] for xb, _ in loader)
    _times[name] = time.perf_counter() - start
    print(f"{name:22s}: one epoch of {n:,} examples in {_times[name] * 1e3:7.1f} ms")
print(f"ratio: {_times['per-item + collate'] / _times['vectorised get_batch']:.0f}x")
batch_bytes = 64 * 64 * 4 + 64 * 8
print(f"one batch of 64 examples: {batch_bytes / 1024:.1f} KiB (64 float32 features + an int64 label each)")

# %% [markdown]
# ## 6. Feeding the Trainer
#
# Module 07's `Trainer` takes any iterable of `(x, y)` batches, so a `DataLoader` plugs
# straight in. With a seed, two runs see the same batches in the same order and end with
# the same weights; `Trainer.save(path, loader=loader)` also stores the loader's epoch,
# so a resumed run continues with the very next permutation.

# %%
def two_moons_like(n=200, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    y = (x[:, 1] > 0.5 * np.sin(3 * x[:, 0])).astype(np.int64)
    return x, y


def seeded_run(seed):
    x, y = two_moons_like()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, seed=seed)
    model = Sequential(Linear(2, 32, seed=0), ReLU(), Linear(32, 2, seed=1))
    trainer = Trainer(model, Adam(model.parameters(), lr=0.02), CrossEntropyLoss(), metric=accuracy, verbose=False)
    trainer.fit(loader, epochs=15)
    return trainer, loader


def test_unit_dataloader_feeds_trainer():
    a, loader = seeded_run(seed=7)
    b, _ = seeded_run(seed=7)
    assert a.history["train_loss"] == b.history["train_loss"], "two runs with the same seed must give the same losses"
    assert loader.epoch == 15 and a.step == 15 * len(loader), \
        f"15 epochs: loader.epoch 15 and {15 * len(loader)} steps; got {loader.epoch} and {a.step}"
    acc = a.evaluate(DataLoader(TensorDataset(*two_moons_like()), batch_size=64))["accuracy"]
    assert acc > 0.9, f"after 15 epochs the training accuracy must exceed 0.9, got {acc:.3f}"
    print(f"✓ DataLoader → Trainer: seeded runs identical, training accuracy {acc:.3f}")


test_unit_dataloader_feeds_trainer()

# %% [markdown]
# ## Summary
#
# * A `Dataset` says how many examples there are and what example `i` is; a
#   `DataLoader` decides the order and the batching.
# * Every epoch visits every example exactly once; `drop_last` drops the short tail, and
#   `len(loader)` counts the batches accordingly.
# * Shuffling makes each batch a random sample; seeding the generator with `(seed, epoch)`
#   makes the sequence of orders reproducible, epoch after epoch, and `.epoch` in a
#   checkpoint resumes it.
# * Batches are stacked along a new first axis: labels stay integers, features keep
#   their float dtype.
# * Gather whole batches with one indexing operation when the data already sits in arrays;
#   the batch size trades time per epoch against steps per epoch.
#
# ## Exercises and questions
#
# Answer each by running your own code (a new cell below is the place).
#
# 1. **Counting batches.** For 1,797 examples (the digits milestone) and batch sizes 32,
#    64 and 100, predict `len(loader)` with and without `drop_last`, and how many
#    examples `drop_last=True` never shows in an epoch. Check with your loader.
# 2. **A seed collision.** Replace, in a copy of `order`, the pair `[seed, epoch]` by
#    `seed + epoch`. Find two loaders with different seeds that produce the same order in
#    some epoch. Why can the pair not collide that way?
# 3. **Unseeded shuffling.** Make two loaders with `shuffle=True` and no seed. Do their
#    first epochs agree? Save one's `state_dict()`, load it into the other: does that make
#    their next epochs agree? What does that mean for resuming an unseeded run?
# 4. **Learning rate and batch size.** In the batch-size measurement, raise the learning
#    rate for batch 256 until its one-epoch loss matches batch 16's. By what factor did
#    you raise it, against the factor 16 in batch size?
# 5. **A data set that computes.** Write a `Dataset` whose example `i` is
#    `(np.array([i, i ** 2], dtype=np.float32), i % 3)`, computed on demand in
#    `__getitem__`, and train on it through the DataLoader. Which path does the loader
#    take, and what does a batch look like (shapes, dtypes)?
# 6. **Sorted data, more epochs.** Run the sorted-blobs experiment of section 4 for 30
#    epochs. Does the unshuffled model ever catch up? Print its per-class accuracy.
#
# Questions to answer in a sentence, each checked with a few lines of code:
#
# * Why does `__iter__` advance `.epoch` when the epoch *starts* rather than when it
#   ends? Break out of an epoch after one batch and iterate again: which order comes?
# * `collate` turns Python ints into int64 but Python floats into float32. What would go
#   wrong with cross-entropy if labels were collated as floats?
# * Why is the permutation kept on the host even when the data sits on a GPU?
