#!/usr/bin/env python3
"""Regenerates docs/errors.md from the real messages of the hostile batteries (C++, C, CLI, Python).

    python3 scripts/gen_errors_doc.py [BUILD_DIR]     # default build-hostile; needs the hostile tests built

Each battery appends "boundary<TAB>case<TAB>kind<TAB>message" rows to $ROTARY_ERRORS_DOC; the C++ and C
batteries then check in every test run that each of their messages appears verbatim in docs/errors.md.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.environ.get("ROTARY_PYTHON", os.path.expanduser("~/.cache/rotary/venv/bin/python"))

INTRO = """# Errors

Every failure in rotary is a `rotary::Error` with a kind and a message of the form
`[where] what must hold, got value`: the bracket names the entry point or layer (`rotary_apply` for
validation of an apply call, `rotary_spec` for a Spec, `rotary_config` for config.json, `npy` for .npy files,
`rotary_table` for the cos/sin cache, `rotary_<function>` for C API argument checks), then the argument or
field, what was expected, and the offending value.

| Kind (C++ `Error::Kind`) | C status | Python exception | CLI |
|---|---|---|---|
| `kInvalidArgument`: a value, shape, stride, dtype or pointer is wrong | `ROTARY_ERROR_INVALID_ARGUMENT` (1) | `ValueError` (`TypeError` for a wrong dtype) | exit 1 |
| `kOutOfRange`: a position or size beyond a documented limit | `ROTARY_ERROR_OUT_OF_RANGE` (2) | `ValueError` | exit 1 |
| `kUnsupported`: valid but not built (CUDA) | `ROTARY_ERROR_UNSUPPORTED` (3) | `NotImplementedError` | exit 1 |
| `kIo`: unreadable or malformed file | `ROTARY_ERROR_IO` (4) | `OSError` | exit 1 |
| `kInternal`: a bug or out of memory | `ROTARY_ERROR_INTERNAL` (5) | `RuntimeError` | exit 1 |

## Guarantees

- **Validation before any write.** Every check below runs before a single output element is written, so a
  failing in-place call leaves its tensors bit-identical (asserted by every battery).
- **Never identity, never out of bounds.** A position at or past a caller-supplied cos/sin table (`apply_cos_sin`,
  `rotary_apply_cos_sin`, ONNX) is `kOutOfRange`. Growable tables (`apply_table`, `Rope` in `CosSinMode::kTable`)
  grow up to `TableOptions::max_positions` (default 2^22 rows) and fail with `kOutOfRange` past it; `Rope` in
  `CosSinMode::kAuto` computes cos/sin on the fly beyond the table (exact, the same values).
- **Limits.** Positions are integers in [0, 2^31) (fractional positions: finite, in [0, 2^31); with
  `ggml_frequencies`, whose positions may be negative as in ggml, in (−2^31, 2^31)); seq_len is at most
  2^31; the helpers that produce positions (`cp_positions`, `cp_positions_packed`, `grid_positions`) refuse to
  produce any at or past 2^31; `head_dim` of a Spec (and ggml `n_dims`, vision and weight-permutation
  `head_dim`) is in [1, 65536]; tensor shapes, strides and byte sizes must fit in int64. Every sum or product
  of caller numbers is checked: an overflow is an error naming the values, never a wrapped result.
- **Specs that validate work.** `Spec::validate` evaluates the frequencies and refuses a spec whose
  `inv_freq` or attention factor would be non-finite or beyond the f32 range, naming the field that causes it
  (see docs/accuracy.md); a spec that validates never fails later for numerical reasons.
- **Hostile sizes.** config.json may nest arrays/objects at most 64 levels deep (checked before parsing);
  a .npy header may be at most 1 MiB, and `npy_load` reads and checks the header before the payload, then
  reads the payload straight into the array (a junk file or `/dev/zero` costs a few bytes). A message quotes
  user input (a value, a name, a header) cut after a few dozen characters, with the full size appended
  (`"aaaa..." (1048576 bytes)`), so messages stay short whatever the input.
