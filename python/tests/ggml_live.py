"""Access to live ggml (PyPI's libggml-python, driven by rotary._bench_ggml) for the peer tests (skips if absent)."""
from __future__ import annotations

from types import ModuleType

import pytest


def ggml_or_skip() -> ModuleType:
    """rotary._bench_ggml with ggml's libraries loaded, or skip the test."""
    from rotary import _bench_ggml

    try:
        _bench_ggml._libs()
    except _bench_ggml.GgmlUnavailable as e:
        pytest.skip(f"ggml not runnable here: {e}")
    return _bench_ggml
