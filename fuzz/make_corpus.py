#!/usr/bin/env python3
"""Regenerates the seed corpora in fuzz/corpus/ (npy arrays via numpy, encoded apply calls, preset configs).

    python fuzz/make_corpus.py [path/to/rotary-cli]

The apply encoding mirrors rotary::fuzz::apply_target (fuzz/fuzz_targets.h): three flag bytes, the
shape bytes B, S, H, D, Hk, then per-tensor bytes. Missing trailing bytes read as 0.
"""
import io
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def npy_seeds(out):
    def save(name, a, version=None):
        b = io.BytesIO()
        np.lib.format.write_array(b, a, version=version)
        open(os.path.join(out, name), "wb").write(b.getvalue())

    rng = np.random.default_rng(0)
    save("f32_bshd.npy", rng.standard_normal((1, 2, 2, 4)).astype(np.float32))
    save("f16_thd.npy", rng.standard_normal((3, 1, 4)).astype(np.float16))
    save("f64_vec.npy", np.arange(5, dtype=np.float64))
    save("i64_positions.npy", np.arange(6, dtype=np.int64).reshape(2, 3))
    save("i32_cu.npy", np.array([0, 2, 5], dtype=np.int32))
    save("u2_bf16_bits.npy", np.array([0x3F80, 0xBF80], dtype=np.uint16))
    save("scalar.npy", np.array(1.5, dtype=np.float32))
    save("empty.npy", np.zeros((0, 3), dtype=np.float32))
    save("v2_header.npy", np.arange(3, dtype=np.int32), version=(2, 0))
    save("fortran.npy", np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    save("big_endian.npy", np.arange(3, dtype=">f4"))
    good = open(os.path.join(out, "f32_bshd.npy"), "rb").read()
    open(os.path.join(out, "truncated_data.npy"), "wb").write(good[:-3])
    open(os.path.join(out, "truncated_header.npy"), "wb").write(good[:20])


def flags(cos_sin=0, mode=0, q_out=0, has_k=0, k_out=0, layout=0, dtype=0, pairing=0, inverse=0, reference=0,
          pos_kind=0, hostile=0, threads2=0):
    b0 = cos_sin | (mode << 1) | (q_out << 3) | (has_k << 5) | (k_out << 6)
    b1 = layout | (dtype << 2) | ((pairing + 1) << 5)
    b2 = inverse | (reference << 1) | (pos_kind << 2) | (hostile << 4) | (threads2 << 5)
    return bytes([b0, b1, b2])


def values(n, seed):
    rng = np.random.default_rng(seed)
    return bytes(rng.integers(64, 192, n, dtype=np.uint8))


def apply_seeds(out):
    cases = {}
    # Rope, in place, f32 bshd B1 S3 H2 D8, positions offset 5.
    cases["rope_inplace_f32"] = flags() + bytes([1, 3, 2, 8, 0, 0]) + values(48, 1) + bytes([0, 5, 0]) + bytes([0, 0, 0])
    # Rope with k (GQA), bf16, interleaved, inverse, ids [B,S].
    cases["rope_qk_bf16_ids"] = (flags(has_k=1, dtype=2, pairing=1, inverse=1, pos_kind=1) + bytes([2, 2, 2, 8, 1, 0]) +
                                 values(64, 2) + values(32, 3) + bytes([0]) + bytes([0]) + bytes([1, 7, 30, 2]))
    # Packed thd, reference backend, cu_seqlens of 3 entries.
    cases["rope_thd_packed"] = (flags(layout=2, reference=1, pos_kind=2) + bytes([1, 5, 1, 6, 0, 0]) + values(30, 4) +
                                bytes([0, 2, 0, 2, 3, 0]))
    # Caller cos/sin table [40, 4], out of place.
    cases["cos_sin_table"] = (flags(cos_sin=1, q_out=2) + bytes([1, 3, 1, 8, 0, 0]) + values(24, 5) + bytes([0, 0, 0]) +
                              bytes([0x00, 40]) + values(320, 6))
    # Hostile: q_out partially aliasing q, zero/negative strides.
    cases["alias_q_out"] = flags(q_out=3, hostile=1) + bytes([1, 2, 2, 4, 0, 0]) + bytes([1, 0, 1, 0xFF]) + values(16, 7) + bytes([3])
    # Fractional f64 ids with a NaN, on the fly.
    cases["fractional_nan"] = flags(mode=2, pos_kind=1) + bytes([1, 3, 1, 4, 0, 0]) + values(12, 8) + bytes([0, 3, 4, 255, 8])
    # M-RoPE spec with [3,B,S] ids.
    cases["mrope_ids"] = (flags(pos_kind=1) + bytes([1, 2, 1, 8, 0, 0]) + values(16, 9) + bytes([0, 12]) +
                          bytes(range(6)) + bytes([8, 0, 1, 2, 1]))
    # Position 2^31 via the edge table, and the fixed-table mode.
    cases["table_mode_edge"] = flags(mode=1) + bytes([1, 1, 1, 4, 0, 0]) + values(4, 10) + bytes([0, 234, 0, 0, 0, 20])
    for name, data in cases.items():
        open(os.path.join(out, name + ".bin"), "wb").write(data)


def config_seeds(out, cli):
    listing = subprocess.run([cli, "presets"], check=True, capture_output=True, text=True).stdout
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    wanted = [n for n in names if any(k in n for k in ("llama-3.1", "qwen2-vl", "phi-3", "deepseek", "gpt-j", "gemma",
                                                       "mistral", "yarn", "gpt-neox", "qwen3"))][:10] or names[:8]
    for n in wanted:
        text = subprocess.run([cli, "presets", "--show", n], check=True, capture_output=True, text=True).stdout
        open(os.path.join(out, n + ".json"), "w").write(text)
    extra = {
        "truncated.json": '{"head_dim": 64, "rope_scaling": {"type": "yarn", "factor": ',
        "v5_longrope.json": '{"head_dim": 8, "max_position_embeddings": 64, "rope_parameters": {"rope_type": "longrope",'
                            ' "short_factor": [1, 1, 1, 1], "long_factor": [2, 2, 2, 2],'
                            ' "original_max_position_embeddings": 16}}',
        "mrope_overflow.json": '{"head_dim": 8, "rope_scaling": {"type": "mrope", "mrope_section":'
                               ' [9223372036854775807, 9223372036854775807, 2]}}',
        "huge_head_dim.json": '{"head_dim": 9223372036854775807, "partial_rotary_factor": 1.0}',
    }
    for name, text in extra.items():
        open(os.path.join(out, name), "w").write(text)


if __name__ == "__main__":
    for d in ("npy", "apply", "config"):
        os.makedirs(os.path.join(HERE, "corpus", d), exist_ok=True)
    npy_seeds(os.path.join(HERE, "corpus", "npy"))
    apply_seeds(os.path.join(HERE, "corpus", "apply"))
    if len(sys.argv) > 1:
        config_seeds(os.path.join(HERE, "corpus", "config"), sys.argv[1])