- **Files written whole or not at all.** Every file rotary writes (`npy_save`, `write_file_atomically`, and so
  every CLI output: `apply --output`, `export --out/--cos/--sin`, `report`'s report.json and CSVs, and the
  report's PNGs drawn by `python -m rotary.report`) goes to a temporary file in the target's folder, is fsynced
  and renamed over the target: on any error (full disk, file-size limit) the old file is intact and no
  temporary file is left, also when the output is the input.
- **Aliasing.** An output is either exactly its own input (same data pointer and strides: in place) or outside
  that input's memory range altogether (q_out and q: no interleaving, even element-disjoint; docs/layouts.md).
  It shares no element with any other input of the call or with the other output: q, k, position ids,
  batch_offsets, cu_seqlens, seq_offsets, caller cos/sin (ONNX: position_ids, cos_cache, sin_cache;
  `Rope::cos_sin`: the positions and the other output). That test is exact per element (those inputs in the
  gaps of a strided output are fine) and the message names both arguments. An output never maps two elements to one address (zero or overlapping
  strides). Negative strides are rejected (numpy views with them, index arrays included, are copied by the
  Python layer when they are inputs).
- **Empty calls** (a zero-sized dimension) are no-ops, validated like any other call (in C++, C and Python
  alike); their positions are checked for shape only.
- **Mixed dtypes** that are allowed: caller cos/sin may have a different floating dtype from q/k (values are
  used in f32); positions may be i32 or i64 (f32/f64 = fractional, on-the-fly sources only). q and k, q and
  q_out, k and k_out, cos and sin must share their dtype, except that q_out / k_out may be fp8 (f8e4m3, f8e5m2)
  with a per-tensor scale (`ApplyArgs::q_out_scale` / `k_out_scale`, docs/prologue.md).
- The C API never aborts or throws; it returns the status and keeps the message in `rotary_last_error()`
  (thread-local). Failed `*_create` / `*_from_*` calls do not return a handle.

## Messages

The tables below are generated from the real messages of the hostile batteries
(`tests/hostile/cpp_hostile_test.cc`, `tests/c_api/hostile_test.cc`, `tests/cli/hostile_test.cc`,
`python/tests/test_hostile.py`) by `python3 scripts/gen_errors_doc.py`; the C++
and C batteries fail when a message of theirs is missing here. CLI paths are shown relative to the test's
temporary folder.
"""

ORDER = ["C++", "C", "CLI", "Python"]
TITLES = {
    "C++": "C++ API (`Rope::apply`, `apply_table`, `apply_frequencies`, `apply_cos_sin`, `Spec`, `prologue`, `rerotate_cache`)",
    "C": "C API (`rotary_c.h`)",
    "CLI": "CLI (`rotary apply`, `rotary check`, `rotary export`)",
    "Python": "Python (`rotary.apply`, `apply_qk`, `onnx_rotary_embedding`, `Spec`)",
}


def esc(s):
    return s.replace("|", "\\|")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-hostile")
    fd, rows_path = tempfile.mkstemp(suffix=".tsv")
    os.close(fd)
    env = dict(os.environ, ROTARY_ERRORS_DOC=rows_path)
    for exe, flt in (("hostile_cpp_hostile_test", "HostileCpp.EveryCase*"),
                     ("hostile_cpp_limits_hostile_test", "HostileCpp.EveryCase*"),
                     ("prologue_prologue_errors_test", "HostilePrologue.EveryCase*"),
                     ("c_api_hostile_test", "HostileC.EveryCase*"),
                     ("cli_hostile_test", "*"), ("cli_check_hostile_test", "CheckCli.Hostile*")):
        subprocess.run([os.path.join(build, "tests", exe), f"--gtest_filter={flt}"], env=env,
                       stdout=subprocess.DEVNULL)
    if os.path.exists(VENV_PY):
        subprocess.run([VENV_PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_hostile.py", "-k", "hostile_case"],
                       cwd=os.path.join(ROOT, "python", "tests"), env=env, stdout=subprocess.DEVNULL)
    rows = {}
    seen = set()
    with open(rows_path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 4 or tuple(parts) in seen:
                continue
            # The CLI battery's temporary directory carries the test's pid (7 digits): masked, so runs agree.
            parts[3] = re.sub(r"rotary_check_cli_\d{7}_", "rotary_check_cli_NNNNNNN_", parts[3])
            if tuple(parts) in seen:
                continue
            seen.add(tuple(parts))
            rows.setdefault(parts[0], []).append(parts[1:])
    os.unlink(rows_path)
    out = [INTRO]
    for b in ORDER:
        if b not in rows:
            continue
        out.append(f"\n### {TITLES[b]}\n\n| Condition | {'Exit' if b == 'CLI' else 'Kind'} | Message |\n|---|---|---|\n")
        for name, kind, msg in rows[b]:
            out.append(f"| {esc(name)} | {esc(kind)} | `{esc(msg)}` |\n")
    with open(os.path.join(ROOT, "docs", "errors.md"), "w") as f:
        f.write("".join(out))
    print("docs/errors.md:", {b: len(v) for b, v in rows.items()})


if __name__ == "__main__":
    main()
