"""Module 06: optimizer update rules by hand, the .grad/None contract, state_dict."""
import numpy as np
import pytest

from tinytorch.core.optimizers import SGD, Adam, AdamW, Optimizer
from tinytorch.core.tensor import Tensor


def param(value, grad=None, dtype=np.float64):
    p = Tensor(np.array(value, dtype=dtype), requires_grad=True)
    if grad is not None:
        p.grad = Tensor(np.array(grad, dtype=dtype))
    return p


# ---- SGD ------------------------------------------------------------------------

def test_sgd_plain_step_by_hand():
    p = param([1.0, -2.0, 0.0], [0.5, 0.25, -1.0])
    SGD([p], lr=0.1).step()
    np.testing.assert_allclose(p.numpy(), [0.95, -2.025, 0.1], rtol=0, atol=1e-15)


def test_sgd_momentum_two_steps_by_hand():
    p = param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9)
    opt.step()  # buf = g = 0.5
    np.testing.assert_allclose(opt.state[0]["momentum_buffer"], [0.5])
    np.testing.assert_allclose(p.numpy(), [0.95])
    p.grad = Tensor(np.array([-1.0]))
    opt.step()  # buf = 0.9*0.5 - 1 = -0.55 ; p = 0.95 + 0.055
    np.testing.assert_allclose(opt.state[0]["momentum_buffer"], [-0.55])
    np.testing.assert_allclose(p.numpy(), [1.005])


def test_sgd_nesterov_and_weight_decay_by_hand():
    p = param([1.0], [0.5])
    opt = SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)
    opt.step()  # d = 0.6; buf = 0.6; d = 0.6 + 0.54 = 1.14; p = 1 - 0.114
    np.testing.assert_allclose(p.numpy(), [0.886])
    opt.step()  # d = 0.5 + 0.0886 = 0.5886; buf = 0.54 + 0.5886 = 1.1286; d = 0.5886 + 1.01574
    np.testing.assert_allclose(opt.state[0]["momentum_buffer"], [1.1286])
    np.testing.assert_allclose(p.numpy(), [0.886 - 0.1 * (0.5886 + 0.9 * 1.1286)])


def test_sgd_weight_decay_without_momentum_keeps_no_state():
    p = param([2.0], [0.0])
    opt = SGD([p], lr=0.5, weight_decay=0.1)
    opt.step()  # zero gradient, but decay still shrinks: 2 - 0.5*0.2
    np.testing.assert_allclose(p.numpy(), [1.9])
    assert opt.state[0] == {}


def test_sgd_rejects_bad_settings():
    p = param([1.0])
    with pytest.raises(ValueError):
        SGD([p], lr=-0.1)
    with pytest.raises(ValueError):
        SGD([p], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="[Nn]esterov"):
        SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty"):
        SGD([], lr=0.1)


# ---- Adam / AdamW ---------------------------------------------------------------

def test_adam_first_step_by_hand():
    p = param([1.0, -3.0, 2.0], [0.5, -2.0, 1e-4])
    opt = Adam([p], lr=0.1)
    opt.step()
    # m = 0.1 g, v = 0.001 g², m̂ = g, v̂ = g²: each coordinate moves by lr·g/(|g|+eps)
    expected = np.array([1.0, -3.0, 2.0]) - 0.1 * np.array([0.5, -2.0, 1e-4]) / (np.abs([0.5, -2.0, 1e-4]) + 1e-8)
    np.testing.assert_allclose(p.numpy(), expected, rtol=0, atol=1e-14)
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [0.05, -0.2, 1e-5])
    np.testing.assert_allclose(opt.state[0]["exp_avg_sq"], [0.00025, 0.004, 1e-11])
    assert opt.state[0]["step"] == 1


