"""Shared pytest fixtures for the rotary Python suite: shared-data lookup and seeded RNGs."""
from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def shared_dir() -> pathlib.Path | None:
    """ROTARY_SHARED_DIR, else ../shared next to the repository root; None if neither exists."""
    env = os.environ.get("ROTARY_SHARED_DIR")
    candidates = [pathlib.Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared")
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return None


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)
