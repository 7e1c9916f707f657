"""Access to a transformers model's configuration and modeling modules for the live comparisons (skips if absent)."""
from __future__ import annotations

import importlib
import contextlib
import logging
import warnings
from types import ModuleType
from typing import Optional, Tuple

import pytest


def hf_model_modules(model: str) -> Tuple[ModuleType, ModuleType]:
    """(transformers.models.<model>.configuration_<model>, ...modeling_<model>), or skip the test."""
    try:
        return (importlib.import_module(f"transformers.models.{model}.configuration_{model}"),
                importlib.import_module(f"transformers.models.{model}.modeling_{model}"))
    except ImportError as e:  # pragma: no cover - depends on the installed transformers
        pytest.skip(f"transformers has no {model}: {e}")


def modeling_module(model_type: str) -> Optional[ModuleType]:
    """transformers' modeling module of `model_type` (a sub-type such as qwen2_vl_text: its model's), or None."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name
    name = model_type_to_module_name(model_type)
    try:
        return importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    except Exception:  # noqa: BLE001 - absent, or needs an optional dependency
        return None


def text_rotary_embedding_names(mod: ModuleType) -> list:
    """The names of the RotaryEmbedding classes a modeling module defines that are not vision ones, sorted.

    A vision RoPE is the class named <Model>VisionRotaryEmbedding (Qwen2VLVisionRotaryEmbedding, PixtralVision...):
    a model whose own name holds "Vision" keeps its text RoPE in <Model>TextRotaryEmbedding (Granite 4 Vision's
    Granite4VisionTextRotaryEmbedding), which a skip of every name containing "Vision" hid."""
    return sorted(n for n in dir(mod) if n.endswith("RotaryEmbedding") and not n.endswith("VisionRotaryEmbedding")
                  and isinstance(getattr(mod, n), type) and getattr(mod, n).__module__ == mod.__name__)


def text_rotary_embedding_class(model_type: str) -> Optional[type]:
    """The model's text RotaryEmbedding class (the first by name that is not a vision one), or None."""
    mod = modeling_module(model_type)
    if mod is None:
        return None
    names = text_rotary_embedding_names(mod)
    return getattr(mod, names[0]) if names else None


# RoPE labels that a model's RotaryEmbedding keys its buffers by instead of layer types (DeepSeek V4's main /
# compress), each with a layer type that reads it (rotary.LayerTypeSpecs lists layer types).
LABEL_LAYER_TYPE = {"main": "sliding_attention", "compress": "compressed_sparse_attention"}


def per_type_rope(emb) -> dict:
    """{layer type: (inv_freq, attention scaling)} of a RotaryEmbedding ({None: ...} for one shared RoPE)."""
    types = getattr(emb, "layer_types", None)
    if isinstance(types, (list, tuple)) and types and hasattr(emb, f"{types[0]}_inv_freq"):
        return {t: (getattr(emb, f"{t}_inv_freq"), getattr(emb, f"{t}_attention_scaling")) for t in types}
    return {None: (emb.inv_freq, emb.attention_scaling)}


@contextlib.contextmanager
def quiet_transformers():
    """transformers' warnings and log messages silenced for the block (config classes warn about unused fields)."""
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(logging.NOTSET)


def load_hf_config(directory) -> object:
    """transformers.AutoConfig.from_pretrained(directory), quietly."""
    import transformers

    with quiet_transformers():
        return transformers.AutoConfig.from_pretrained(str(directory))


def text_config_path(config) -> Tuple[str, ...]:
    """The attributes leading from a transformers config to the one its get_text_config() returns (() for itself;
    ("thinker_config", "text_config") for Qwen2.5-Omni), or None when that is not an attribute chain."""
    target = config.get_text_config()

    def find(obj, depth):
        if obj is target:
            return ()
        if depth == 0:
            return None
        for key, value in vars(obj).items():
            if hasattr(value, "get_text_config"):
                rest = find(value, depth - 1)
                if rest is not None:
                    return (key,) + rest
        return None

    return find(config, 3)


def trimmed_hf_config(model_type: str, fields: dict):
    """(the text config transformers builds from `fields`, the config.json document that gives them): a composite
    model's fields go where its get_text_config() finds them (text_config; Qwen-Omni's thinker_config.text_config,
    Dia's decoder_config, ...)."""
    import copy

    import transformers
    doc_fields, fields = copy.deepcopy(fields), copy.deepcopy(fields)  # transformers edits nested dicts in place
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = transformers.AutoConfig.for_model(model_type, **fields)
            path = text_config_path(config) or ()
            if not path:
                return config, {"model_type": model_type, **doc_fields}
            nested, nested_doc = copy.deepcopy(doc_fields), doc_fields
            for key in reversed(path):
                nested, nested_doc = {key: nested}, {key: nested_doc}
            return transformers.AutoConfig.for_model(model_type, **nested).get_text_config(), {
                "model_type": model_type, **nested_doc}
    finally:
        logging.disable(logging.NOTSET)
