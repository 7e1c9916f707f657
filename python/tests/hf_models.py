"""Access to a transformers model's configuration and modeling modules for the live comparisons (skips if absent)."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Tuple

import pytest


def hf_model_modules(model: str) -> Tuple[ModuleType, ModuleType]:
    """(transformers.models.<model>.configuration_<model>, ...modeling_<model>), or skip the test."""
    try:
        return (importlib.import_module(f"transformers.models.{model}.configuration_{model}"),
                importlib.import_module(f"transformers.models.{model}.modeling_{model}"))
    except ImportError as e:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no {model}: {e}")
