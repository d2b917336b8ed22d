"""Module 18, section 11: ThreadedDataParallel, forward and backward of the batch's parts on threads.
The loss and the gradients must be the whole batch's (to rounding), whatever the number of parts,
and the replicas must follow the model's weights wherever they are stored."""
import multiprocessing
import threading

import numpy as np
import pytest

from tinytorch.core.optimizers import AdamW, weight_decay_groups
from tinytorch.core.tensor import OP_LISTENERS, Tensor
from tinytorch.models.transformer import GPT
from tinytorch.perf.acceleration import FusedAdamW, ThreadedDataParallel, blas_threads, fuse
from tinytorch.perf.profiling import Profiler


def small_gpt(seed=4, dtype=np.float64):
    return GPT(17, 16, 2, 2, 8, seed=seed, dtype=dtype)


def batch(rows=5, seed=12):
    ids, targets = np.random.default_rng(seed).integers(0, 17, (2, rows, 8))
    return ids, targets


def whole_batch(model, ids, targets):
    """The loss and the gradients of the whole batch, the plain way; leaves the model's .grad at None."""
    model.zero_grad()
    _, loss = model(ids, targets=targets)
    loss.backward()
    grads = {name: p.grad.data.copy() for name, p in model.named_parameters()}
    model.zero_grad()
    return loss.item(), grads


@pytest.mark.parametrize("threads", [1, 2, 3, 5, 8])
def test_loss_and_gradients_are_the_whole_batchs(threads):
    model = small_gpt()
    ids, targets = batch(rows=5)
    loss, grads = whole_batch(model, ids, targets)
    got = ThreadedDataParallel(model, threads).forward_backward(ids, targets)
    assert got._node is None and not got.requires_grad, "the returned loss is a value, with no graph behind it"
    assert abs(got.item() - loss) < 1e-12, f"{threads} parts: loss {got.item()} against the whole batch's {loss}"
    for name, p in model.named_parameters():
        assert np.allclose(p.grad.data, grads[name], rtol=1e-10, atol=1e-13), \
            f"{threads} parts: the gradient of {name} differs by {np.abs(p.grad.data - grads[name]).max():.2e}"


def test_the_gradient_is_added_to_what_is_there_as_backward_does():
    model = small_gpt()
    ids, targets = batch()
    _, grads = whole_batch(model, ids, targets)
    for p in model.parameters():
        p.grad = Tensor(np.ones(p.shape))
    ThreadedDataParallel(model, 2).forward_backward(ids, targets)
    for name, p in model.named_parameters():
        assert np.allclose(p.grad.data, grads[name] + 1, rtol=1e-10, atol=1e-13), f"{name}: not old + new"


