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
        # Nesting far deeper than the 4096-byte fuzz inputs can reach by chance (the parser must refuse it
        # before building anything; rendering it in a message once overflowed the stack).
        "deep_nesting.json": '{"head_dim": ' + "[" * 2000 + "]" * 2000 + "}",
        "deep_objects.json": '{"head_dim": 8, "rope_scaling": ' + '{"a": ' * 500 + "1" + "}" * 501,
        "depth_64_ok.json": '{"head_dim": 8, "x": ' + "[" * 63 + "]" * 63 + "}",
        "huge_rope_type.json": '{"head_dim": 8, "rope_scaling": {"rope_type": "' + "y" * 3000 + '"}}',
    }
    for name, text in extra.items():
        open(os.path.join(out, name), "w").write(text)


def spec_seeds(out):
    """Encoded Spec fields (rotary::fuzz::spec_target): one byte per field picks a typical value (< 192) or an
    edge value (>= 192); optional fields consume their bytes only when their flag is set."""
    def edge(i):
        return 192 + i

    def spec(type_=0, head_dim=0, rotary_dim=0, base=0, factor=0, max_pos=0, orig=0, beta_fast=0, beta_slow=1,
             mscale=None, mscale_all_dim=None, truncate=True, attn=0, low=0, high=1, lists=None, mrope=0, prf=0,
             pairing=0, mode=0, calls=((0, 0), (3, 0), (5, 0)), head=8):
        b = [type_, head_dim, rotary_dim, base, factor, max_pos, orig, beta_fast, beta_slow]
        b.append((1 if mscale is not None else 0) | (2 if mscale_all_dim is not None else 0) | (0 if truncate else 4))
        if mscale is not None:
            b.append(mscale)
        if mscale_all_dim is not None:
            b.append(mscale_all_dim)
        b += [attn, low, high]
        if lists is None:
            b.append(0)
        else:
            b.append(lists[0])
            for v in lists[1]:
                b += [v, v]
        b += [mrope, prf, pairing, mode]
        rng = np.random.default_rng(len(b))
        for pos, seq in calls:
            b.append(pos)
            b += list(rng.integers(0, 256, 3 * head))
            b.append(seq)
        return bytes(int(v) for v in b)

    cases = {
        # typical specs of every rope type (head_dim 8 unless said)
        "default_llama_128": spec(head_dim=7, base=1, head=128, calls=((4, 0), (edge(0), edge(0)), (9, 3))),
        "linear_x4": spec(type_=1, factor=3),
        "dynamic_far": spec(type_=2, factor=2, max_pos=0, calls=((edge(0), edge(0)), (7, 4), (1, 0))),
        "yarn_deepseek_mscale": spec(type_=3, factor=7, orig=1, mscale=1, mscale_all_dim=2, head_dim=5, head=32),
        "yarn_gpt_oss_no_truncate": spec(type_=3, factor=5, orig=1, truncate=False, beta_fast=0, beta_slow=1),
        "longrope_lists": spec(type_=4, max_pos=3, orig=1, lists=(1, [2, 4, 0, 1])),
        "llama3": spec(type_=5, factor=4, orig=1, low=0, high=1),
        "proportional_partial": spec(type_=6, prf=1),
        "mrope_sections": spec(mrope=0b00010101, head_dim=7, head=128),
        "attention_1e38": spec(type_=3, factor=2, orig=1, attn=edge(0)),
        "attention_f32_max": spec(type_=3, factor=2, orig=1, attn=edge(1)),
        "head_dim_65536_on_the_fly": spec(head_dim=edge(3), head=0, calls=()),  # trailing reads: 0
        "table_only_mode": spec(mode=1, calls=((8, 0), (4, 0), (5, 0))),
        # the late failures of the reliability issue: must be refused by validate
        "yarn_base_1": spec(type_=3, base=edge(0), factor=3, orig=1),
        "tiny_base_rotary_128": spec(head_dim=7, base=edge(3), head=128),
        "subnormal_base": spec(head_dim=7, base=edge(5), head=128),
        "longrope_orig_1": spec(type_=4, max_pos=edge(1), orig=edge(0), lists=(1, [0, 0, 0, 0])),
        "dynamic_factor_1e300": spec(type_=2, factor=edge(1), max_pos=5),
        "dynamic_factor_1e15_huge_base": spec(type_=2, factor=edge(2), base=edge(6), max_pos=5),
        "yarn_mscale_all_dim_zero_denominator": spec(type_=3, factor=3, orig=1, mscale=1, mscale_all_dim=edge(0)),
        "attention_1e39": spec(type_=3, factor=2, orig=1, attn=edge(2)),
        "longrope_subnormal_factor": spec(type_=4, max_pos=3, orig=1, lists=(1, [edge(0), 0, 0, 0])),
    }
    for name, data in cases.items():
        open(os.path.join(out, name + ".bin"), "wb").write(data)


if __name__ == "__main__":
    os.makedirs(os.path.join(HERE, "corpus", "spec"), exist_ok=True)
    spec_seeds(os.path.join(HERE, "corpus", "spec"))
    for d in ("npy", "apply", "config"):
        os.makedirs(os.path.join(HERE, "corpus", d), exist_ok=True)
    npy_seeds(os.path.join(HERE, "corpus", "npy"))
    apply_seeds(os.path.join(HERE, "corpus", "apply"))
    if len(sys.argv) > 1:
        config_seeds(os.path.join(HERE, "corpus", "config"), sys.argv[1])
