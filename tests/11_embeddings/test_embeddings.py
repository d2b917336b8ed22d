"""Module 11 (embeddings): lookups, the scatter-add backward, padding, positions, sinusoids.

Everything is built inside the tests (never at import time), so that with module 11's
solutions replaced by stubs every test *fails* instead of erroring at collection.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinytorch.core.autograd import gradcheck
from tinytorch.core.layers import Module
from tinytorch.core.tensor import Tensor
from tinytorch.testing import numeric_vjp
from tinytorch.text.embeddings import (Embedding, PositionalEmbedding, SinusoidalPositionalEncoding, embedding,
                                       position_shift_matrix, scatter_add_rows, sinusoidal_table, token_ids)


def table(rows=5, dim=3, dtype=np.float64):
    """Row v holds v, v + 0.1, v + 0.2, ...: every looked-up value says which row it came from."""
    return (np.arange(rows)[:, None] + 0.1 * np.arange(dim)[None, :]).astype(dtype)


def weight_grad(ids, cotangent, rows=5, dim=3, padding_idx=None):
    w = Tensor(table(rows, dim), requires_grad=True)
    embedding(w, ids, padding_idx=padding_idx).backward(cotangent)
    return w.grad.numpy()


def brute_force_grad(ids, cotangent, rows):
    """one_hotᵀ @ dY: the gradient of a lookup written as a matrix product."""
    ids = np.asarray(ids).reshape(-1)
    one_hot = np.eye(rows)[ids]
    return one_hot.T @ np.asarray(cotangent).reshape(ids.size, -1)


# ---- scatter_add_rows ----------------------------------------------------------------------
def test_scatter_add_rows_adds_repeated_ids():
    target = np.zeros((4, 2))
    out = scatter_add_rows(target, np.array([3, 1, 3, 3]), np.array([[1.0, 2], [10, 20], [100, 200], [1000, 2000]]))
    expected = [[0, 0], [10, 20], [0, 0], [1101, 2202]]
    assert out is target, "scatter_add_rows works in place and returns the table"
    assert np.array_equal(target, expected), (
        f"scatter_add_rows gave {target.tolist()}, expected {expected}: repeated ids must add up "
        "(table[ids] += rows writes a repeated row once; use np.add.at or sort and np.add.reduceat)")


def test_scatter_add_rows_keeps_what_was_there_and_handles_empty_ids():
    target = np.ones((3, 2))
    scatter_add_rows(target, np.array([2]), np.array([[5.0, 6.0]]))
    assert np.array_equal(target, [[1, 1], [1, 1], [6, 7]]), "scatter_add_rows must add into the table, not overwrite it"
    scatter_add_rows(target, np.zeros(0, dtype=np.int64), np.zeros((0, 2)))
    assert np.array_equal(target, [[1, 1], [1, 1], [6, 7]])


@given(st.lists(st.integers(0, 6), min_size=1, max_size=40))
def test_scatter_add_rows_equals_np_add_at(id_list):
    ids = np.array(id_list)
    rows = np.random.default_rng(len(id_list)).standard_normal((len(id_list), 3))
    expected = np.zeros((7, 3))
    np.add.at(expected, ids, rows)
    assert np.allclose(scatter_add_rows(np.zeros((7, 3)), ids, rows), expected)


# ---- the lookup ------------------------------------------------------------------------------
@pytest.mark.parametrize("ids", [[3], [[1, 4], [0, 0]], [[[2], [3]], [[1], [1]]], 2],
                         ids=["(1,)", "(2,2)", "(2,2,1)", "scalar"])
def test_lookup_returns_the_rows_for_ids_of_any_shape(ids):
    w = table()
    out = embedding(Tensor(w), ids)
    assert out.shape == np.shape(ids) + (3,), f"ids of shape {np.shape(ids)} must give {np.shape(ids) + (3,)}"
    assert np.array_equal(out.numpy(), w[np.asarray(ids)]), "embedding must return weight[ids]"


def test_lookup_keeps_the_table_dtype_and_records_one_op():
    for dtype in (np.float16, np.float32, np.float64):
        assert embedding(Tensor(table(dtype=dtype)), [1, 2]).dtype == dtype
    w = Tensor(table(), requires_grad=True)
    out = embedding(w, [[1, 2]])
    assert out._node.op == "embedding", f"the lookup must be recorded as op 'embedding', got {out._node.op!r}"
    assert out._node.inputs == (w,), "the op's only input is the weight (ids take no gradient)"
    assert np.array_equal(out._node.saved["ids"], [[1, 2]]) and out._node.saved["padding_idx"] is None


@pytest.mark.parametrize("ids", [[1, 2], np.array([1, 2]), np.array([1, 2], dtype=np.int32), Tensor([1, 2]),
                                 np.array([1.0, 2.0])],
                         ids=["list", "int64-array", "int32-array", "float32-Tensor", "whole-floats"])
def test_ids_may_be_lists_arrays_or_tensors(ids):
    assert np.array_equal(embedding(Tensor(table()), ids).numpy(), table()[[1, 2]])
    assert token_ids(ids, 5).dtype == np.int64


@pytest.mark.parametrize("bad_id", [5, 17, -1], ids=["id=size", "id=17", "id=-1"])
def test_out_of_range_ids_raise_index_error_naming_the_id_and_the_size(bad_id):
    with pytest.raises(IndexError) as info:
        embedding(Tensor(table()), [[0, 1], [bad_id, 2]])
    assert str(bad_id) in str(info.value) and "5" in str(info.value)
    with pytest.raises(IndexError):
        Embedding(5, 3, seed=0)([bad_id])


def test_wrong_kinds_of_ids_raise():
    with pytest.raises(ValueError):
        embedding(Tensor(table()), [0.5, 1.0])
    with pytest.raises(TypeError):
        embedding(Tensor(table()), np.array([True, False]))
    with pytest.raises(ValueError):
        embedding(Tensor(np.zeros(5)), [1])


# ---- the backward rule -------------------------------------------------------------------------
def test_gradient_scatter_adds_into_repeated_ids_by_hand():
    dy = np.array([[1.0, 0, 0], [0, 1, 0], [0, 0, 5]])
    grad = weight_grad([3, 0, 3], dy)
    expected = [[0, 1, 0], [0, 0, 0], [0, 0, 0], [1, 0, 5], [0, 0, 0]]
    assert np.array_equal(grad, expected), (
        f"weight.grad is {grad.tolist()}, expected {expected}: the gradient of a repeated id must be "
        "scatter-added (every occurrence adds its row), not assigned")


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 2)], ids=["(7,)", "(3,4)", "(2,3,2)"])
def test_gradient_equals_one_hot_transpose_times_upstream(shape):
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 6, shape)
    dy = rng.standard_normal(shape + (4,))
    grad = weight_grad(ids, dy, rows=6, dim=4)
    assert np.allclose(grad, brute_force_grad(ids, dy, 6)), "dW must equal one_hot(ids)ᵀ @ dY"


def test_gradcheck_embedding():
    rng = np.random.default_rng(2)
    w = Tensor(rng.standard_normal((6, 3)), requires_grad=True)
    assert gradcheck(lambda w: embedding(w, [[1, 5, 1, 1], [0, 2, 2, 5]]), [w])
    assert gradcheck(lambda w: embedding(w, [[4]]) * embedding(w, [[4]]), [w])


def test_gradient_accumulates_over_two_uses_of_the_table():
    w = Tensor(table(), requires_grad=True)
    (embedding(w, [1]).sum() + embedding(w, [1, 2]).sum()).backward()
    assert np.array_equal(w.grad.numpy()[:, 0], [0, 2, 1, 0, 0])


def test_padding_row_gets_no_gradient():
    rng = np.random.default_rng(3)
    ids = [[1, 2, 1], [0, 1, 4]]
    dy = rng.standard_normal((2, 3, 3))
    plain = weight_grad(ids, dy)
    padded = weight_grad(ids, dy, padding_idx=1)
    assert np.all(padded[1] == 0), f"padding row 1 got gradient {padded[1]}: the padding row must not learn"
    keep = [0, 2, 3, 4]
    assert np.allclose(padded[keep], plain[keep]), "padding_idx must only zero the padding row's gradient"
    numeric = numeric_vjp(lambda w: embedding(w, ids, padding_idx=1), [table()], dy)[0]
    numeric[1] = 0  # the rule defines the padding row's gradient as 0, as PyTorch does
    assert np.allclose(padded, numeric, atol=1e-6)


def test_padding_row_of_the_layer_starts_at_zero_and_stays_there():
    from tinytorch.core.optimizers import SGD

    emb = Embedding(6, 4, padding_idx=0, dtype=np.float64, seed=0)
    assert np.all(emb.weight.numpy()[0] == 0), "Embedding must start its padding row at zero"
    assert not np.all(emb.weight.numpy()[1:] == 0)
    opt = SGD(emb.parameters(), lr=0.5)
    for _ in range(3):
        emb.zero_grad()
        (emb([[0, 1, 0], [2, 0, 5]]) ** 2).sum().backward()
        opt.step()
    assert np.all(emb.weight.numpy()[0] == 0), "the padding row must not change in training"
    negative = Embedding(6, 4, padding_idx=-1, seed=0)
    assert negative.padding_idx == 5 and np.all(negative.weight.numpy()[5] == 0)
    with pytest.raises(ValueError):
        Embedding(6, 4, padding_idx=6)


# ---- the layer ---------------------------------------------------------------------------------
def test_embedding_layer_parameters_and_initialisation():
    emb = Embedding(2000, 32, seed=0)
    assert isinstance(emb, Module) and [n for n, _ in emb.named_parameters()] == ["weight"]
    w = emb.weight.numpy()
    assert emb.weight.shape == (2000, 32) and emb.weight.dtype == np.float32 and emb.weight.requires_grad
    assert abs(w.mean()) < 0.01 and abs(w.std() - 1.0) < 0.01, f"weights should be N(0, 1), got mean {w.mean():.3f} std {w.std():.3f}"
    assert np.array_equal(Embedding(4, 3, seed=1).weight.numpy(), Embedding(4, 3, seed=1).weight.numpy())
    assert Embedding(4, 3, dtype=np.float64).weight.dtype == np.float64
    for bad in ((0, 3), (3, 0), (2.5, 3)):
        with pytest.raises(ValueError):
            Embedding(*bad)


def test_embedding_layer_forward_and_backward():
    emb = Embedding(5, 3, dtype=np.float64, seed=0)
    out = emb(np.array([[4, 4, 1]]))
    assert out.shape == (1, 3, 3) and np.array_equal(out.numpy()[0, 0], emb.weight.numpy()[4])
    out.sum().backward()
    assert np.array_equal(emb.weight.grad.numpy()[:, 0], [0, 1, 0, 0, 2])


# ---- positions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", ["learned", "sinusoidal"])
def test_max_len_is_checked_exactly(layer):
    make = (lambda: PositionalEmbedding(8, 4, seed=0)) if layer == "learned" else (lambda: SinusoidalPositionalEncoding(4, 8))
    module = make()
    for shape, start in (((1, 8, 4), 0), ((1, 1, 4), 7), ((1, 3, 4), 5)):  # B = 1: this test is about T only
        try:
            assert module(Tensor(np.zeros(shape)), start=start).shape == shape
        except ValueError as err:
            raise AssertionError(
                f"{shape[1]} tokens from position {start} fit max_len=8 (positions 0 to 7) but raised: {err} "
                "(max_len check off by one: the last position is max_len - 1)") from err
    for shape, start in (((1, 9, 4), 0), ((1, 1, 4), 8), ((1, 3, 4), 6), ((1, 1, 4), -1)):
        try:
            module(Tensor(np.zeros(shape)), start=start)
        except ValueError as err:
            assert "8" in str(err), f"the ValueError should name max_len (8): {err}"
        except IndexError as err:
            raise AssertionError(
                f"{shape[1]} tokens from position {start} went past the check and failed in the lookup ({err}): "
                "max_len check off by one (the last position is max_len - 1)") from err
        else:
            raise AssertionError(
                f"{shape[1]} tokens from position {start} do not fit max_len=8 (positions 0 to 7) and must raise "
                "ValueError (max_len check off by one, or a negative start let through)")
    with pytest.raises(ValueError):
        module(Tensor(np.zeros((2, 3, 5))))


ALONG_T = "positions run along axis -2 (the T of (B, T, D)), not along the batch"


def test_positional_embedding_adds_the_same_rows_to_every_sequence():
    pos = PositionalEmbedding(7, 3, dtype=np.float64, seed=0)
    x = np.random.default_rng(4).standard_normal((4, 5, 3))  # B=4 != T=5: the batch axis is not the position axis
    try:
        out = pos(Tensor(x))
    except ValueError as err:
        raise AssertionError(f"PositionalEmbedding on x of shape (4, 5, 3) raised {err}: {ALONG_T}") from err
    expected = x + pos.weight.numpy()[:5][None]
    assert np.allclose(out.numpy(), expected), f"PositionalEmbedding must add weight[t] to position t of every sequence: {ALONG_T}"
    shifted = pos(Tensor(x), start=2).numpy()
    assert np.allclose(shifted, x + pos.weight.numpy()[2:7][None]), (
        "with start=2 the positions are 2 ... T + 1: PositionalEmbedding ignores `start`")
    assert np.allclose(pos(Tensor(x[0])).numpy(), x[0] + pos.weight.numpy()[:5]), "(T, D) inputs work too"


def test_positional_embedding_gradients():
    pos = PositionalEmbedding(6, 2, dtype=np.float64, seed=1)
    x = Tensor(np.zeros((3, 4, 2)), requires_grad=True)
    g = np.random.default_rng(5).standard_normal((3, 4, 2))
    pos(x, start=1).backward(g)
    expected = np.zeros((6, 2))
    expected[1:5] = g.sum(0)
    assert np.allclose(pos.weight.grad.numpy(), expected), "each position row gets the batch's summed gradient"
    assert np.allclose(x.grad.numpy(), g)

    def through_the_layer(w, x):
        pos.weight = w  # gradcheck passes its own float64 copies
        return pos(x, start=1)

    assert gradcheck(through_the_layer, [Tensor(pos.weight.numpy(), requires_grad=True), Tensor(g, requires_grad=True)])


def test_sinusoidal_table_row_zero_and_column_order():
    pe = sinusoidal_table(3, 6)
    assert np.allclose(pe[0], [0, 1, 0, 1, 0, 1]), (
        f"PE[0] = {np.round(pe[0], 4).tolist()}, expected [0, 1, 0, 1, 0, 1]: even columns hold sines and odd "
        "columns cosines (sin and cos swapped?)")
    assert np.allclose(pe[1, :2], [np.sin(1), np.cos(1)]), (
        f"PE[1, :2] = {np.round(pe[1, :2], 4).tolist()}, expected [sin 1, cos 1] = [0.8415, 0.5403]: even columns "
        "hold sines and odd columns cosines")


@pytest.mark.parametrize("d", [4, 10, 64])
def test_sinusoidal_frequencies(d):
    pe = sinusoidal_table(2, d)
    pairs = np.arange(d // 2)
    expected = 1 / 10000 ** (2 * pairs / d)
    got = np.arcsin(np.clip(pe[1, 0::2], -1, 1))  # at pos = 1 the angle of pair i is its frequency (all < pi/2)
    assert np.allclose(got, expected, rtol=1e-9), (
        f"pair frequencies {np.round(got[:4], 5).tolist()}..., expected {np.round(expected[:4], 5).tolist()}...: pair i "
        "turns at 1 / 10000^(2i/d) (feature 2i uses the exponent 2i/d, not i/d; divide the position by it)")


def test_sinusoidal_table_against_the_formula():
    d = 10
    pe = sinusoidal_table(40, d)
    assert pe.shape == (40, d) and pe.dtype == np.float64
    for pos in range(40):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert np.isclose(pe[pos, 2 * i], np.sin(angle), atol=1e-12), (
                f"PE[{pos}, {2 * i}] = {pe[pos, 2 * i]:.6f}, expected sin({pos} / 10000^({2 * i}/{d})) = {np.sin(angle):.6f}")
            assert np.isclose(pe[pos, 2 * i + 1], np.cos(angle), atol=1e-12), (
                f"PE[{pos}, {2 * i + 1}] = {pe[pos, 2 * i + 1]:.6f}, expected cos({pos} / 10000^({2 * i}/{d})) = "
                f"{np.cos(angle):.6f}")


def test_sinusoidal_table_known_values_and_odd_width():
    pe = sinusoidal_table(3, 4)
    expected = [[0, 1, 0, 1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)],
                [np.sin(2), np.cos(2), np.sin(0.02), np.cos(0.02)]]
    assert np.allclose(pe, expected, atol=1e-12), "with d = 4 the frequencies are 1 and 1/100"
    odd = sinusoidal_table(5, 5)
    assert odd.shape == (5, 5) and np.allclose(odd[:, 4], np.sin(np.arange(5) / 10000 ** 0.8))
    assert np.allclose(odd[:, :4], sinusoidal_table(5, 5)[:, :4])


def test_sinusoidal_encoding_is_a_buffer_not_a_parameter():
    enc = SinusoidalPositionalEncoding(6, max_len=12)
    assert enc.parameters() == [], "the sinusoidal table must be a buffer, not a parameter (nothing learns it)"
    assert [n for n, _ in enc.named_buffers()] == ["pe"], "the table must be registered as the buffer 'pe'"
    assert enc.pe.shape == (12, 6) and enc.pe.dtype == np.float32 and not enc.pe.requires_grad
    assert np.allclose(enc.pe.numpy(), sinusoidal_table(12, 6), atol=1e-6)
    assert list(enc.state_dict()) == ["pe"], "the table must be registered as the buffer 'pe' (saved by state_dict)"
    assert SinusoidalPositionalEncoding(6, 12, dtype=np.float64).pe.dtype == np.float64


def test_sinusoidal_encoding_forward():
    enc = SinusoidalPositionalEncoding(6, max_len=12, dtype=np.float64)
    x = Tensor(np.random.default_rng(6).standard_normal((3, 4, 6)), requires_grad=True)
    out = enc(x, start=5)
    assert np.allclose(out.numpy(), x.numpy() + sinusoidal_table(12, 6)[5:9][None]), "x + pe[start : start + T]"
    g = np.random.default_rng(7).standard_normal((3, 4, 6))
    out.backward(g)
    assert np.allclose(x.grad.numpy(), g)
    for dtype in (np.float16, np.float32, np.float64):
        assert enc(Tensor(np.zeros((1, 2, 6), dtype))).dtype == dtype, "adding positions must keep x's dtype"
    assert gradcheck(lambda x: enc(x), [Tensor(g[:, :2], requires_grad=True)])


@pytest.mark.parametrize("k", [0, 1, 3, 40])
def test_position_shift_matrix_moves_every_position_by_k(k):
    pe = sinusoidal_table(200, 12)
    M = position_shift_matrix(k, 12)
    assert M.shape == (12, 12)
    assert np.allclose(pe[k:], pe[: 200 - k] @ M.T, atol=1e-10), (
        f"PE[pos + {k}] must equal M_{k} @ PE[pos]" + (
            ": your M moves k steps back (sin(kω) belongs above the diagonal, -sin(kω) below)"
            if np.allclose(pe[: 200 - k], pe[k:] @ M.T, atol=1e-10) else ""))
    assert np.allclose(M @ M.T, np.eye(12)), "the shift is a rotation (orthogonal)"


def test_position_shift_matrices_compose_and_need_an_even_width():
    assert np.allclose(position_shift_matrix(2, 8) @ position_shift_matrix(3, 8), position_shift_matrix(5, 8))
    with pytest.raises(ValueError):
        position_shift_matrix(1, 7)


# ---- issue 20: integers stay integers, positions are not rounded ---------------------------------

@pytest.mark.parametrize("layer", ["sinusoidal", "learned"])
def test_positions_added_to_integers_are_not_rounded(layer):
    module = SinusoidalPositionalEncoding(4, max_len=10) if layer == "sinusoidal" else PositionalEmbedding(10, 4, seed=0)
    table = (module.pe if layer == "sinusoidal" else module.weight).numpy()
    out = module(Tensor(np.ones((1, 3, 4), dtype=np.int64)), start=2)
    assert out.dtype == np.float32, f"an int64 input gave {out.dtype}: the result takes the table's dtype"
    np.testing.assert_allclose(out.numpy(), 1 + table[2:5][None], rtol=1e-6,
                               err_msg="positions added to an integer input were rounded to integers")


@pytest.mark.parametrize("start, error", [(1.5, ValueError), (True, TypeError), ("1", TypeError)])
def test_start_must_be_a_whole_number(start, error):
    x = Tensor(np.zeros((1, 2, 4)))
    for module in (SinusoidalPositionalEncoding(4, max_len=10), PositionalEmbedding(10, 4, seed=0)):
        with pytest.raises(error, match="start must be a whole number"):
            module(x, start=start)
    assert np.allclose(SinusoidalPositionalEncoding(4, max_len=10)(x, start=2.0).numpy(),
                       sinusoidal_table(10, 4)[2:4])