def test_parts_run_on_other_threads_and_blas_is_shared_out(monkeypatch):
    model = small_gpt()
    ids, targets = batch(rows=4)
    parallel = ThreadedDataParallel(model, 2)
    seen = []
    replica = parallel.replicas[0]
    forward = type(replica).forward

    def spy(self, *args, **kwargs):
        seen.append((self is replica, threading.current_thread() is threading.main_thread(), blas_threads()))
        return forward(self, *args, **kwargs)

    before = blas_threads()
    monkeypatch.setattr(type(replica), "forward", spy)
    parallel.forward_backward(ids, targets)
    monkeypatch.undo()
    shared_out = max(1, before // 2)  # each of the 2 parts gets half of the BLAS threads
    assert sorted(seen) == [(False, True, shared_out), (True, False, shared_out)], \
        f"(is the replica, on the main thread, BLAS threads) for each part, {before} BLAS threads in all: {seen}"
    assert blas_threads() == before, "the BLAS thread count must be given back after the parts"


def test_replicas_share_the_weights_and_follow_replaced_arrays():
    model = small_gpt()
    parallel = ThreadedDataParallel(model, 2)
    replica_params = parallel.replicas[0].parameters()
    assert all(r is not p and r.data is p.data for r, p in zip(replica_params, model.parameters())), \
        "a replica's parameters are its own tensors holding the model's own arrays"
    assert parallel.replicas[0].blocks[0] is not model.blocks[0], "a replica has its own module tree"
    # FusedAdamW replaces every parameter's array by a view into its flat buffer; load_state_dict
    # replaces arrays too. The next call must use the new arrays.
    FusedAdamW(weight_decay_groups(model, 0.1))
    other = small_gpt(seed=9)
    model.load_state_dict(other.state_dict())
    ids, targets = batch()
    loss, grads = whole_batch(other, ids, targets)
    got = parallel.forward_backward(ids, targets)
    assert abs(got.item() - loss) < 1e-12, "the replica still used the weights it was built with"
    for name, p in model.named_parameters():
        assert np.allclose(p.grad.data, grads[name], rtol=1e-10, atol=1e-13), name


def test_training_with_parts_follows_training_without():
    """Three steps of the fused model with FusedAdamW, the batch in 2 parts, against the plain model
    with AdamW on the whole batch: the same weights to rounding (float64)."""
    plain, fused_source = small_gpt(), small_gpt()
    fused = fuse(fused_source)
    plain_opt = AdamW(weight_decay_groups(plain, 0.1), lr=1e-2)
    fused_opt = FusedAdamW(weight_decay_groups(fused, 0.1), lr=1e-2)
    parallel = ThreadedDataParallel(fused, 2)
    for step in range(3):
        ids, targets = batch(rows=6, seed=step)
        plain_opt.zero_grad()
        plain(ids, targets=targets)[1].backward()
        plain_opt.step()
        fused_opt.zero_grad()
        parallel.forward_backward(ids, targets)
        fused_opt.step()
    for (name, p), q in zip(plain.named_parameters(), fused_source.parameters()):
        assert np.allclose(p.data, q.data, rtol=1e-9, atol=1e-12), f"{name} drifted after 3 steps"


def test_float32_gradients_agree_to_float32_rounding():
    model = small_gpt(dtype=np.float32)
    ids, targets = batch(rows=6)
    loss, grads = whole_batch(model, ids, targets)
    got = ThreadedDataParallel(model, 2).forward_backward(ids, targets)
    assert got.dtype == np.float32 and abs(got.item() - loss) < 1e-5
    for name, p in model.named_parameters():
        assert p.grad.dtype == np.float32 and np.allclose(p.grad.data, grads[name], rtol=1e-4, atol=1e-6), name


def test_eval_mode_reaches_the_replicas():
    model = GPT(17, 16, 2, 2, 8, dropout=0.5, seed=4, dtype=np.float64).eval()
    ids, targets = batch()
    loss, _ = whole_batch(model, ids, targets)  # eval: no dropout, so the parts must give the same loss
    got = ThreadedDataParallel(model, 2).forward_backward(ids, targets)
    assert abs(got.item() - loss) < 1e-12, "the replica ran in training mode (dropout) while the model is in eval mode"


def test_an_error_in_a_part_is_raised_and_the_next_call_works():
    model = small_gpt()
    ids, targets = batch(rows=4)
    targets[3, 0] = 99  # a target outside the vocabulary, in the second part only (a worker thread's)
    parallel = ThreadedDataParallel(model, 2)
    before = blas_threads()
    with pytest.raises(ValueError, match="target 99 is out of range for 17 classes"):
        parallel.forward_backward(ids, targets)
    assert blas_threads() == before, "the BLAS thread count must be given back after an error too"
    targets[3, 0] = 1
    model.zero_grad()
    loss, grads = whole_batch(model, ids, targets)
    assert abs(parallel.forward_backward(ids, targets).item() - loss) < 1e-12, "the next call must work again"


def test_under_a_profiler_the_parts_run_in_the_callers_thread():
    model = small_gpt()
    ids, targets = batch(rows=4)
    loss, grads = whole_batch(model, ids, targets)
    with Profiler() as prof:
        got = ThreadedDataParallel(model, 2).forward_backward(ids, targets)
    assert not OP_LISTENERS
    assert abs(got.item() - loss) < 1e-12
    assert "matmul" in prof.table(top=20), "the profiler saw no op: the parts ran where it could not see them"


def test_more_parts_than_rows_use_one_row_each():
    model = small_gpt()
    ids, targets = batch(rows=2)
    loss, grads = whole_batch(model, ids, targets)
    assert abs(ThreadedDataParallel(model, 4).forward_backward(ids, targets).item() - loss) < 1e-12


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_are_refused(threads):
    with pytest.raises(ValueError, match="threads must be a whole number"):
        ThreadedDataParallel(small_gpt(), threads)


def test_bad_batches_are_refused_with_the_shapes():
    parallel = ThreadedDataParallel(small_gpt(), 2)
    ids, targets = batch(rows=4)
    with pytest.raises(ValueError, match=r"same number of rows.*\(4, 8\) and \(3, 8\)"):
        parallel.forward_backward(ids, targets[:3])
    with pytest.raises(ValueError, match="same number of rows"):
        parallel.forward_backward(np.int64(3), np.int64(3))
    with pytest.raises(TypeError, match="needs a Module"):
        ThreadedDataParallel(lambda x: x, 2)


def test_the_default_follows_blas_thread_count():
    from threadpoolctl import threadpool_limits

    assert ThreadedDataParallel(small_gpt()).threads == blas_threads() >= 1
    with threadpool_limits(limits=1, user_api="blas"):
        assert blas_threads() == 1, "blas_threads() must read BLAS's current limit, not the one it saw first"
        assert ThreadedDataParallel(small_gpt()).threads == 1


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_loss_alone_is_the_whole_batchs_without_a_gradient(threads):
    from tinytorch.core.autograd import is_grad_enabled, no_grad

    model = small_gpt().eval()
    ids, targets = batch(rows=5)
    with no_grad():
        expected = model(ids, targets=targets)[1].item()
    got = ThreadedDataParallel(model, threads).loss(ids, targets)
    assert abs(got.item() - expected) < 1e-12, f"{threads} parts: {got.item()} against {expected}"
    assert got._node is None and all(p.grad is None for p in model.parameters()), "loss() computes no gradient"
    assert is_grad_enabled(), "recording must be on again after loss()"


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_a_forked_child_makes_its_own_worker_threads():
    model = small_gpt()
    ids, targets = batch(rows=4)
    expected = ThreadedDataParallel(model, 2).forward_backward(ids, targets).item()  # the parent's pool exists now
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        got = pool.apply_async(_loss_in_parts, (ids, targets)).get(timeout=60)
    assert abs(got - expected) < 1e-12, "the child's parts did not run (the parent's pool has no threads there)"


def _loss_in_parts(ids, targets):
    return ThreadedDataParallel(small_gpt(), 2).loss(ids, targets).item()
