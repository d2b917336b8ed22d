"""Shared pytest setup: hypothesis profiles and the random generator fixture."""
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
