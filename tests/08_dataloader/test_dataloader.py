"""Module 08: Dataset, TensorDataset, collate, DataLoader (exactly once, seeds, drop_last, dtypes)."""
import numpy as np
import pytest

from tinytorch.core.tensor import Tensor
from tinytorch.data.loader import DataLoader, Dataset, TensorDataset, collate


def make_ds(n=10):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n, dtype=np.int64)
    return TensorDataset(x, y)


def epoch_labels(loader):
    return np.concatenate([yb.numpy() for _, yb in loader]).tolist()


class Squares(Dataset):
    """A data set with only __getitem__ (no get_batch): the loader must collate."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return np.array([i, i * i], dtype=np.float64), i % 3


# ---- TensorDataset ---------------------------------------------------------------

def test_tensor_dataset_items_and_length():
    ds = make_ds(5)
    assert len(ds) == 5
    x, y = ds[3]
    assert isinstance(x, Tensor) and isinstance(y, Tensor)
    assert x.numpy().tolist() == [6.0, 7.0] and y.item() == 3 and y.dtype == np.int64
    assert ds[-1][1].item() == 4
    with pytest.raises(IndexError):
        ds[5]


def test_tensor_dataset_accepts_tensors_arrays_and_lists():
    ds = TensorDataset(Tensor(np.ones((3, 2))), [[1.0], [2.0], [3.0]], np.array([0, 1, 2], dtype=np.int32))
    x, f, y = ds.get_batch(np.array([2, 0]))
    assert x.dtype == np.float64 and f.dtype == np.float32 and y.dtype == np.int32
    assert f.numpy().tolist() == [[3.0], [1.0]] and y.numpy().tolist() == [2, 0]


def test_tensor_dataset_mismatched_lengths_names_them():
    with pytest.raises(ValueError) as err:
        TensorDataset(np.zeros((4, 3)), np.zeros(4), np.zeros(5))
    message = str(err.value)
    assert "tensor 0 has 4" in message and "tensor 2 has 5" in message and "(5,)" in message
    with pytest.raises(ValueError):
        TensorDataset()


def test_get_batch_gathers_in_the_given_order():
    ds = make_ds(6)
    x, y = ds.get_batch(np.array([5, 0, 5, 2]))
    assert y.numpy().tolist() == [5, 0, 5, 2]
    assert x.numpy().tolist() == [[10, 11], [0, 1], [10, 11], [4, 5]]


def test_base_dataset_is_abstract():
    with pytest.raises(NotImplementedError):
        len(Dataset())
    with pytest.raises(NotImplementedError):
        Dataset()[0]


# ---- collate ---------------------------------------------------------------------

def test_collate_dtypes():
    x, y, w = collate([(np.array([1.0, 2.0], dtype=np.float32), 3, 0.5),
                       (np.array([3.0, 4.0], dtype=np.float32), 4, 1.5)])
    assert x.dtype == np.float32 and x.numpy().tolist() == [[1, 2], [3, 4]]
    assert y.dtype == np.int64 and y.numpy().tolist() == [3, 4]
    assert w.dtype == np.float32 and w.numpy().tolist() == [0.5, 1.5]


def test_collate_tensors_keep_dtype_and_stack_on_a_new_axis():
    batch = collate([Tensor(np.full((2, 3), i, dtype=np.float64)) for i in range(4)])
    assert batch.shape == (4, 2, 3) and batch.dtype == np.float64
    assert batch.numpy()[:, 0, 0].tolist() == [0, 1, 2, 3]
    labels = collate([Tensor(np.array(i, dtype=np.int32)) for i in (7, 8)])
    assert labels.dtype == np.int32 and labels.numpy().tolist() == [7, 8]


def test_collate_dicts_and_errors():
    batch = collate([{"x": np.zeros(2), "label": 1}, {"x": np.ones(2), "label": 0}])
    assert batch["x"].numpy().tolist() == [[0, 0], [1, 1]] and batch["label"].dtype == np.int64
    with pytest.raises(ValueError, match="shape"):
        collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(ValueError):
        collate([])


# ---- DataLoader ------------------------------------------------------------------

@pytest.mark.parametrize("n,batch_size,drop_last,expected", [
    (10, 4, False, [4, 4, 2]), (10, 4, True, [4, 4]), (12, 4, True, [4, 4, 4]),
    (10, 1, False, [1] * 10), (3, 8, False, [3]), (3, 8, True, []), (10, 10, False, [10]),
])
def test_batch_sizes_and_len(n, batch_size, drop_last, expected):
    loader = DataLoader(make_ds(n), batch_size=batch_size, drop_last=drop_last)
    assert len(loader) == len(expected)
    assert [yb.shape[0] for _, yb in loader] == expected


def test_unshuffled_order_is_the_data_set_order():
    loader = DataLoader(make_ds(7), batch_size=3)
    assert epoch_labels(loader) == list(range(7))
    assert epoch_labels(loader) == list(range(7))


@pytest.mark.parametrize("seed", [0, 1, 1234])
def test_every_item_exactly_once_per_epoch(seed):
    loader = DataLoader(make_ds(53), batch_size=8, shuffle=True, seed=seed)
    for _ in range(4):
        labels = epoch_labels(loader)
        assert len(labels) == 53 and sorted(labels) == list(range(53))


def test_features_and_labels_stay_paired_when_shuffled():
    loader = DataLoader(make_ds(30), batch_size=7, shuffle=True, seed=3)
    for xb, yb in loader:
        np.testing.assert_array_equal(xb.numpy()[:, 0], 2 * yb.numpy())


def test_seed_reproduces_the_orders_and_epochs_differ():
    a = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=11)
    b = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=11)
    epochs_a = [epoch_labels(a) for _ in range(3)]
    epochs_b = [epoch_labels(b) for _ in range(3)]
    assert epochs_a == epochs_b
    assert epochs_a[0] != epochs_a[1] != epochs_a[2] and epochs_a[0] != list(range(40))
    other = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=12)
    assert epoch_labels(other) != epochs_a[0]
    assert a.epoch == 3


def test_epoch_state_resumes_the_order():
    a = DataLoader(make_ds(20), batch_size=4, shuffle=True, seed=5)
    orders = [epoch_labels(a) for _ in range(3)]
    b = DataLoader(make_ds(20), batch_size=4, shuffle=True, seed=5)
    b.load_state_dict(DataLoader(make_ds(20), batch_size=4, shuffle=True, seed=5).state_dict() | {"epoch": 2})
    assert epoch_labels(b) == orders[2]
    c = DataLoader(make_ds(20), batch_size=4, shuffle=True, seed=5)
    c.set_epoch(1)
    assert c.order().tolist() == orders[1] and epoch_labels(c) == orders[1]
    assert a.state_dict()["epoch"] == 3
    with pytest.raises(ValueError, match="seed"):
        DataLoader(make_ds(20), shuffle=True, seed=6).load_state_dict(a.state_dict())


def test_unseeded_shuffle_still_visits_everything_once():
    loader = DataLoader(make_ds(25), batch_size=4, shuffle=True)
    assert sorted(epoch_labels(loader)) == list(range(25))


def test_dataset_without_get_batch_is_collated():
    loader = DataLoader(Squares(7), batch_size=3, shuffle=True, seed=0)
    seen = []
    for xb, yb in loader:
        assert xb.dtype == np.float64 and yb.dtype == np.int64
        np.testing.assert_array_equal(xb.numpy()[:, 1], xb.numpy()[:, 0] ** 2)
        np.testing.assert_array_equal(yb.numpy(), xb.numpy()[:, 0].astype(int) % 3)
        seen.extend(xb.numpy()[:, 0].astype(int).tolist())
    assert sorted(seen) == list(range(7))


def test_vectorised_path_is_used_when_available():
    class Counting(TensorDataset):
        item_calls = 0

        def __getitem__(self, index):
            Counting.item_calls += 1
            return super().__getitem__(index)

    ds = Counting(np.zeros((16, 2)), np.arange(16))
    batches = list(DataLoader(ds, batch_size=4, shuffle=True, seed=0))
    assert Counting.item_calls == 0 and len(batches) == 4


def test_batch_dtypes_are_kept():
    ds = TensorDataset(np.zeros((6, 2), dtype=np.float64), np.arange(6, dtype=np.int32))
    xb, yb = next(iter(DataLoader(ds, batch_size=4)))
    assert xb.dtype == np.float64 and yb.dtype == np.int32 and xb.shape == (4, 2)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_bad_batch_size_raises(bad):
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(make_ds(4), batch_size=bad)


def test_bad_seed_raises():
    with pytest.raises(ValueError, match="seed"):
        DataLoader(make_ds(4), shuffle=True, seed=-3)
