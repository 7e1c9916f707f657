"""Common pytest fixtures for the rotary Python suite: the reference data folder (tests/data) and seeded RNGs."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def reference_data_dir() -> pathlib.Path:
    """The repository's reference data, tests/data (tests/data/README.md says how each file was made)."""
    return REPO_ROOT / "tests" / "data"


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)
