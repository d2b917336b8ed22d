"""Issue 31 (reliability round 3), a neighbour of GradScaler(init_scale=inf): every optimizer
setting must be a finite number. lr=nan (or inf) was accepted and made every weight NaN at the first
step; module 18's FusedAdamW and module 07's checkpoints (which load settings through the same
check) inherit the check."""
import numpy as np
import pytest

from tinytorch.core.optimizers import SGD, Adam, AdamW
from tinytorch.core.tensor import Tensor

NAN, INF = float("nan"), float("inf")


def params():
    return [Tensor(np.ones(3), requires_grad=True)]


@pytest.mark.parametrize("make, setting, value", [
    (SGD, "lr", NAN), (SGD, "lr", INF), (SGD, "lr", "0.1"), (SGD, "lr", True),
    (SGD, "weight_decay", NAN), (SGD, "momentum", INF), (SGD, "momentum", NAN),
    (Adam, "lr", NAN), (AdamW, "lr", INF), (AdamW, "eps", NAN), (AdamW, "weight_decay", INF),
])
def test_a_setting_that_is_not_a_finite_number_is_refused(make, setting, value):
    name = {"lr": "learning rate"}.get(setting, setting)
    with pytest.raises(ValueError, match=rf"Invalid {name}: {value!r} \(must be a finite number >= 0\)"):
        make(params(), **{"lr": 0.1, setting: value})


@pytest.mark.parametrize("betas", [(NAN, 0.999), (0.9, NAN), (INF, 0.9)])
def test_betas_must_be_finite(betas):
    with pytest.raises(ValueError, match="Invalid betas"):
        AdamW(params(), betas=betas)


def test_a_parameter_group_with_nan_lr_names_the_group():
    with pytest.raises(ValueError, match=r"Invalid learning rate: nan .* in parameter group 1"):
        SGD([{"params": params()}, {"params": params(), "lr": NAN}], lr=0.1)


def test_finite_settings_still_step():
    p = params()
    SGD(p, lr=0.5, momentum=0.0)
    p[0].grad = Tensor(np.ones(3))
    optimizer = SGD(p, lr=0.5)
    optimizer.step()
    assert np.array_equal(p[0].data, np.full(3, 0.5))
