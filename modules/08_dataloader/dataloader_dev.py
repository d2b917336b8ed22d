# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Module 08: DataLoader
#
# > Feeding a model: batches, shuffling, and an order you can reproduce.
#
# Module 07's `Trainer` loops over "any iterable of `(x, y)` batches". Where do those
# batches come from? For a real data set we want:
#
# * **batches**: a few dozen examples at a time, stacked into one tensor, so that one
#   matrix multiplication handles all of them (fast) while the batch still fits in memory;
# * **every example exactly once per epoch**, none forgotten, none repeated;
# * **shuffling**: a new random order every epoch, so consecutive batches are not
#   correlated (sorted data trains badly, as you will see);
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

from tinytorch.core.tensor import Tensor, array_module, to_array

# %% [markdown]
# ## 1. Datasets
#
# A **map-style** data set is anything with `len(ds)` and `ds[i]`. Examples are usually
# tuples, `(features, label)`. The base class only states that contract.
#
# `TensorDataset(x, y)` is the data set you need most: tensors whose first dimension is
# the example index. Example `i` is `(x[i], y[i])`. Because all of its data already sits in
# arrays, it can also hand out a whole batch at once: `get_batch(indices)` gathers
# `x[indices]` with one fancy-indexing operation, instead of `batch_size` calls to
# `__getitem__` and a stack. The DataLoader uses `get_batch` whenever a data set has one.

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
    """Example i is `(t[i] for t in tensors)`; the tensors share their first dimension.

    Accepts Tensors, NumPy/CuPy arrays or lists (converted with the usual rules:
    lists become float32, integer arrays stay integer).
    """

    def __init__(self, *tensors: Any):
        ### BEGIN SOLUTION
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor.")
        self.tensors = tuple(t if isinstance(t, Tensor) else Tensor(t) for t in tensors)
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
        ### BEGIN SOLUTION
        return self.tensors[0].shape[0]
        ### END SOLUTION

    def __getitem__(self, index: int) -> tuple:
        ### BEGIN SOLUTION
        n = len(self)
        if not isinstance(index, numbers.Integral):
            raise TypeError(f"TensorDataset index must be an integer, got {type(index).__name__}; use get_batch for many.")
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for a TensorDataset of {n} examples.")
        return tuple(Tensor(array_module(t.data).asarray(t.data[index])) for t in self.tensors)
        ### END SOLUTION

    def get_batch(self, indices: Any) -> tuple:
        """The examples at `indices` (an integer array), stacked: one gather per tensor."""
        ### BEGIN SOLUTION
        out = []
        for t in self.tensors:
            xp = array_module(t.data)
            out.append(Tensor(t.data[xp.asarray(indices, dtype=np.int64)]))
        return tuple(out)
        ### END SOLUTION


# %% [markdown]
# ### Test: TensorDataset

# %%
def test_unit_tensor_dataset():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.array([0, 1, 2, 0, 1, 2])
    ds = TensorDataset(x, y)
    assert len(ds) == 6
    xi, yi = ds[4]
    assert xi.numpy().tolist() == [8.0, 9.0] and yi.item() == 1 and yi.dtype == y.dtype
    bx, by = ds.get_batch(np.array([5, 0, 3]))
    assert bx.numpy().tolist() == [[10, 11], [0, 1], [6, 7]] and by.numpy().tolist() == [2, 0, 0]
    try:
        TensorDataset(x, y[:5])
    except ValueError as err:
        assert "tensor 0 has 6" in str(err) and "tensor 1 has 5" in str(err)
    else:
        raise AssertionError("different lengths must raise ValueError")
    print("✓ TensorDataset: items, vectorised batches, length check")


test_unit_tensor_dataset()

# %% [markdown]
# ## 2. Collating: a list of examples → one batch
#
# A data set without `get_batch` gives one example at a time. `collate` stacks a list of
# examples field by field: a list of `(x, y)` tuples becomes the tuple
# `(stack of x's, stack of y's)`. Tensors and arrays are stacked along a new first axis;
# Python ints become an **int64** tensor (class labels must stay integers: cross-entropy
# indexes with them) and Python floats become float32, the same rules as `Tensor(...)`.
# Dictionaries are collated key by key.

# %%
#| export
def collate(examples: Sequence[Any]) -> Any:
    """Stack a list of examples into a batch: tuples field by field, dicts key by key."""
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
        try:
            return Tensor(xp.stack([xp.asarray(a) for a in arrays]))
        except ValueError:
            shapes = sorted({tuple(np.shape(a)) for a in arrays})
            raise ValueError(f"collate: examples of different shapes cannot be stacked: {shapes}.") from None
    if isinstance(first, (bool, np.bool_)):
        return Tensor(np.array(examples, dtype=bool))
    if isinstance(first, numbers.Integral):
        return Tensor(np.array(examples, dtype=np.int64))
    if isinstance(first, numbers.Real):
        return Tensor(np.array(examples, dtype=np.float32))
    raise TypeError(f"collate: do not know how to batch a {type(first).__name__}.")
    ### END SOLUTION


