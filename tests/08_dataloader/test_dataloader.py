"""Module 08: Dataset, TensorDataset, collate, DataLoader (exactly once, seeds, drop_last, dtypes).

Ordered like the lesson, one property per test, so that the first failure names its cause.
"""
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

def test_tensor_dataset_length_is_the_number_of_examples():
    ds = TensorDataset(np.zeros((5, 3)), np.arange(5))
    assert len(ds) == 5, (f"len() of a TensorDataset of 5 examples (two tensors) is {len(ds)}: len() is the number "
                          "of examples, the tensors' first dimension, not the number of tensors")
    assert len(TensorDataset(np.zeros((7, 2)))) == 7


def test_tensor_dataset_items():
    ds = make_ds(5)
    x, y = ds[3]
    assert isinstance(x, Tensor) and isinstance(y, Tensor), "ds[i] is a tuple of Tensors"
    assert x.numpy().tolist() == [6.0, 7.0] and y.item() == 3 and y.dtype == np.int64
    assert ds[-1][1].item() == 4, "a negative index counts from the end"
    with pytest.raises(IndexError):
        ds[5]


def test_tensor_dataset_accepts_tensors_arrays_and_lists():
    ds = TensorDataset(Tensor(np.ones((3, 2))), [[1.0], [2.0], [3.0]], np.array([0, 1, 2], dtype=np.int32))
    assert all(isinstance(t, Tensor) for t in ds.tensors), "self.tensors holds Tensors (as_tensor)"
    x, f, y = ds.get_batch(np.array([2, 0]))
    assert x.dtype == np.float64 and f.dtype == np.float32 and y.dtype == np.int32
    assert f.numpy().tolist() == [[3.0], [1.0]] and y.numpy().tolist() == [2, 0]


def test_tensor_dataset_checks_that_the_lengths_agree():
    try:
        TensorDataset(np.zeros((4, 3)), np.zeros(4), np.zeros(5))
    except ValueError as err:
        message = str(err)
    else:
        raise AssertionError("TensorDataset accepted 4 features with 5 labels: TensorDataset must check that every "
                             "tensor has the same number of examples (first dimension) and raise ValueError")
    assert "4" in message and "5" in message, f"the error must name the tensors' first dimensions: {message!r}"


def test_tensor_dataset_rejects_nothing_and_scalars():
    with pytest.raises(ValueError):
        TensorDataset()
    with pytest.raises(ValueError):
        TensorDataset(np.zeros((3, 1)), np.float32(1.0))


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

def test_collate_stacks_along_a_new_first_axis():
    batch = collate([Tensor(np.full((2, 3), i, dtype=np.float64)) for i in range(4)])
    assert batch.shape == (4, 2, 3), (f"four (2, 3) examples collated to {batch.shape}: examples are stacked along a "
                                      "new first axis, batch shape (B, 2, 3) (not concatenated, not the last axis)")
    assert batch.dtype == np.float64 and batch.numpy()[:, 0, 0].tolist() == [0, 1, 2, 3]
    vectors = collate([np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])])
    assert vectors.numpy().tolist() == [[1, 2], [3, 4], [5, 6]], "examples are stacked along a new first axis"


def test_collate_keeps_integer_labels_integer():
    x, y, w = collate([(np.array([1.0, 2.0], dtype=np.float32), 3, 0.5),
                       (np.array([3.0, 4.0], dtype=np.float32), 4, 1.5)])
    assert isinstance((x, y, w), tuple)
    assert y.dtype == np.int64, (f"Python int labels collated to {y.dtype}: labels stay int64 (cross-entropy "
                                 "indexes with them)")
    assert x.dtype == np.float32 and x.numpy().tolist() == [[1, 2], [3, 4]]
    assert y.numpy().tolist() == [3, 4]
    assert w.dtype == np.float32 and w.numpy().tolist() == [0.5, 1.5], "Python floats become float32"
    flags = collate([True, False])
    assert flags.dtype == np.bool_, f"Python bools collated to {flags.dtype}: check bool before int"
    labels = collate([Tensor(np.array(i, dtype=np.int32)) for i in (7, 8)])
    assert labels.dtype == np.int32 and labels.numpy().tolist() == [7, 8], "a Tensor keeps its dtype"


