"""rotary's PyTorch operators (torch.ops.rotary.*): schemas, CPU/CUDA kernels, fake kernels, autograd and vmap rules.

Operators (schemas in OPS below; every one is pt2-compliant, traced by torch.compile and torch.export):

  apply(x, positions, offset, spec, layout, pairing, inverse, seq_len, threads) -> Tensor
  apply_(Tensor(a!) x, ...) -> ()                                    in place
  apply_qk(q, k, positions, offset, spec, ...) -> (Tensor, Tensor)    q and k in one kernel call (GQA)
  apply_qk_(Tensor(a!) q, Tensor(b!) k, ...) -> ()
  apply_cos_sin(x, cos, sin, positions, offset, layout, pairing, inverse, threads) -> Tensor
  apply_cos_sin_ / apply_qk_cos_sin / apply_qk_cos_sin_                caller cos/sin tables, ONNX semantics:
        cos/sin [max_pos, R/2] indexed by positions (or offset + token index), or [B, S, R/2] ([T, R/2]) per token
  cos_sin(positions, spec, seq_len) -> (Tensor, Tensor)               rotary's exact f32 rows, positions.shape + (R/2,)

Argument encoding (tensors and plain scalars/strings only, so graphs and exported programs are self-contained):
  spec      a Spec's key: canonical JSON of the Spec.to_dict() fields that differ from Spec(head_dim)'s, name left
            out (spec_key(spec), e.g. '{"base":500000.0,"head_dim":128}'); any process rebuilds the Spec from it,
            so an exported program needs nothing else. The first Spec seen with a key lends its
            cached cos/sin table to every later call with that key.
  positions None (then token s sits at offset + s), or an integer tensor ([S], [B, S], [T] for thd, M-RoPE
            [3, B, S] / [3, T]) or a float tensor (fractional positions), on any device; never read on the host
            for device tensors. With positions given, offset must be 0 (ValueError otherwise).
  pairing   "" = the spec's own (spec ops); "half" / "interleaved".
  threads   0 = torch.get_num_threads() (the process's affinity mask caps it further in the engine).

Registration style (follow it when adding an operator, e.g. torch.ops.rotary.prologue):
  * Operators are defined on the one `torch.library.Library("rotary", "DEF")` of this module with `_define()`:
    direct define/impl, not `torch.library.custom_op`. Measured for a decode-sized in-place call (docs/performance.md,
    "PyTorch operators"): custom_op's Python ADInplaceOrView and autograd layers cost several times the direct
    registration's dispatch.
  * A kernel per device key: "CPU" (rotary's kernels through _rotary._torch_apply: tensors read through torch's
    DLPack C exchange table or field by field, never through __dlpack__()) and "CUDA" (rotary's CUDA backend on the
    current stream when the extension has it, else the torch composite of rotary._torch_composite), plus a fake
    kernel (torch.library.register_fake).
  * Functional operators: torch.library.register_autograd(backward, setup_context=...), the backward built from the
    operators themselves (differentiable again); positions are saved with save_for_backward (version-checked).
    Under torch.func transforms the same backward and setup_context are recorded by a single-level autograd
    Function (rotary/_torch_autograd.py), so a new operator's formula works there with no extra code.
  * In-place operators (name ending in "_", mutated arguments annotated `(a!)`, returning ()): their kernels refuse
    inference tensors outside inference mode (check_writable; the dispatcher does not) and bump
    the mutated tensors' version counters (torch._C._increment_version); their Autograd kernel (_inplace_autograd) redispatches when no
    gradient is needed and otherwise runs the functional operator and copy_ so that torch records the op (and
    refuses a leaf that requires grad, with torch's own message). Under torch.func transforms their front-mode kernel
    (rotary/_torch_func.py) refuses a tensor captured by the transformed function, as torch does for its in-place ops.
  * torch.library.register_vmap for batching (merged into the batch axis where possible, else one call per item).
"""
from __future__ import annotations

import json
import math
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

from . import _rotary as _native
from . import _torch_composite as _composite
from ._torch_checks import kernel_positions as _positions_for_kernel, readable as _readable, threads_error
from ._torch_checks import unread_error as _unread
from ._torch_composite import check_writable, offset_with_ids_error
from ._rotary import Spec