# %%
def test_unit_collate():
    examples = [(np.array([1.0, 2.0]), 3), (np.array([4.0, 5.0]), 7)]
    x, y = collate(examples)
    assert x.numpy().tolist() == [[1, 2], [4, 5]] and x.dtype == np.float64
    assert y.numpy().tolist() == [3, 7] and y.dtype == np.int64
    floats = collate([0.5, 1.5])
    assert floats.dtype == np.float32 and floats.numpy().tolist() == [0.5, 1.5]
    d = collate([{"a": 1}, {"a": 2}])
    assert d["a"].numpy().tolist() == [1, 2]
    print("✓ collate: arrays stacked, ints stay int64, floats become float32")


test_unit_collate()

# %% [markdown]
# ## 3. The DataLoader
#
# Each time you iterate over a loader, one **epoch** starts:
#
# 1. the order: `0, 1, ..., n−1`, or with `shuffle=True` a random permutation of it;
# 2. cut the order into slices of `batch_size`; the last one may be short, and
#    `drop_last=True` drops it (useful when every batch must have the same size);
# 3. for each slice, fetch the examples (`get_batch` when available, else `ds[i]` each
#    and `collate`).
#
# **Seeds.** With `seed=s` the permutation of epoch `e` comes from a generator seeded with
# `(s, e)`: epoch 0, 1, 2... each get a different order, and a new loader with the same
# seed produces the very same sequence of orders. The loader counts its epochs in
# `.epoch`; `state_dict()` / `load_state_dict()` save and restore that counter, so a
# training run resumed from a checkpoint sees exactly the data it would have seen.
# Without a seed every epoch draws fresh randomness.
#
# The permutation is always a NumPy array of indices (cheap: 8 bytes per example); only
# the gathered batch goes to the data's device.

# %%
#| export
class DataLoader:
    """Iterate over a data set in batches, optionally shuffled with a reproducible seed.

    dataset    -- a Dataset (len and [i]; `get_batch(indices)` is used when present)
    batch_size -- examples per batch (>= 1); the last batch may be smaller
    shuffle    -- a new random order every epoch
    drop_last  -- drop the last, smaller batch
    seed       -- with shuffle: epoch e uses the permutation from seed (seed, e)
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int | None = None):
        ### BEGIN SOLUTION
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        if seed is not None and (not isinstance(seed, numbers.Integral) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}.")
        ### END SOLUTION
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        """Number of batches in one epoch."""
        ### BEGIN SOLUTION
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        ### END SOLUTION

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The example indices of `epoch` (default: the next one), in the order they come."""
        epoch = self.epoch if epoch is None else epoch
        ### BEGIN SOLUTION
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        rng = np.random.default_rng(None if self.seed is None else [self.seed, epoch])
        return rng.permutation(n)
        ### END SOLUTION

    def _fetch(self, indices: np.ndarray) -> Any:
        """One batch: the data set's own vectorised gather if it has one, else collate."""
        ### BEGIN SOLUTION
        if hasattr(self.dataset, "get_batch"):
            return self.dataset.get_batch(indices)
        return collate([self.dataset[int(i)] for i in indices])
        ### END SOLUTION

    def __iter__(self) -> Iterator[Any]:
        """Start the next epoch (the counter advances now) and yield its batches."""
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
        saved_seed = int(state.get("seed", -1))
        if saved_seed >= 0 and self.seed is not None and saved_seed != self.seed:
            raise ValueError(f"load_state_dict: the state was saved with seed {saved_seed}, this loader has seed {self.seed}.")
        self.epoch = int(state["epoch"])

    def __repr__(self) -> str:
        return (f"DataLoader({len(self.dataset)} examples, batch_size={self.batch_size}, shuffle={self.shuffle}, "
                f"drop_last={self.drop_last}, seed={self.seed}, epoch={self.epoch})")


# %% [markdown]
# ### Test: batches, exactly once, seeds, drop_last