def test_collate_dicts_and_errors():
    batch = collate([{"x": np.zeros(2), "label": 1}, {"x": np.ones(2), "label": 0}])
    assert batch["x"].numpy().tolist() == [[0, 0], [1, 1]] and batch["label"].dtype == np.int64
    with pytest.raises(ValueError) as err:
        collate([np.zeros(2), np.zeros(3)])
    assert "2" in str(err.value) and "3" in str(err.value), f"name the shapes: {err.value}"
    with pytest.raises(ValueError):
        collate([])
    with pytest.raises(ValueError):
        collate([(1, 2), (3,)])
    with pytest.raises(TypeError):
        collate([object(), object()])


# ---- DataLoader: how many batches --------------------------------------------------

def case(n, batch_size, drop_last, expected):
    """A readable id: '10/4' is 10 examples in batches of 4."""
    return pytest.param(n, batch_size, drop_last, expected,
                        id=f"{n}/{batch_size}" + ("-drop_last" if drop_last else ""))


@pytest.mark.parametrize("n,batch_size,drop_last,expected", [
    case(10, 4, False, 3), case(10, 4, True, 2), case(12, 4, True, 3), case(12, 4, False, 3),
    case(10, 1, False, 10), case(3, 8, False, 1), case(3, 8, True, 0),
])
def test_len_counts_batches(n, batch_size, drop_last, expected):
    got = len(DataLoader(make_ds(n), batch_size=batch_size, drop_last=drop_last))
    assert got == expected, (
        f"len() for {n} examples in batches of {batch_size} with drop_last={drop_last} is {got}, expected "
        f"{expected}: len() with drop_last=False counts the short last batch (ceil(n / batch_size)), "
        "len() with drop_last=True does not (n // batch_size)")


@pytest.mark.parametrize("n,batch_size,drop_last,expected", [
    case(10, 4, False, [4, 4, 2]), case(10, 4, True, [4, 4]), case(12, 4, True, [4, 4, 4]),
    case(10, 1, False, [1] * 10), case(3, 8, False, [3]), case(3, 8, True, []), case(10, 10, False, [10]),
])
def test_batch_sizes(n, batch_size, drop_last, expected):
    loader = DataLoader(make_ds(n), batch_size=batch_size, drop_last=drop_last)
    sizes = [yb.shape[0] for _, yb in loader]
    if drop_last:
        assert sizes == expected, (f"{n} examples in batches of {batch_size} gave batches of {sizes}: "
                                   "drop_last=True drops the short last batch")
    else:
        assert sizes == expected, (f"{n} examples in batches of {batch_size} gave batches of {sizes}: the last, "
                                   "shorter batch is kept when drop_last=False (every example is seen)")


def test_unshuffled_order_is_the_data_set_order():
    loader = DataLoader(make_ds(7), batch_size=3)
    assert epoch_labels(loader) == list(range(7))
    assert epoch_labels(loader) == list(range(7))
    assert loader.order().tolist() == list(range(7))


# ---- DataLoader: shuffling and seeds -------------------------------------------------

def test_shuffle_permutes():
    loader = DataLoader(make_ds(40), batch_size=8, shuffle=True, seed=0)
    labels = epoch_labels(loader)
    assert labels != list(range(40)), "shuffle=True must permute the examples (the order came out sorted)"
    assert sorted(labels) == list(range(40))


@pytest.mark.parametrize("seed", [0, 1, 1234])
def test_every_item_exactly_once_per_epoch(seed):
    loader = DataLoader(make_ds(53), batch_size=8, shuffle=True, seed=seed)
    for epoch in range(4):
        labels = epoch_labels(loader)
        assert len(labels) == 53 and sorted(labels) == list(range(53)), (
            f"epoch {epoch} visited {len(labels)} examples ({len(set(labels))} distinct): every example exactly "
            "once per epoch")


def test_iterating_advances_the_epoch_counter():
    loader = DataLoader(make_ds(12), batch_size=5, shuffle=True, seed=3)
    assert loader.epoch == 0
    iterator = iter(loader)
    assert loader.epoch == 1, (f"after iter(loader) .epoch is {loader.epoch}: each iteration starts the next epoch "
                               "(self.epoch += 1 at once, when the epoch starts)")
    list(iterator)
    list(loader)
    assert loader.epoch == 2, "each iteration starts the next epoch"


