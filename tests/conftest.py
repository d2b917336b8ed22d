"""Shared pytest setup: hypothesis profiles, the random generator fixture, grad mode reset."""
import os

import numpy as np
import pytest
from hypothesis import settings

# CI and tito use the "ci" profile: no per-example deadline (shared machines are noisy),
# a moderate number of examples so the whole suite stays fast.
settings.register_profile("ci", deadline=None, max_examples=25, derandomize=True)
settings.register_profile("dev", deadline=None, max_examples=60)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _grad_mode_on():
    """Every test starts and ends with recording on and mixed precision off.

    A `no_grad` (or module 17's `autocast`) that fails to restore the mode (a student's bug)
    then fails the tests that check it, instead of changing every test after it.
    """
    from tinytorch.core.tensor import Autocast, GradMode

    GradMode.enabled, Autocast.dtype = True, None
    yield
    GradMode.enabled, Autocast.dtype = True, None