LIB = torch.library.Library("rotary", "DEF")  # noqa: TOR901 - the namespace's one definition library
_TAGS = (torch.Tag.pt2_compliant_tag,)

# ----------------------------------------------------------------------------------------------- spec keys

_KEY_BY_ID: Dict[int, Tuple[Spec, str]] = {}  # id(Spec) -> (the Spec, kept alive so the id stays its own; key)
_SPEC_BY_KEY: Dict[str, Spec] = {}
_MAX_IDS = 4096
_DEFAULTS: Dict[int, dict] = {}  # head_dim -> Spec(head_dim).to_dict()


def spec_key(spec: Spec) -> str:
    """The operators' encoding of a Spec: compact canonical JSON of its non-default fields (name left out)."""
    return key_of(spec, "rotary.spec_key")


def key_of(spec: Spec, where: str) -> str:
    """spec_key(spec), a spec that is no Spec refused in the words of the entry point `where` (rotary.torch's
    functions: theirs)."""
    hit = _KEY_BY_ID.get(id(spec))
    if hit is not None:
        return hit[1]
    if not isinstance(spec, Spec):
        raise TypeError(f"[{where}] spec must be a rotary.Spec, got {type(spec).__name__}")
    d = spec.to_dict()
    d.pop("name", None)
    head_dim = d["head_dim"]
    defaults = _DEFAULTS.get(head_dim)
    if defaults is None:
        defaults = _DEFAULTS[head_dim] = Spec(head_dim).to_dict()
    fields = {k: v for k, v in d.items() if k == "head_dim" or defaults.get(k) != v}
    key = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    _SPEC_BY_KEY.setdefault(key, spec)
    if len(_KEY_BY_ID) >= _MAX_IDS:
        _KEY_BY_ID.clear()
    _KEY_BY_ID[id(spec)] = (spec, key)
    return key


def spec_from_key(key: str) -> Spec:
    """The Spec of a key (the first Spec registered with it, or rebuilt from the JSON)."""
    return spec_of_key(key, "rotary.spec_from_key")


def spec_of_key(key: str, where: str) -> Spec:
    """spec_from_key(key), a string that is no spec key refused in the words of the entry point `where` (the
    operators: the function of rotary.torch they serve, rotary_apply or rotary_cos_sin)."""
    spec = _SPEC_BY_KEY.get(key)
    if spec is None:
        try:
            fields = json.loads(key)
            spec = Spec(**fields)
        except (ValueError, TypeError) as e:
            if isinstance(e, ValueError) and str(e).startswith("[rotary"):
                raise
            raise ValueError(f"[{where}] spec must be a key made by rotary.torch.spec_key, got {key[:60]!r}") from None
        _SPEC_BY_KEY[key] = spec
    return spec


# ----------------------------------------------------------------------------------------------- kernels (CPU)

_COPY_Q, _COPY_K, _COPY_POS, _COPY_COS, _COPY_SIN = 1, 2, 4, 8, 16  # the kernel's copy requests (_torch_checks)


_bump = torch._C._increment_version
_DEFAULT_VIEW = getattr(getattr(torch._C._autograd, "CreationMeta", None), "DEFAULT", None)


def refused_in_place(t: torch.Tensor, grad: bool) -> bool:
    """Whether torch refuses an in-place write into t: an inference tensor outside inference mode, or (grad: the
    written value requires grad, grad mode on) a leaf that requires grad, a view of one, or a view torch cannot
    rebase (made in no-grad mode, one of several outputs, ...). Writes of several tensors check them all first."""
    if t.is_inference() and not torch.is_inference_mode_enabled():
        return True
    if not grad:
        return False
    if t.is_leaf:
        return t.requires_grad
    if not t._is_view():
        return False
    if t.requires_grad and t._base.is_leaf:
        return True
    try:
        return torch._C._autograd._get_creation_meta(t) != _DEFAULT_VIEW
    except (AttributeError, RuntimeError):  # another torch, or a view without autograd metadata
        return False


def write_all(dsts, srcs) -> None:
    """dst.copy_(src) for each pair, a write torch refuses first: its error then leaves every tensor unwritten."""
    grad = torch.is_grad_enabled() and any(s.requires_grad for s in srcs)
    order = sorted(range(len(dsts)), key=lambda i: not refused_in_place(dsts[i], grad))
    for i in order:
        if dsts[i]._is_view():  # a view of a base that an earlier write made require grad: refreshed, as torch does
            dsts[i].grad_fn  # noqa: B018  (when a view is read; else its copy_ is refused as into a leaf)
        dsts[i].copy_(srcs[i])