# %%
def test_unit_dataloader():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10)
    loader = DataLoader(TensorDataset(x, y), batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and [len(b[1]) for b in batches] == [4, 4, 2]
    assert np.concatenate([b[1].numpy() for b in batches]).tolist() == list(range(10))
    assert len(DataLoader(TensorDataset(x, y), batch_size=4, drop_last=True)) == 2

    shuffled = DataLoader(TensorDataset(x, y), batch_size=3, shuffle=True, seed=42)
    epoch0 = np.concatenate([b[1].numpy() for b in shuffled])
    epoch1 = np.concatenate([b[1].numpy() for b in shuffled])
    assert sorted(epoch0.tolist()) == list(range(10)) and sorted(epoch1.tolist()) == list(range(10))
    assert epoch0.tolist() != epoch1.tolist() and epoch0.tolist() != list(range(10))
    again = DataLoader(TensorDataset(x, y), batch_size=3, shuffle=True, seed=42)
    assert np.concatenate([b[1].numpy() for b in again]).tolist() == epoch0.tolist()
    assert np.concatenate([b[0].numpy()[:, 0] for b in again]).tolist() == epoch1.tolist()  # x follows y
    try:
        DataLoader(TensorDataset(x, y), batch_size=0)
    except ValueError:
        pass
    else:
        raise AssertionError("batch_size=0 must raise ValueError")
    print("✓ DataLoader: batches, exactly once, seeded epochs, drop_last")


test_unit_dataloader()

# %% [markdown]
# ## 4. Why shuffle?
#
# Many data sets arrive sorted: all the 0s, then all the 1s... Without shuffling, every
# batch holds one or two classes, each gradient step pulls the model towards the classes
# in that batch, and the next batches pull it elsewhere: training oscillates instead of
# converging. A shuffled batch is a small random sample of the whole data set, so its
# gradient is an unbiased (if noisy) estimate of the full gradient.
#
# Here is a sorted, 10-class data set of 1,000 labels and the classes in the first batches:

# %%
labels = np.repeat(np.arange(10), 100)
features = np.zeros((1000, 1), dtype=np.float32)
for name, loader in [("in order", DataLoader(TensorDataset(features, labels), batch_size=32)),
                     ("shuffled", DataLoader(TensorDataset(features, labels), batch_size=32, shuffle=True, seed=0))]:
    per_batch = [np.unique(yb.numpy()).size for _, yb in loader]
    counts = np.bincount(next(iter(loader))[1].numpy(), minlength=10)
    print(f"{name:9s}: classes per batch (first 8 batches) {per_batch[:8]}; first batch's class counts {counts.tolist()}")

# %% [markdown]
# ## 5. Systems view: memory and speed of a batch
#
# A batch's memory is `batch_size × (bytes per example)`. For the 8×8 digits in float32
# that is `32 × 64 × 4` = 8 KiB, nothing. For 224×224 RGB images it is
# `256 × 3 × 224 × 224 × 4` bytes ≈ 154 MB per batch *of inputs*, before any activation:
# the batch size is often chosen by what fits on the GPU.
#
# Speed: gathering a batch with one fancy-indexing operation (`get_batch`) against one
# `__getitem__` per example followed by a stack. Same batches, very different cost:

# %%
import time


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
for name, ds in [("vectorised get_batch", big), ("per-item + collate", ItemOnly(big))]:
    loader = DataLoader(ds, batch_size=64, shuffle=True, seed=0)
    start = time.perf_counter()
    n = sum(xb.shape[0] for xb, _ in loader)
    elapsed = time.perf_counter() - start
    print(f"{name:22s}: one epoch of {n:,} examples in {elapsed * 1e3:7.1f} ms")
batch_bytes = 64 * 64 * 4 + 64 * 8
print(f"one batch of 64 digits-sized examples: {batch_bytes / 1024:.1f} KiB (float32 features + int64 labels)")

# %% [markdown]
# ## 6. Feeding the Trainer
#
# Module 07's `Trainer` takes any iterable of `(x, y)` batches, so a `DataLoader` plugs
# straight in. With a seed, two runs see the same batches in the same order and end with
# the same weights; `Trainer.save(path, loader=loader)` also stores the loader's epoch,
# so a resumed run continues with the very next permutation.

# %%
from tinytorch.core.activations import ReLU
from tinytorch.core.layers import Linear, Sequential
from tinytorch.core.losses import CrossEntropyLoss
from tinytorch.core.optimizers import Adam
from tinytorch.core.training import Trainer, accuracy


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
    assert a.history["train_loss"] == b.history["train_loss"]
    assert loader.epoch == 15 and a.step == 15 * len(loader)
    acc = a.evaluate(DataLoader(TensorDataset(*two_moons_like()), batch_size=64))["accuracy"]
    assert acc > 0.9
    print(f"✓ DataLoader → Trainer: seeded runs identical, training accuracy {acc:.3f}")


test_unit_dataloader_feeds_trainer()

# %% [markdown]
# ## Summary
#
# * A `Dataset` says how many examples there are and what example `i` is; a
#   `DataLoader` decides the order and the batching.
# * Every epoch visits every example exactly once; `drop_last` drops the short tail.
# * Shuffling makes each batch a random sample; a seed makes the sequence of orders
#   reproducible, epoch after epoch, and `.epoch` in a checkpoint resumes it.
# * Batches are stacked arrays: labels stay integers, features keep their float dtype.
# * Gather whole batches with one indexing operation when the data is already in arrays.
