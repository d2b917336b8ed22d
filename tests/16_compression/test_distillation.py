"""Module 16, section 9: the distillation loss, against its formula in NumPy (float64), with the classic
mistakes named; gradients by central differences. PyTorch's kl_div: test_torch_parity.py."""
import numpy as np
import pytest

from tinytorch.core.autograd import gradcheck
from tinytorch.core.tensor import Tensor
from tinytorch.perf.compression import distillation_loss


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def expected_and_mistakes(s, t, y, T, alpha):
    """(the formula's value, {the mistake: the value it gives}), logits flattened to (N, C)."""
    s, t, y = s.reshape(-1, s.shape[-1]), t.reshape(-1, t.shape[-1]), y.reshape(-1)
    n, classes = s.shape
    lt, ls = _log_softmax(t / T), _log_softmax(s / T)
    pt, ps = np.exp(lt), np.exp(ls)
    kl = np.sum(pt * (lt - ls)) / n
    hard = (1 - alpha) * -np.mean(_log_softmax(s)[np.arange(n), y])
    mistakes = {
        "the T² factor is missing (alpha·T²·KL)": alpha * kl + hard,
        "the KL is in the wrong direction: KL(teacher ‖ student) = Σ p_teacher (log p_teacher − log p_student)":
            alpha * T * T * np.sum(ps * (ls - lt)) / n + hard,
        "the KL is averaged over the classes too: sum over classes, divide by the number of positions (batchmean)":
            alpha * T * T * kl / classes + hard,
        "probabilities used where log-probabilities belong: both logs come from log_softmax":
            alpha * T * T * np.sum(pt * (pt - ps)) / n + hard,
        "probabilities used where log-probabilities belong: both logs come from log_softmax (softmax, not log_softmax)":
            alpha * T * T * np.sum(np.exp(pt) * (pt - ps)) / n + hard,
    }
    return alpha * T * T * kl + hard, mistakes


def check_value(got, s, t, y, T, alpha):
    expected, mistakes = expected_and_mistakes(s, t, y, T, alpha)
    named = [cause for cause, value in mistakes.items() if abs(got - value) < 1e-9]
    assert abs(got - expected) < 1e-10, (
        f"distillation_loss: expected {expected:.6f}, got {got:.6f}: "
        + (named[0] if named else "alpha·T²·KL(teacher ‖ student), batchmean, plus (1 − alpha)·cross-entropy"))


@pytest.mark.parametrize("T,alpha", [(3.0, 0.6), (1.0, 1.0), (0.5, 0.0), (2.0, 0.5)], ids=lambda v: str(v))
def test_value_of_the_formula(T, alpha):
    rng = np.random.default_rng(int(10 * T + 100 * alpha))
    s, t, y = rng.standard_normal((4, 5)), rng.standard_normal((4, 5)) * 3, rng.integers(0, 5, 4)
    got = distillation_loss(Tensor(s), t, y, temperature=T, alpha=alpha)
    assert got.shape == () and got.dtype == np.float64, "a 0-d Tensor in the student's dtype"
    check_value(got.item(), s, t, y, T, alpha)


def test_leading_dims_count_as_positions():
    rng = np.random.default_rng(1)
    s, t, y = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4)), rng.integers(0, 4, (2, 3))
    check_value(distillation_loss(Tensor(s), Tensor(t), y).item(), s, t, y, 2.0, 0.5)


def test_teacher_is_detached():
    rng = np.random.default_rng(2)
    s, t, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.integers(0, 4, 3)
    teacher, student = Tensor(t, requires_grad=True), Tensor(s, requires_grad=True)
    distillation_loss(student, teacher, y).backward()
    assert teacher.grad is None, "detach the teacher's logits: only the student learns"
    assert student.grad is not None and student.grad.shape == (3, 4), (
        "the student's logits get a gradient of their shape")


def test_gradient_by_central_differences():
    rng = np.random.default_rng(3)
    t, y = rng.standard_normal((2, 3, 5)), rng.integers(0, 5, (2, 3))
    for T, alpha in ((2.5, 0.3), (1.0, 0.9)):
        s = Tensor(rng.standard_normal((2, 3, 5)), requires_grad=True)
        assert gradcheck(lambda z: distillation_loss(z, t, y, temperature=T, alpha=alpha), [s]), (
            "the student's gradient must match central differences")


def test_equal_logits_leave_only_the_hard_term():
    rng = np.random.default_rng(4)
    s, y = rng.standard_normal((5, 3)), rng.integers(0, 3, 5)
    student = Tensor(s, requires_grad=True)
    loss = distillation_loss(student, s.copy(), y, temperature=4.0, alpha=1.0)
    loss.backward()
    assert abs(loss.item()) < 1e-12 and np.abs(student.grad.numpy()).max() < 1e-12, (
        "equal logits: the soft term and its gradient are 0")


def test_float32_and_errors():
    s = Tensor(np.zeros((2, 3), np.float32))
    assert distillation_loss(s, np.zeros((2, 3), np.float32), [0, 1]).dtype == np.float32, (
        "float32 logits give a float32 loss")
    with pytest.raises(ValueError, match="temperature"):
        distillation_loss(s, np.zeros((2, 3)), [0, 1], temperature=0.0)
    with pytest.raises(ValueError, match="alpha"):
        distillation_loss(s, np.zeros((2, 3)), [0, 1], alpha=1.5)
    with pytest.raises(ValueError, match="same shape"):
        distillation_loss(s, np.zeros((2, 4)), [0, 1])