def _threads(threads: int) -> int:
    if threads < 0:
        raise threads_error(threads)
    return threads if threads > 0 else torch.get_num_threads()


def _run(spec: Optional[Spec], cos, sin, q, q_out, k, k_out, positions, offset, layout, pairing, inverse,
         seq_len, threads) -> None:
    """One call of the CPU kernel; inputs it cannot read as they are get materialised once. In place (q_out None):
    the version counters of q (and k) are bumped, as torch's own in-place kernels do."""
    if offset and positions is not None:
        raise offset_with_ids_error(offset)
    th = _threads(threads)
    if q_out is None:
        _bump((q,) if k is None else (q, k))
    positions = _positions_for_kernel(positions)
    status = _native._torch_apply(spec, cos, sin, q, q_out, k, k_out, positions, offset, layout, pairing, inverse,
                                  seq_len, th, False, 0)
    if status:
        if status & _COPY_Q:
            q = _readable(q)
        if status & _COPY_K:
            k = _readable(k)
        if status & _COPY_POS:
            positions = _readable(positions)
        if status & _COPY_COS:
            cos = _readable(cos)
        if status & _COPY_SIN:
            sin = _readable(sin)
        status = _native._torch_apply(spec, cos, sin, q, q_out, k, k_out, positions, offset, layout, pairing,
                                      inverse, seq_len, th, False, 0)
        if status:
            raise _unread(status)