def test_each_epoch_gets_a_new_order():
    loader = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=11)
    epochs = [epoch_labels(loader) for _ in range(3)]
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and epochs[0] != epochs[2], (
        "two epochs of a shuffling loader gave the same order: a new order every epoch (seed the generator "
        "with the pair (seed, epoch), not with the seed alone)")


def test_the_same_seed_gives_the_same_orders():
    a = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=11)
    b = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=11)
    epochs_a = [epoch_labels(a) for _ in range(3)]
    epochs_b = [epoch_labels(b) for _ in range(3)]
    assert epochs_a == epochs_b, ("two loaders with seed 11 gave different orders: the same seed must give the same "
                                  "orders (np.random.default_rng([seed, epoch]))")
    assert a.order(1).tolist() == epochs_a[1], "order(e) is the order of epoch e"


def test_different_seeds_give_different_orders_in_every_epoch():
    a = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=11)
    b = DataLoader(make_ds(40), batch_size=5, shuffle=True, seed=12)
    assert a.order(0).tolist() != b.order(0).tolist()
    assert a.order(1).tolist() != b.order(0).tolist(), (
        "seed 11's epoch 1 has the same order as seed 12's epoch 0: seed the generator with the pair "
        "(seed, epoch), not seed + epoch")


def test_features_and_labels_stay_paired_when_shuffled():
    loader = DataLoader(make_ds(30), batch_size=7, shuffle=True, seed=3)
    for xb, yb in loader:
        np.testing.assert_array_equal(xb.numpy()[:, 0], 2 * yb.numpy(),
                                      err_msg="each example's features and label must stay together")


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
    other = DataLoader(make_ds(20), shuffle=True, seed=6)
    with pytest.raises(ValueError, match="seed"):
        other.load_state_dict(a.state_dict())
    assert other.epoch == 0, "a refused state changes nothing"


def test_unseeded_shuffle_still_visits_everything_once():
    loader = DataLoader(make_ds(25), batch_size=4, shuffle=True)
    assert sorted(epoch_labels(loader)) == list(range(25))


# ---- DataLoader: fetching --------------------------------------------------------------

def test_vectorised_path_is_used_when_available():
    class Counting(TensorDataset):
        item_calls = 0

        def __getitem__(self, index):
            Counting.item_calls += 1
            return super().__getitem__(index)

    ds = Counting(np.zeros((16, 2)), np.arange(16))
    batches = list(DataLoader(ds, batch_size=4, shuffle=True, seed=0))
    assert Counting.item_calls == 0, (
        f"the loader called __getitem__ {Counting.item_calls} times: use the data set's get_batch when it has one "
        "(one gather per batch)")
    assert len(batches) == 4


def test_dataset_without_get_batch_is_collated():
    loader = DataLoader(Squares(7), batch_size=3, shuffle=True, seed=0)
    seen = []
    for xb, yb in loader:
        assert xb.dtype == np.float64 and yb.dtype == np.int64
        np.testing.assert_array_equal(xb.numpy()[:, 1], xb.numpy()[:, 0] ** 2)
        np.testing.assert_array_equal(yb.numpy(), xb.numpy()[:, 0].astype(int) % 3)
        seen.extend(xb.numpy()[:, 0].astype(int).tolist())
    assert sorted(seen) == list(range(7))


def test_batch_dtypes_are_kept():
    ds = TensorDataset(np.zeros((6, 2), dtype=np.float64), np.arange(6, dtype=np.int32))
    xb, yb = next(iter(DataLoader(ds, batch_size=4)))
    assert xb.dtype == np.float64 and yb.dtype == np.int32 and xb.shape == (4, 2)


# ---- DataLoader: arguments (the checks are given) ----------------------------------------

@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None], ids=repr)
def test_bad_batch_size_raises(bad):
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(make_ds(4), batch_size=bad)


@pytest.mark.parametrize("bad", [-3, 1.5, True], ids=repr)
def test_bad_seed_raises(bad):
    with pytest.raises(ValueError, match="seed"):
        DataLoader(make_ds(4), shuffle=True, seed=bad)
