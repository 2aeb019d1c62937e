import numpy as np
import pytest

import explorer as ex


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def t(a, dtype=None):
    return ex.tensor(np.asarray(a), dtype)