def _apply_cpu(x, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply"](x, positions, offset, spec, layout, pairing, inverse, seq_len, threads)
    out = torch.empty_like(x)
    _run(spec_of_key(spec, "rotary_apply"), None, None, x, out, None, None, positions, offset, layout, pairing, inverse,
         seq_len, threads)
    return out


def _apply__cpu(x, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    if x.is_inference():
        check_writable(x)
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply_"](x, positions, offset, spec, layout, pairing, inverse, seq_len, threads)
    _run(spec_of_key(spec, "rotary_apply"), None, None, x, None, None, None, positions, offset, layout, pairing, inverse,
         seq_len, threads)


def _apply_qk_cpu(q, k, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply_qk"](q, k, positions, offset, spec, layout, pairing, inverse, seq_len, threads)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _run(spec_of_key(spec, "rotary_apply"), None, None, q, q_out, k, k_out, positions, offset, layout, pairing, inverse,
         seq_len, threads)
    return q_out, k_out


def _apply_qk__cpu(q, k, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    if q.is_inference() or k.is_inference():
        check_writable(q, k, "q")
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply_qk_"](q, k, positions, offset, spec, layout, pairing, inverse, seq_len, threads)
    _run(spec_of_key(spec, "rotary_apply"), None, None, q, None, k, None, positions, offset, layout, pairing, inverse,
         seq_len, threads)


def _f64_tables(cos, sin, *xs) -> bool:
    """float64 tensors with a float64 table: the kernels read caller tables in float32, so these calls are validated
    by the kernel (its named errors, into scratch outputs) and computed by the composite in float64, as on devices
    (the values as given; torch.autograd.gradcheck holds for the tables too)."""
    return (cos.dtype == torch.float64 or sin.dtype == torch.float64) and all(x.dtype == torch.float64 for x in xs)


def _apply_cos_sin_cpu(x, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    f64 = _f64_tables(cos, sin, x)
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply_cos_sin"](x, cos, sin, positions, offset, layout, pairing, inverse, threads)
    out = torch.empty_like(x)
    _run(None, cos, sin, x, out, None, None, positions, offset, layout, pairing, inverse, None, threads)
    if f64:
        return _composite.COMPOSITE["apply_cos_sin"](x, cos, sin, positions, offset, layout, pairing, inverse, threads)
    return out


def _apply_cos_sin__cpu(x, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    if x.is_inference():
        check_writable(x)
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply_cos_sin_"](x, cos, sin, positions, offset, layout, pairing, inverse, threads)
    if _f64_tables(cos, sin, x):
        y = _apply_cos_sin_cpu(x, cos, sin, positions, offset, layout, pairing, inverse, threads)
        # the kernel in place: its in-place checks (broadcast views, aliasing) before anything is written
        _run(None, cos, sin, x, None, None, None, positions, offset, layout, pairing, inverse, None, threads)
        x.copy_(y)
        return
    _run(None, cos, sin, x, None, None, None, positions, offset, layout, pairing, inverse, None, threads)


def _apply_qk_cos_sin_cpu(q, k, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply_qk_cos_sin"](q, k, cos, sin, positions, offset, layout, pairing, inverse, threads)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _run(None, cos, sin, q, q_out, k, k_out, positions, offset, layout, pairing, inverse, None, threads)
    if _f64_tables(cos, sin, q, k):
        return _composite.COMPOSITE["apply_qk_cos_sin"](q, k, cos, sin, positions, offset, layout, pairing, inverse, threads)
    return q_out, k_out


def _apply_qk_cos_sin__cpu(q, k, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    if q.is_inference() or k.is_inference():
        check_writable(q, k, "q")
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["apply_qk_cos_sin_"](q, k, cos, sin, positions, offset, layout, pairing, inverse, threads)
    if _f64_tables(cos, sin, q, k):
        qo, ko = _apply_qk_cos_sin_cpu(q, k, cos, sin, positions, offset, layout, pairing, inverse, threads)
        _run(None, cos, sin, q, None, k, None, positions, offset, layout, pairing, inverse, None, threads)  # its checks
        q.copy_(qo)
        k.copy_(ko)
        return
    _run(None, cos, sin, q, None, k, None, positions, offset, layout, pairing, inverse, None, threads)


def _rotary_half(spec: Spec) -> int:
    return spec.rotary_dim // 2


def _cos_sin_cpu(positions, spec, seq_len=None):
    if _composite.FORCED[0]:
        return _composite.COMPOSITE["cos_sin"](positions, spec, seq_len)
    s = spec_of_key(spec, "rotary_cos_sin")
    if s.mrope_section:
        return _mrope_cos_sin_cpu(s, positions, seq_len)
    h = _rotary_half(s)
    p = _positions_for_kernel(positions, "rotary_cos_sin", flat=True)
    flat = p.reshape(-1)
    if not flat.is_contiguous() or flat.is_neg():
        flat = _readable(flat)
    c = torch.empty((flat.shape[0], h), dtype=torch.float32)
    sn = torch.empty((flat.shape[0], h), dtype=torch.float32)
    if flat.shape[0]:
        _native._torch_cos_sin(s, flat, c, sn, seq_len)
    return c.reshape(tuple(positions.shape) + (h,)), sn.reshape(tuple(positions.shape) + (h,))


_MROPE_PARTS: Dict[str, Tuple[str, torch.Tensor]] = {}


def mrope_parts(spec: Spec) -> Tuple[str, torch.Tensor]:
    """(key of the spec without its M-RoPE sections, axis of each frequency as an int64 tensor)."""
    key = spec_key(spec)
    hit = _MROPE_PARTS.get(key)
    if hit is None:
        base = spec_key(spec.replace(mrope_section=None, mrope_interleaved=False))
        axis = torch.as_tensor(list(_native._mrope_frequencies(spec, None)[1]), dtype=torch.int64)
        hit = _MROPE_PARTS[key] = (base, axis)
    return hit


def _mrope_cos_sin_cpu(spec: Spec, positions: torch.Tensor, seq_len):
    """M-RoPE rows: positions [3, ...] -> rows for positions.shape[1:], frequency j from axis axis_of_freq[j]."""
    if positions.dim() < 1 or positions.shape[0] != 3:
        raise ValueError(f"[rotary_cos_sin] M-RoPE positions must be [3, ...] (t, h, w), got shape {tuple(positions.shape)}")
    base, axis = mrope_parts(spec)
    c, s = _cos_sin_cpu(positions, base, seq_len)  # [3, ..., h]
    idx = axis.expand(c.shape[1:]).unsqueeze(0)
    return c.gather(0, idx).squeeze(0), s.gather(0, idx).squeeze(0)


# ----------------------------------------------------------------------------------------------- fake kernels

def check_fake_devices(where: str, **named: Any) -> None:
    """The fake kernels' device rule. They run for FakeTensors (torch.compile, export) and for the Meta key, which the
    dispatcher picks when ANY argument is on 'meta': a real tensor of another device beside a meta one would get
    uninitialised memory back, or a mutation that never happens, so that call raises (torch's own ops refuse
    mixed devices likewise)."""
    tensors = [(n, t) for n, t in named.items() if isinstance(t, torch.Tensor)]
    meta = [n for n, t in tensors if t.device.type == "meta"]
    if not meta:
        return
    from torch._subclasses.fake_tensor import is_fake

    for n, t in tensors:
        if t.device.type != "meta" and not is_fake(t):
            raise RuntimeError(f"[{where}] {meta[0]} is on device 'meta' but {n} is on '{t.device}': the tensors of a "
                               "call must be on one device (all on 'meta' only computes shapes)")


def _fake_apply(x, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    check_fake_devices("rotary_apply", x=x, positions=positions)
    return torch.empty_like(x)


def _fake_apply_(x, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    check_fake_devices("rotary_apply", x=x, positions=positions)


def _fake_apply_qk(q, k, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    check_fake_devices("rotary_apply", q=q, k=k, positions=positions)
    return torch.empty_like(q), torch.empty_like(k)


def _fake_apply_qk_(q, k, positions, offset, spec, layout="bshd", pairing="", inverse=False, seq_len=None, threads=0):
    check_fake_devices("rotary_apply", q=q, k=k, positions=positions)


def _fake_apply_cos_sin(x, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    check_fake_devices("rotary_apply", x=x, cos=cos, sin=sin, positions=positions)
    return torch.empty_like(x)


def _fake_apply_cos_sin_(x, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    check_fake_devices("rotary_apply", x=x, cos=cos, sin=sin, positions=positions)


def _fake_apply_qk_cos_sin(q, k, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False, threads=0):
    check_fake_devices("rotary_apply", q=q, k=k, cos=cos, sin=sin, positions=positions)
    return torch.empty_like(q), torch.empty_like(k)


def _fake_apply_qk_cos_sin_(q, k, cos, sin, positions=None, offset=0, layout="bshd", pairing="half", inverse=False,
                            threads=0):
    check_fake_devices("rotary_apply", q=q, k=k, cos=cos, sin=sin, positions=positions)


def _fake_cos_sin(positions, spec, seq_len=None):
    s = spec_of_key(spec, "rotary_cos_sin")
    h = _rotary_half(s)
    shape = tuple(positions.shape[1:] if s.mrope_section else positions.shape) + (h,)
    return (positions.new_empty(shape, dtype=torch.float32), positions.new_empty(shape, dtype=torch.float32))


# ----------------------------------------------------------------------------------------------- definitions

_SPEC_ARGS = "SymInt offset, str spec, str layout=\"bshd\", str pairing=\"\", bool inverse=False, SymInt? seq_len=None, int threads=0"
_TABLE_ARGS = "Tensor? positions, SymInt offset=0, str layout=\"bshd\", str pairing=\"half\", bool inverse=False, int threads=0"

OPS = {
    "apply": f"apply(Tensor x, Tensor? positions, {_SPEC_ARGS}) -> Tensor",
    "apply_": f"apply_(Tensor(a!) x, Tensor? positions, {_SPEC_ARGS}) -> ()",
    "apply_qk": f"apply_qk(Tensor q, Tensor k, Tensor? positions, {_SPEC_ARGS}) -> (Tensor, Tensor)",
    "apply_qk_": f"apply_qk_(Tensor(a!) q, Tensor(b!) k, Tensor? positions, {_SPEC_ARGS}) -> ()",
    "apply_cos_sin": f"apply_cos_sin(Tensor x, Tensor cos, Tensor sin, {_TABLE_ARGS}) -> Tensor",
    "apply_cos_sin_": f"apply_cos_sin_(Tensor(a!) x, Tensor cos, Tensor sin, {_TABLE_ARGS}) -> ()",
    "apply_qk_cos_sin": f"apply_qk_cos_sin(Tensor q, Tensor k, Tensor cos, Tensor sin, {_TABLE_ARGS}) -> (Tensor, Tensor)",
    "apply_qk_cos_sin_": (f"apply_qk_cos_sin_(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin, {_TABLE_ARGS})"
                          " -> ()"),
    "cos_sin": "cos_sin(Tensor positions, str spec, SymInt? seq_len=None) -> (Tensor, Tensor)",
}


def full_args(name: str, args: tuple) -> tuple:
    """args as the dispatcher passes them to Python kernels (trailing defaults dropped), with the defaults restored."""
    schema = getattr(torch.ops.rotary, name).default._schema
    if len(args) == len(schema.arguments):
        return args
    return tuple(args) + tuple(a.default_value for a in schema.arguments[len(args):])


# Backend kernels by the dispatch key set a call reaches below autograd; plain CPU / CUDA tensors outside any mode
# reach exactly these, so the Autograd kernels call them without a second trip through the dispatcher.
KERNELS: Dict[str, Dict[int, Callable]] = {}  # name -> {DispatchKeySet.raw_repr(): kernel}
_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU).raw_repr()
_CUDA_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA).raw_repr()


def _define(name: str, schema: str, *, cpu: Callable, cuda: Callable, fake: Callable) -> None:
    """Defines torch.ops.rotary.<name> with its CPU and CUDA kernels and its fake kernel (the registration style)."""
    KERNELS[name] = {_CPU_KEYS: cpu, _CUDA_KEYS: cuda}
    LIB.define(schema, tags=_TAGS)
    LIB.impl(name, cpu, "CPU")
    LIB.impl(name, cuda, "CUDA")
    torch.library.register_fake(f"rotary::{name}", fake, lib=LIB)
    # Negative-bit views reach the kernels as they are (torch's fallback, which materialises them, expects an
    # in-place op to return its argument): inputs are resolved there, in-place rotation of the raw memory is right
    # as it stands (the rotation is linear: R(-m) = -R(m)).
    LIB.impl(name, torch.library.fallthrough_kernel, "Negative")
    LIB.impl(name, torch.library.fallthrough_kernel, "Conjugate")


def _backend_kernel(name: str) -> Optional[Callable]:
    """The kernel of operator `name` for rotary's CUDA backend (on the current stream), or None (cos_sin)."""
    if name == "cos_sin":
        return None
    n = 2 if "_qk" in name else 1
    tables = "cos_sin" in name
    inplace = name.endswith("_")

    def kernel(*args):
        args = full_args(name, args)
        ts = args[:n]
        if tables:
            cos, sin = args[n], args[n + 1]
            positions, offset, layout, pairing, inverse, threads = args[n + 2:]
            spec, seq_len = None, None
        else:
            cos = sin = None
            positions, offset, key, layout, pairing, inverse, seq_len, threads = args[n:]
            spec = spec_of_key(key, "rotary_apply")
        device = ts[0].device
        if offset and positions is not None:
            raise offset_with_ids_error(offset)
        if positions is not None and positions.device != device:
            positions = positions.to(device, non_blocking=True)
        outs = [None] * n if inplace else [torch.empty_like(t) for t in ts]
        q, k = ts[0], ts[1] if n == 2 else None
        if threads < 0:
            raise threads_error(threads)
        if inplace:
            check_writable(q, k, "q" if n == 2 else "x")
            _bump(ts)
        stream = torch.cuda.current_stream(device).cuda_stream
        for attempt in range(2):
            status = _native._torch_apply(spec, cos, sin, q, outs[0], k, outs[1] if n == 2 else None, positions,
                                          offset, layout, pairing, inverse, seq_len, threads, True, stream)
            if not status:
                break
            if attempt:
                raise _unread(status)
            q = _readable(q) if status & _COPY_Q else q
            k = _readable(k) if status & _COPY_K else k
            positions = _readable(positions) if status & _COPY_POS else positions
            cos = _readable(cos) if status & _COPY_COS else cos
            sin = _readable(sin) if status & _COPY_SIN else sin
        if inplace:
            return None
        return tuple(outs) if n == 2 else outs[0]

    return kernel


for _name, _schema in OPS.items():
    _define(_name, _schema, cpu=globals()[f"_{_name}_cpu"], cuda=_composite.cuda_kernel(_name, _backend_kernel(_name)),
            fake=globals()[f"_fake_{_name}"])

from . import _torch_autograd  # noqa: E402,F401  (autograd and vmap registrations)
from . import _torch_func  # noqa: E402,F401  (in-place operators under torch.func transforms)