def test_adam_second_step_by_hand():
    p = param([0.0], [1.0])
    opt = Adam([p], lr=0.01, betas=(0.5, 0.75), eps=0.0)
    opt.step()
    p.grad = Tensor(np.array([3.0]))
    opt.step()
    m = 0.5 * 0.5 + 0.5 * 3.0  # 1.75
    v = 0.75 * 0.25 + 0.25 * 9.0  # 2.4375
    m_hat, v_hat = m / (1 - 0.25), v / (1 - 0.5625)
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [m])
    np.testing.assert_allclose(opt.state[0]["exp_avg_sq"], [v])
    np.testing.assert_allclose(p.numpy(), [-0.01 - 0.01 * m_hat / np.sqrt(v_hat)], rtol=1e-13)


def test_adam_weight_decay_is_added_to_the_gradient():
    p = param([2.0], [0.5])
    opt = Adam([p], lr=0.1, weight_decay=0.5, betas=(0.9, 0.99))
    opt.step()  # g = 0.5 + 1.0 = 1.5
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [0.15])
    np.testing.assert_allclose(opt.state[0]["exp_avg_sq"], [0.01 * 2.25])


def test_adamw_decay_is_decoupled():
    p = param([2.0], [0.5])
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    opt.step()  # p = 2·(1 − 0.05) = 1.9, then the Adam step on the raw gradient
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [0.05])
    np.testing.assert_allclose(p.numpy(), [1.9 - 0.1 * 0.5 / (0.5 + 1e-8)], rtol=0, atol=1e-14)


def test_adamw_defaults_and_zero_grad_still_decays():
    p = param([4.0], [0.0])
    opt = AdamW([p], lr=0.5)
    assert opt.hyperparams["weight_decay"] == 0.01 and opt.hyperparams["betas"] == (0.9, 0.999)
    assert Adam([p]).hyperparams == {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}
    opt.step()
    np.testing.assert_allclose(p.numpy(), [4.0 * (1 - 0.005)])


def test_adam_rejects_bad_betas():
    with pytest.raises(ValueError, match="betas"):
        Adam([param([1.0])], betas=(1.0, 0.999))


