"""Module 08, graded cases: TensorDataset, collate, DataLoader lengths, batches and seeded orders.

A shuffled order is np.random.default_rng([seed, epoch]).permutation(n) by contract, so
the orders of seeded loaders are exact values. Format: grading/reference_values.py.
"""
import numpy as np
from reference_values import raised

from tinytorch.core.tensor import Tensor
from tinytorch.data.loader import DataLoader, Dataset, TensorDataset, collate


def numbered(n, rng):
    """A data set whose x row i holds i (so a batch shows which examples it holds) and seeded labels."""
    x = np.repeat(np.arange(n, dtype=np.float64)[:, None], 2, axis=1) + rng.random((n, 2)) * 0.1
    return TensorDataset(x, rng.integers(0, 5, n))


def first_column(batches):
    """The example numbers each batch holds, concatenated (its x rows, rounded down)."""
    return np.concatenate([np.floor(x.numpy()[:, 0]) for x, _ in batches]).astype(np.int64)


def _tensor_dataset(rng):
    x, y = rng.standard_normal((6, 3)), rng.integers(0, 4, 6)
    data = TensorDataset(x, y)
    item = data[4]
    batch = data.get_batch(np.array([5, 0, 2]))
    return {"len": len(data), "item_x": item[0], "item_y": item[1], "batch_x": batch[0], "batch_y": batch[1],
            "mismatch": raised(TensorDataset, x, y[:5]), "scalar": raised(TensorDataset, Tensor(1.0)),
            "none": raised(TensorDataset)}


def _collate(rng):
    examples = [(rng.standard_normal((2, 3)).astype(np.float32), int(rng.integers(10)), float(rng.random()), bool(i % 2))
                for i in range(4)]
    x, label, weight, flag = collate(examples)
    as_dict = collate([{"a": Tensor(rng.standard_normal(3)), "b": 7} for _ in range(2)])
    return {"x": x, "label": label, "label_dtype": str(label.dtype), "weight": weight,
            "weight_dtype": str(weight.dtype), "flag": flag, "dict_a": as_dict["a"], "dict_b": as_dict["b"],
            "shapes": raised(collate, [np.zeros(2), np.zeros(3)]), "empty": raised(collate, []),
            "fields": raised(collate, [(1, 2), (1,)]), "unknown": raised(collate, ["text"])}


def _lengths(rng):
    data = numbered(11, rng)
    keep, drop = DataLoader(data, batch_size=4), DataLoader(data, batch_size=4, drop_last=True)
    kept, dropped = list(keep), list(drop)
    return {"len_keep": len(keep), "len_drop": len(drop), "len_exact": len(DataLoader(numbered(8, rng), 4, drop_last=True)),
            "sizes_keep": [len(y.numpy()) for _, y in kept], "sizes_drop": [len(y.numpy()) for _, y in dropped],
            "examples_keep": first_column(kept), "labels_drop": np.concatenate([y.numpy() for _, y in dropped]),
            "bad_size": raised(DataLoader, data, batch_size=0)}


def _seeded_orders(rng):
    data = numbered(9, rng)
    loader = DataLoader(data, batch_size=3, shuffle=True, seed=12)
    epochs = [first_column(list(loader)) for _ in range(3)]
    neighbour = DataLoader(data, batch_size=3, shuffle=True, seed=13)
    twin = DataLoader(data, batch_size=3, shuffle=True, seed=12)
    return {"epochs": np.stack(epochs), "order_epoch_5": loader.order(5), "epoch": loader.epoch,
            "neighbour_epoch_0": neighbour.order(0), "twin_repeats": bool(np.array_equal(twin.order(1), loader.order(1))),
            "unshuffled": DataLoader(data, 4, seed=12).order(3)}


def _resume(rng):
    data = numbered(7, rng)
    loader = DataLoader(data, batch_size=2, shuffle=True, seed=4)
    list(loader)
    list(loader)
    state = loader.state_dict()
    resumed = DataLoader(data, batch_size=2, shuffle=True, seed=4)
    resumed.load_state_dict(state)
    other = DataLoader(data, batch_size=2, shuffle=True, seed=5)
    return {"state_epoch": state["epoch"], "next": first_column(list(resumed)),
            "expected_next": first_column(list(loader)), "other_seed": raised(other.load_state_dict, state)}


class Counted(Dataset):
    """A data set with a vectorised get_batch that counts its calls (and marks its batches)."""

    def __init__(self, values):
        self.values = values
        self.calls = 0

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        return Tensor(self.values[index])

    def get_batch(self, indices):
        self.calls += 1
        return Tensor(self.values[np.asarray(indices)] + 1000.0)


def _get_batch(rng):
    data = Counted(rng.standard_normal((10, 2)))
    batches = list(DataLoader(data, batch_size=4, shuffle=True, seed=3))
    return {"calls": data.calls, "batches": np.concatenate([b.numpy() for b in batches])}


CASES = {
    "tensor-dataset": (_tensor_dataset, "TensorDataset length, items, get_batch, and its input checks"),
    "collate": (_collate, "collate: tuples, dicts, int → int64, float → float32, bool; bad examples raise"),
    "lengths": (_lengths, "11 examples in batches of 4, with and without drop_last: lengths and contents"),
    "seeded-orders": (_seeded_orders, "seeded shuffle: epochs differ, follow default_rng([seed, epoch]), reproduce"),
    "resume": (_resume, "state_dict / load_state_dict continue with the next epoch's order; another seed is refused"),
    "get-batch": (_get_batch, "the loader uses a data set's get_batch, one call per batch"),
}
