"""RoPE per layer type: configs whose rope_parameters are nested per layer type (transformers v5, e.g. Gemma 3).

    specs = rotary.LayerTypeSpecs.from_hf_config("config.json")   # or a dict / transformers config / JSON text
    specs.layer_types          # ['sliding_attention', ..., 'full_attention', ...]: layer i's type
    specs.specs                # {'full_attention': Spec(...), 'sliding_attention': Spec(...)}
    specs["sliding_attention"] # the Spec of one type;  specs.for_layer(5): the Spec of layer 5

The C++ API is rotary::layer_type_specs_from_hf_config_json (rotary/config.h), the C API
rotary_layer_specs_from_config_json, the CLI `--layer-type` (docs/scaling.md).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from . import _rotary
from ._rotary import Spec

__all__ = ["LayerTypeSpecs"]


class LayerTypeSpecs:
    """A model's RoPE Spec per layer type, plus its `layer_types` list (layer i -> its type).

    nested: True when the config nests rope_parameters per layer type (or uses Gemma 3's legacy
      rope_local_base_freq); False when every layer shares one Spec (then `specs` lists that Spec under each
      name in layer_types, or under "" when the config has none).
    specs: {layer type: Spec, or None for a type whose entry is null (layers without RoPE)}, sorted by name.
    layer_types: the config's layer_types ([] when it has none).
    """

    __slots__ = ("nested", "specs", "layer_types")

    def __init__(self, nested: bool, specs: Dict[str, Optional[Spec]], layer_types: List[str]):
        self.nested = bool(nested)
        self.specs = dict(specs)
        self.layer_types = list(layer_types)

    @classmethod
    def from_hf_config(cls, config: Any, name: Optional[str] = None) -> "LayerTypeSpecs":
        """Reads a Hugging Face config: a dict, a transformers config object, a path to config.json or JSON text.

        Every Spec is validated; errors name the field (ValueError), e.g.
        "[rotary_config] rope_parameters.full_attention.factor must be a number, got \"x\"".
        """
        nested, by_type, layer_types = _rotary._layer_type_specs(config, name)
        return cls(nested, dict(by_type), layer_types)

    def __getitem__(self, layer_type: str) -> Spec:
        """The Spec of a layer type (ValueError naming the valid types, or saying the type has no RoPE)."""
        if layer_type not in self.specs:
            if not self.nested and list(self.specs) == [""]:
                return self.specs[""]  # no layer types: one Spec for every layer
            # The messages of rotary::LayerTypeSpecs::spec_for, word for word.
            valid = ", ".join(k if k else '""' for k in self.specs)
            raise ValueError(f'[rotary_config] layer_type must be one of {valid}, got "{layer_type}"')
        spec = self.specs[layer_type]
        if spec is None:
            raise ValueError(f'[rotary_config] layer_type "{layer_type}" has no RoPE (its rope_parameters entry is '
                             "null), got a request for its Spec")
        return spec

    def for_layer(self, layer: int) -> Spec:
        """The Spec of layer `layer` (0-based) through layer_types (a shared Spec answers every layer)."""
        if layer < 0:
            raise ValueError(f"[rotary_config] layer must be >= 0, got {layer}")
        if not self.layer_types and not self.nested and len(self.specs) == 1:
            return next(iter(self.specs.values()))
        if layer >= len(self.layer_types):
            raise ValueError(f"[rotary_config] layer must be < the number of layer_types {len(self.layer_types)}, "
                             f"got {layer}")
        return self[self.layer_types[layer]]

    def __iter__(self):
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __repr__(self) -> str:
        return (f"LayerTypeSpecs(nested={self.nested}, specs={self.specs!r}, "
                f"layer_types=<{len(self.layer_types)} layers>)")