# ---- the contract ---------------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda ps: SGD(ps, lr=0.1),
    "momentum": lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "nesterov": lambda ps: SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda ps: Adam(ps, lr=0.1, weight_decay=0.01),
    "adamw": lambda ps: AdamW(ps, lr=0.1),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_step_never_modifies_grad(name):
    p = param([[1.0, 2.0], [3.0, 4.0]], [[0.1, -0.2], [0.3, -0.4]])
    grad_array = p.grad.data
    before = grad_array.copy()
    opt = OPTIMIZERS[name]([p])
    for _ in range(3):
        opt.step()
    assert p.grad.data is grad_array
    np.testing.assert_array_equal(grad_array, before)
    assert not np.array_equal(p.numpy(), [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_parameters_without_grad_are_skipped(name):
    used = param([1.0, 2.0], [0.5, 0.5])
    unused = param([3.0, 4.0])
    opt = OPTIMIZERS[name]([used, unused])
    opt.step()
    np.testing.assert_array_equal(unused.numpy(), [3.0, 4.0])
    assert opt.state[1] == {} and unused.grad is None


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_update_replaces_data_and_keeps_dtype(name):
    p = param(np.ones((3, 2)), np.full((3, 2), 0.5), dtype=np.float32)
    old = p.data
    old_copy = old.copy()
    OPTIMIZERS[name]([p]).step()
    assert p.dtype == np.float32 and p.shape == (3, 2)
    np.testing.assert_array_equal(old, old_copy)  # the previous array was replaced, not edited
    assert np.all(p.numpy() < 1.0)


def test_zero_grad_sets_none():
    a, b = param([1.0], [1.0]), param([2.0], [2.0])
    opt = SGD([a, b], lr=0.1)
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_lr_property_changes_the_step():
    p = param([1.0], [1.0])
    opt = SGD([p], lr=0.1)
    opt.lr = 0.5
    opt.step()
    assert opt.hyperparams["lr"] == 0.5
    np.testing.assert_allclose(p.numpy(), [0.5])


def test_accepts_a_generator_and_objects_with_parameters():
    ps = [param([1.0], [1.0]), param([2.0], [1.0])]
    assert SGD((p for p in ps), lr=0.1).params == ps

    class Holder:
        def parameters(self):
            return ps

    assert Adam(Holder()).params == ps
    assert isinstance(SGD(ps, lr=0.1), Optimizer)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_state_dict_round_trip_continues_identically(name):
    rng = np.random.default_rng(1)
    start = rng.standard_normal((4, 3))
    grads = [rng.standard_normal((4, 3)) for _ in range(6)]

    def run(opt, p, gs):
        for g in gs:
            p.grad = Tensor(g)
            opt.step()

    p = param(start)
    opt = OPTIMIZERS[name]([p])
    run(opt, p, grads)

    q = param(start)
    first = OPTIMIZERS[name]([q])
    run(first, q, grads[:3])
    saved = first.state_dict()
    r = param(q.numpy().copy())
    second = OPTIMIZERS[name]([r])
    second.lr = 123.0  # overwritten by load_state_dict
    second.load_state_dict(saved)
    run(second, r, grads[3:])
    np.testing.assert_array_equal(r.numpy(), p.numpy())


def test_state_dict_is_inspectable_and_a_copy():
    p = param([1.0, 2.0], [0.5, -0.5])
    opt = Adam([p], lr=0.1)
    opt.step()
    sd = opt.state_dict()
    assert sd["type"] == "Adam"
    assert sd["hyperparams"]["lr"] == 0.1 and tuple(sd["hyperparams"]["betas"]) == (0.9, 0.999)
    assert sd["state"][0]["step"] == 1
    assert isinstance(sd["state"][0]["exp_avg"], np.ndarray)
    np.testing.assert_allclose(sd["state"][0]["exp_avg"], [0.05, -0.05])
    sd["state"][0]["exp_avg"][:] = 99.0
    np.testing.assert_allclose(opt.state[0]["exp_avg"], [0.05, -0.05])
    opt.step()
    np.testing.assert_allclose(sd["state"][0]["exp_avg_sq"], [0.00025, 0.00025])  # snapshot kept


def test_load_state_dict_rejects_mismatches():
    p = param([1.0, 2.0], [0.5, 0.5])
    adam = Adam([p])
    adam.step()
    with pytest.raises(ValueError, match="SGD"):
        SGD([p], lr=0.1).load_state_dict(adam.state_dict())
    with pytest.raises(ValueError, match="2"):
        Adam([p, param([3.0])]).load_state_dict(adam.state_dict())
    with pytest.raises(ValueError, match="shape"):
        Adam([param([1.0, 2.0, 3.0])]).load_state_dict(adam.state_dict())


def test_state_nbytes_counts_state_arrays():
    ps = [param(np.zeros((10, 10)), np.ones((10, 10))), param(np.zeros(10), np.ones(10))]
    sgd, mom, adam = SGD(ps, lr=0.1), SGD(ps, lr=0.1, momentum=0.9), Adam(ps)
    for opt in (sgd, mom, adam):
        opt.step()
    assert (sgd.state_nbytes(), mom.state_nbytes(), adam.state_nbytes()) == (0, 880, 1760)


def test_minimises_a_quadratic():
    target = np.array([3.0, -1.0, 0.5])
    for make in (lambda ps: SGD(ps, lr=0.1), lambda ps: SGD(ps, lr=0.05, momentum=0.9),
                 lambda ps: Adam(ps, lr=0.1), lambda ps: AdamW(ps, lr=0.1, weight_decay=0.0)):
        p = param(np.zeros(3))
        opt = make([p])
        for _ in range(300):
            p.grad = Tensor(2 * (p.data - target))
            opt.step()
        np.testing.assert_allclose(p.numpy(), target, atol=1e-3)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_a_float64_gradient_does_not_change_a_float32_parameter(name):
    p = param([1.0, 2.0], dtype=np.float32)
    p.grad = Tensor(np.array([0.5, -0.5], dtype=np.float64))
    opt = OPTIMIZERS[name]([p])
    opt.step()
    opt.step()
    assert p.dtype == np.float32
