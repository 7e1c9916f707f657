"""
Native core of the rotary package (use the `rotary` package, not this module directly).
"""

from collections.abc import Sequence
from typing import Annotated, overload

from typing_extensions import Never

import numpy
from numpy.typing import NDArray


class Spec:
    """
    An immutable RoPE specification: head/rotary dims, base, pairing, scaling, M-RoPE sections.

    Build one with Spec(head_dim, ...), Spec.from_hf_config(config) or Spec.preset(name).
    Each Spec owns a lazily built cos/sin table that rotary.apply reuses across calls.
    """

    @overload
    def __init__(self, head_dim: int, rotary_dim: int = 0, base: float = 10000.0, *, pairing: str = 'half', rope_type: str = 'default', max_position_embeddings: int = 0, factor: float | None = None, original_max_position_embeddings: int = 0, beta_fast: float = 32.0, beta_slow: float = 1.0, mscale: float | None = None, mscale_all_dim: float | None = None, truncate: bool = True, attention_factor: float | None = None, short_factor: Sequence[float] | None = None, long_factor: Sequence[float] | None = None, low_freq_factor: float = 1.0, high_freq_factor: float = 4.0, mrope_section: Sequence[int] | None = None, mrope_interleaved: bool = False, partial_rotary_factor: float = 1.0, name: str = '', alpha: float | None = None, mixed_b: float | None = None) -> None:
        """
        Builds and validates a Spec. rotary_dim 0 means head_dim; partial_rotary_factor does not set it (give rotary_dim, e.g. Spec(128, 64), for partial rotation; from_hf_config does), except for proportional. rope_type is an HF name (default, linear, dynamic, yarn, longrope, llama3, proportional) or vLLM's ntk; scaling keywords follow HF's and vLLM's rope_parameters (alpha: dynamic NTK-alpha; mixed_b: mixed NTK). Raises ValueError naming the first invalid field.
        """

    # The catch-all overload that turns arguments of the wrong type or name into a TypeError naming them, and
    # converts those that need it (numpy scalars) for the first: typed Never here, so that type checkers hold
    # calls to the first overload's signature.
    @overload
    def __init__(self, head_dim: Never, *args: Never, **kwargs: Never) -> None:
        """
        Not a second way to build a Spec: arguments that need a conversion (numpy scalars) are converted for the signature above; arguments of the wrong type, and unknown keywords, raise a TypeError naming them.
        """

    @staticmethod
    def from_hf_config(config: object, name: str | None = None) -> Spec:
        """
        Spec from a Hugging Face config: a dict, a transformers config object, a path to config.json, or the JSON text. Reads v4 rope_scaling and v5 rope_parameters.
        """

    @staticmethod
    def preset(name: str) -> Spec:
        """
        A built-in model preset (see rotary.presets()). Raises ValueError listing valid names.
        """

    @property
    def name(self) -> str: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def rotary_dim(self) -> int:
        """Number of leading channels rotated (channels beyond pass through)."""

    @property
    def base(self) -> float: ...

    @property
    def pairing(self) -> str:
        """"half" (GPT-NeoX/HF rotate_half) or "interleaved" (GPT-J/Meta)."""

    @property
    def rope_type(self) -> str: ...

    @property
    def max_position_embeddings(self) -> int: ...

    @property
    def partial_rotary_factor(self) -> float: ...

    @property
    def factor(self) -> float | None: ...

    @property
    def original_max_position_embeddings(self) -> int: ...

    @property
    def beta_fast(self) -> float: ...

    @property
    def beta_slow(self) -> float: ...

    @property
    def mscale(self) -> float | None: ...

    @property
    def mscale_all_dim(self) -> float | None: ...

    @property
    def truncate(self) -> bool: ...

    @property
    def short_factor(self) -> list[float]: ...

    @property
    def long_factor(self) -> list[float]: ...

    @property
    def low_freq_factor(self) -> float: ...

    @property
    def high_freq_factor(self) -> float: ...

    @property
    def alpha(self) -> float | None:
        """
        dynamic: vLLM/Hunyuan NTK-alpha (a fixed base * alpha^(R/(R-2))); None = HF's dynamic NTK.
        """

    @property
    def mixed_b(self) -> float | None:
        """ntk: vLLM's mixed NTK exponent; None = fixed NTK."""

    @property
    def mrope_section(self) -> list[int]:
        """M-RoPE (t, h, w) sections in frequency pairs; empty when off."""

    @property
    def mrope_interleaved(self) -> bool: ...

    @property
    def length_dependent(self) -> bool:
        """
        True for dynamic (without alpha) and longrope, whose frequencies depend on the sequence length.
        """

    @property
    def attention_factor(self) -> float:
        """
        The factor multiplying cos and sin (HF attention_scaling); 1.0 for most types.
        """

    @property
    def table_positions(self) -> int:
        """
        Positions currently held by this spec's cached cos/sin table (0 before first use).
        """

    def inv_freq(self, seq_len: int | None = None) -> Annotated[NDArray[numpy.float64], dict(shape=(None,))]:
        """
        theta_i for i < rotary_dim/2 as float64 numpy array, exactly as HF's rope init function computes them (but in double). seq_len matters only for dynamic and longrope.
        """

    def frequencies(self, seq_len: int | None = None) -> tuple[Annotated[NDArray[numpy.float64], dict(shape=(None,))], float]:
        """(inv_freq, attention_factor) for a sequence length."""

    def to_dict(self) -> dict:
        """All fields as a dict; Spec(**spec.to_dict()) rebuilds an equal Spec."""

    def replace(self, **kwargs) -> Spec:
        """
        A copy with some fields changed, e.g. spec.replace(pairing="interleaved"). replace(mrope_section=None) also drops mrope_interleaved.
        """

    def __eq__(self, arg: object, /) -> object: ...

    def __hash__(self) -> int: ...

    def __repr__(self) -> str: ...

    def __reduce__(self) -> tuple: ...

def presets() -> list[str]:
    """Names of the built-in model presets."""

def preset_description(name: str) -> str:
    """One-line description of a preset."""

def preset_config_json(name: str) -> str:
    """The config.json text a preset is built from."""

def default_inv_freq(base: float, rotary_dim: int) -> Annotated[NDArray[numpy.float64], dict(shape=(None,))]:
    """base^(-2i/rotary_dim) in double, no scaling."""

def grid_positions(height: int, width: int) -> Annotated[NDArray[numpy.int64], dict(shape=(None, None))]:
    """
    (row, col) ids [2, height*width] of a patch grid in row-major order: the [2, T] positions of one image.
    """

def cp_positions(rank: int, cp_size: int, local_len: int, offset: int = 0) -> Annotated[NDArray[numpy.int64], dict(shape=(None,))]:
    """
    Global positions [local_len] of a context-parallel shard (TransformerEngine dual-chunk: rank r holds chunks r and 2*cp_size-1-r of the sequence), plus offset.
    """

def cp_positions_packed(rank: int, cp_size: int, cu_seqlens: Sequence[int]) -> Annotated[NDArray[numpy.int64], dict(shape=(None,))]:
    """
    Positions of a packed (thd) shard from the GLOBAL cu_seqlens (each length divisible by 2*cp_size).
    """

def cp_local_cu_seqlens(rank: int, cp_size: int, cu_seqlens: Sequence[int]) -> Annotated[NDArray[numpy.int64], dict(shape=(None,))]:
    """The shard's cu_seqlens: global cu_seqlens / cp_size."""
