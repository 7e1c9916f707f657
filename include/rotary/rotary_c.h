/* Pure C API of rotary: opaque spec/rope handles, status codes, a thread-local last error, strided tensors. */
#ifndef ROTARY_ROTARY_C_H_
#define ROTARY_ROTARY_C_H_

#include <stddef.h>
#include <stdint.h>

#include "rotary/api.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Conventions
 *  - Every function that can fail returns a rotary_status_t. On failure it leaves its outputs untouched
 *    (an in-place apply leaves the tensors bit-identical) and sets the calling thread's last error
 *    (rotary_last_error), e.g. "[rotary_rope_apply] args->q.rank must be in [1, 4], got 7".
 *  - No function aborts or lets a C++ exception escape; NULL pointers are reported, never dereferenced.
 *  - Structs that carry a struct_size field must be initialised with the matching *_init function
 *    (which sets struct_size = sizeof(struct) and every field to its documented default).
 *  - Shapes and strides are in ELEMENTS, not bytes. A rotary_tensor_t with data == NULL is "absent".
 *  - Enumerated types are int32_t typedefs (a fixed size in structs, whatever the compiler); their values
 *    are the ROTARY_* constants. Any other value is reported as INVALID_ARGUMENT.
 */

/* ------------------------------------------------------------------ status and errors */

typedef int32_t rotary_status_t;
enum {
  ROTARY_OK = 0,
  ROTARY_ERROR_INVALID_ARGUMENT = 1, /* a value, shape, stride, dtype or pointer is wrong */
  ROTARY_ERROR_OUT_OF_RANGE = 2,     /* a position or size beyond a documented limit */
  ROTARY_ERROR_UNSUPPORTED = 3,      /* valid, but not built/implemented (e.g. CUDA backend without CUDA) */
  ROTARY_ERROR_IO = 4,               /* a file could not be read or is malformed */
  ROTARY_ERROR_INTERNAL = 5          /* a bug or out of memory */
};

/* The message of the most recent failed call on this thread ("" if none). Successful calls do not
 * clear it. The pointer stays valid until the next failing call on the same thread. */
ROTARY_API const char* rotary_last_error(void);
/* "ok", "invalid argument", "out of range", "unsupported", "io", "internal" ("unknown" otherwise). */
ROTARY_API const char* rotary_status_name(rotary_status_t status);
/* The library version, e.g. "0.1.0". */
ROTARY_API const char* rotary_version(void);

/* ------------------------------------------------------------------ vocabulary */

typedef int32_t rotary_dtype_t;
enum {
  ROTARY_DTYPE_F32 = 0,
  ROTARY_DTYPE_F16 = 1,  /* IEEE binary16 */
  ROTARY_DTYPE_BF16 = 2, /* bfloat16 */
  ROTARY_DTYPE_F64 = 3,
  ROTARY_DTYPE_I32 = 4,  /* positions / cu_seqlens only */
  ROTARY_DTYPE_I64 = 5,
  ROTARY_DTYPE_I8 = 6,     /* int8 KV cache with an f32 scale per (token, head) (rotary_prologue) */
  ROTARY_DTYPE_F8E4M3 = 7, /* fp8 e4m3fn with an f32 per-tensor scale: KV cache, apply outputs */
  ROTARY_DTYPE_F8E5M2 = 8  /* fp8 e5m2 with an f32 per-tensor scale */
};

/* Which channels form a rotated pair (R = rotary_dim; channels >= R pass through unchanged). */
typedef int32_t rotary_pairing_t;
enum {
  ROTARY_PAIRING_DEFAULT = -1,    /* the spec's pairing (rope apply) or half-split (rotary_apply_cos_sin) */
  ROTARY_PAIRING_HALF = 0,        /* (x[i], x[i + R/2])  GPT-NeoX / HF rotate_half / ggml NEOX */
  ROTARY_PAIRING_INTERLEAVED = 1  /* (x[2i], x[2i + 1])  GPT-J / Meta / ggml NORMAL / ONNX interleaved=1 */
};

typedef int32_t rotary_layout_t;
enum {
  ROTARY_LAYOUT_BSHD = 0, /* [batch, seq, heads, head_dim] */
  ROTARY_LAYOUT_BHSD = 1, /* [batch, heads, seq, head_dim] */
  ROTARY_LAYOUT_THD = 2   /* [tokens, heads, head_dim] (packed) */
};

typedef int32_t rotary_direction_t;
enum {
  ROTARY_DIRECTION_FORWARD = 0, /* rotate by +pos*theta */
  ROTARY_DIRECTION_INVERSE = 1  /* rotate by -pos*theta (the backward pass) */
};

typedef int32_t rotary_backend_t;
enum {
  ROTARY_BACKEND_AUTO = 0,
  ROTARY_BACKEND_CPU = 1,
  ROTARY_BACKEND_REFERENCE = 2, /* literal scalar kernel */
  ROTARY_BACKEND_CUDA = 3       /* ROTARY_ERROR_UNSUPPORTED unless built with CUDA */
};

/* The names of layouts, pairings, directions and backends: the same spellings as the C++ parse_* functions,
 * Python and the CLI (layout bshd|bhsd|thd; pairing half, half_split, neox|interleaved, gptj; direction
 * forward|inverse; backend auto|cpu|reference|cuda). An unknown name is ROTARY_ERROR_INVALID_ARGUMENT. */
ROTARY_API rotary_status_t rotary_layout_from_name(const char* name, rotary_layout_t* out);
ROTARY_API rotary_status_t rotary_pairing_from_name(const char* name, rotary_pairing_t* out);
ROTARY_API rotary_status_t rotary_direction_from_name(const char* name, rotary_direction_t* out);
ROTARY_API rotary_status_t rotary_backend_from_name(const char* name, rotary_backend_t* out);

typedef int32_t rotary_rope_type_t;
enum {
  ROTARY_ROPE_DEFAULT = 0,
  ROTARY_ROPE_LINEAR = 1,
  ROTARY_ROPE_DYNAMIC = 2,
  ROTARY_ROPE_YARN = 3,
  ROTARY_ROPE_LONGROPE = 4,
  ROTARY_ROPE_LLAMA3 = 5,
  ROTARY_ROPE_PROPORTIONAL = 6,
  ROTARY_ROPE_NTK = 7 /* vLLM's static NTK ("ntk"; mixed_b for its mixed variant), docs/scaling.md */
};

/* A non-owning strided view. rank in [1, 4] when data != NULL; shape/strides beyond rank are ignored. */
typedef struct rotary_tensor_t {
  void* data;
  rotary_dtype_t dtype;
  int32_t rank;
  int64_t shape[4];
  int64_t strides[4]; /* in elements */
} rotary_tensor_t;

/* Fills *t with a row-major contiguous view of `shape` (rank entries). Returns INVALID_ARGUMENT for
 * t == NULL, shape == NULL or rank outside [1, 4]. */
ROTARY_API rotary_status_t rotary_tensor_contiguous(rotary_tensor_t* t, void* data, rotary_dtype_t dtype,
                                                    int32_t rank, const int64_t* shape);

/* ------------------------------------------------------------------ spec */

typedef struct rotary_spec_t rotary_spec_t; /* opaque: a validated rotary::Spec */

/* C mirror of rotary::Spec (see rotary/spec.h and docs/scaling.md for the meaning of each field).
 * "0 = unset" fields take Hugging Face's default. Arrays are copied by rotary_spec_create. */
typedef struct rotary_spec_desc_t {
  size_t struct_size;              /* = sizeof(rotary_spec_desc_t), set by rotary_spec_desc_init */
  const char* name;                /* informational, may be NULL */
  int64_t head_dim;                /* D (required, > 0) */
  int64_t rotary_dim;              /* R (even, <= D); 0 = head_dim */
  double base;                     /* rope_theta; default 10000 */
  rotary_pairing_t pairing;        /* HALF (default) or INTERLEAVED */
  int64_t max_position_embeddings; /* 0 = unknown */
  double partial_rotary_factor;    /* informational (rotary_dim is what rotates: set it for partial rotation),
                                      except proportional: the rotated share of head_dim; default 1 */
  /* scaling */
  rotary_rope_type_t rope_type;    /* default ROTARY_ROPE_DEFAULT */
  double factor;                   /* 0 = unset */
  int64_t original_max_position_embeddings; /* 0 = max_position_embeddings */
  double beta_fast;                /* yarn; default 32 */
  double beta_slow;                /* yarn; default 1 */
  double mscale;                   /* yarn (DeepSeek); 0 = unset */
  double mscale_all_dim;           /* yarn (DeepSeek); 0 = unset */
  int32_t truncate;                /* yarn; default 1 */
  double attention_factor;         /* yarn/longrope override; 0 = unset (computed) */
  const double* short_factor;      /* longrope, rotary_dim/2 values (or NULL/0) */
  int64_t short_factor_len;
  const double* long_factor;
  int64_t long_factor_len;
  double low_freq_factor;          /* llama3; default 1 */
  double high_freq_factor;         /* llama3; default 4 */
  /* M-RoPE (Qwen2-VL style); section_len 0 = off */
  const int64_t* mrope_section;
  int64_t mrope_section_len;
  int32_t mrope_interleaved;       /* 1 = Qwen3-VL interleaved assignment */
  /* vLLM extensions (added after 0.1.0: a struct_size of the 0.1.0 layout, ending at mrope_interleaved, is
     accepted by rotary_spec_create and honoured by rotary_spec_describe) */
  double alpha;                    /* DYNAMIC: NTK-alpha (Hunyuan), base * alpha^(R/(R-2)); 0 = unset (HF dynamic) */
  double mixed_b;                  /* NTK: mixed NTK exponent b; 0 = unset (fixed NTK) */
} rotary_spec_desc_t;

/* Sets every field to its default (struct_size included). */
ROTARY_API void rotary_spec_desc_init(rotary_spec_desc_t* desc);

/* Creates a spec from a built-in preset name (e.g. "llama-3.1-8b"). *out must be freed with rotary_spec_free. */
ROTARY_API rotary_status_t rotary_spec_from_preset(const char* name, rotary_spec_t** out);
/* From the text of a Hugging Face config.json (`length` bytes; need not be NUL-terminated). */
ROTARY_API rotary_status_t rotary_spec_from_config_json(const char* json_text, size_t length, rotary_spec_t** out);
/* From a config.json file. */
ROTARY_API rotary_status_t rotary_spec_from_config_file(const char* path, rotary_spec_t** out);
/* From a C description (validated). */
ROTARY_API rotary_status_t rotary_spec_create(const rotary_spec_desc_t* desc, rotary_spec_t** out);
/* Frees a spec (NULL is a no-op). */
ROTARY_API void rotary_spec_free(rotary_spec_t* spec);

/* Fills *desc with the spec's values. Array pointers point into `spec` and stay valid until it is freed.
   desc->struct_size must be set (rotary_spec_desc_init) to sizeof(rotary_spec_desc_t) or the 0.1.0 layout's
   size; any other value is an error and nothing is written. */
ROTARY_API rotary_status_t rotary_spec_describe(const rotary_spec_t* spec, rotary_spec_desc_t* desc);

/* The frequencies theta_i (rotary_dim/2 values) for a sequence length (`seq_len` = -1: none, i.e. the
 * model's own context; only dynamic/longrope depend on it). Writes min(capacity, count) values to `out`
 * (out may be NULL when capacity is 0) and the full count to *count. */
ROTARY_API rotary_status_t rotary_spec_inv_freq(const rotary_spec_t* spec, int64_t seq_len, double* out,
                                                int64_t capacity, int64_t* count);
/* The attention factor that multiplies cos and sin (1 for most types). seq_len as above. */
ROTARY_API rotary_status_t rotary_spec_attention_factor(const rotary_spec_t* spec, int64_t seq_len, double* out);

/* Built-in presets: count and the i-th name (pointer valid for the process lifetime). */
ROTARY_API int64_t rotary_preset_count(void);
ROTARY_API const char* rotary_preset_name(int64_t index); /* NULL if out of range */

/* ------------------------------------------------------------------ RoPE per layer type
 * transformers v5 configs may nest rope_parameters per layer type (Gemma 3: full_attention / sliding_attention,
 * each with its own theta and scaling) with `layer_types` naming each layer's type; rotary_spec_from_config_*
 * refuses them (UNSUPPORTED). These read one spec per layer type (rotary::LayerTypeSpecs, docs/scaling.md). */

typedef struct rotary_layer_specs_t rotary_layer_specs_t; /* opaque: a rotary::LayerTypeSpecs */

/* From config.json text (`length` bytes) or a file. Any config works: one not nested per layer type gives one
 * shared spec (listed under each name in layer_types, or under "" when it has none). */
ROTARY_API rotary_status_t rotary_layer_specs_from_config_json(const char* json_text, size_t length,
                                                               rotary_layer_specs_t** out);
ROTARY_API rotary_status_t rotary_layer_specs_from_config_file(const char* path, rotary_layer_specs_t** out);
ROTARY_API void rotary_layer_specs_free(rotary_layer_specs_t* specs); /* NULL is a no-op */
/* Sizes (any output pointer may be NULL): the number of layer types, of entries in layer_types (the model's
 * layers; 0 when the config has none), and whether the parameters are nested per layer type (1) or shared (0). */
ROTARY_API rotary_status_t rotary_layer_specs_describe(const rotary_layer_specs_t* specs, int64_t* n_types,
                                                       int64_t* n_layers, int32_t* nested);
/* The index-th layer type's name, sorted by name (valid until the specs are freed). */
ROTARY_API rotary_status_t rotary_layer_specs_type_name(const rotary_layer_specs_t* specs, int64_t index,
                                                        const char** name);
/* layer_types[layer]: the type of layer `layer` (valid until the specs are freed). */
ROTARY_API rotary_status_t rotary_layer_specs_layer_type(const rotary_layer_specs_t* specs, int64_t layer,
                                                         const char** name);
/* A new spec (free with rotary_spec_free) for a layer type. INVALID_ARGUMENT naming the valid types for an
 * unknown name, or for a type whose entry is null (layers without RoPE). */
ROTARY_API rotary_status_t rotary_layer_specs_get(const rotary_layer_specs_t* specs, const char* layer_type,
                                                  rotary_spec_t** out);

/* ------------------------------------------------------------------ rope (spec + lazily grown tables) */

typedef struct rotary_rope_t rotary_rope_t; /* opaque: a rotary::Rope; apply is thread-safe */

typedef int32_t rotary_cos_sin_mode_t;
enum {
  ROTARY_COS_SIN_AUTO = 0,      /* table up to max_positions, on the fly beyond */
  ROTARY_COS_SIN_TABLE = 1,     /* table only: a position past max_positions is OUT_OF_RANGE */
  ROTARY_COS_SIN_ON_THE_FLY = 2 /* never store a table */
};

typedef struct rotary_rope_options_t {
  size_t struct_size;          /* = sizeof(rotary_rope_options_t) */
  rotary_cos_sin_mode_t mode;  /* default AUTO */
  int64_t initial_positions;   /* table rows built eagerly; default 0 */
  int64_t max_positions;       /* table cap; 0 = library default (2^22) */
} rotary_rope_options_t;

ROTARY_API void rotary_rope_options_init(rotary_rope_options_t* options);
/* Creates a rope for a copy of `spec` (the spec may be freed afterwards). options may be NULL (defaults). */
ROTARY_API rotary_status_t rotary_rope_create(const rotary_spec_t* spec, const rotary_rope_options_t* options,
                                              rotary_rope_t** out);
ROTARY_API void rotary_rope_free(rotary_rope_t* rope);

/* ------------------------------------------------------------------ apply */

typedef int32_t rotary_positions_kind_t;
enum {
  ROTARY_POSITIONS_OFFSET = 0, /* pos(b, s) = offset + batch_offsets[b] (if present) + s */
  ROTARY_POSITIONS_IDS = 1,    /* pos(b, s) = ids[b, s]; ids [B,S], [S] or [T]; i32/i64 (f32/f64: fractional)
                                  M-RoPE specs: [3,B,S], [3,S] or [3,T], or text-only [B,S] / [S] / [T] (the
                                  same position on every axis) */
  ROTARY_POSITIONS_PACKED = 2  /* thd only: pos(t) = t - cu_seqlens[n] + seq_offsets[n] */
};

/* Each field is read for the kind named beside it; one given for another kind (ids with kind OFFSET, a
   non-zero offset with kind IDS, ...) is refused with INVALID_ARGUMENT rather than ignored. */
typedef struct rotary_positions_t {
  rotary_positions_kind_t kind;
  int64_t offset;                /* OFFSET */
  rotary_tensor_t batch_offsets; /* OFFSET, optional i32/i64 [B] */
  rotary_tensor_t ids;           /* IDS */
  rotary_tensor_t cu_seqlens;    /* PACKED, i32/i64 [N+1] */
  rotary_tensor_t seq_offsets;   /* PACKED, optional i32/i64 [N] */
} rotary_positions_t;

/* Mirror of rotary::ApplyArgs. */
typedef struct rotary_apply_args_t {
  size_t struct_size;           /* = sizeof(rotary_apply_args_t) */
  rotary_tensor_t q;            /* required */
  rotary_tensor_t q_out;        /* absent or == q: in place */
  rotary_tensor_t k;            /* optional (own head count) */
  rotary_tensor_t k_out;
  rotary_positions_t positions; /* default: OFFSET 0 */
  rotary_layout_t layout;       /* default BSHD */
  rotary_pairing_t pairing;     /* default ROTARY_PAIRING_DEFAULT */
  rotary_direction_t direction; /* default FORWARD */
  int64_t seq_len;              /* length seen by dynamic/longrope; -1 (default) = max(position) + 1 */
  int32_t threads;              /* 0 = all usable cores, 1 = calling thread; capped at the usable cores */
  rotary_backend_t backend;     /* default AUTO */
  void* stream;                 /* backend CUDA: the cudaStream_t to enqueue on (NULL = default stream). Added
                                   after 0.1.0: struct_size of the 0.1.0 layout (ending at backend) is accepted */
  float q_out_scale;            /* per-tensor scale of an fp8 (F8E4M3/F8E5M2) q_out: code = fp8(y / scale), saturating,
                                   nearest even; default 1. Added after 0.1.0 (layouts ending before it: scale 1) */
  float k_out_scale;            /* the same for k_out */
} rotary_apply_args_t;

ROTARY_API void rotary_apply_args_init(rotary_apply_args_t* args);

/* Rotates args->q (and args->k) with the rope's spec; tables grow as needed. */
ROTARY_API rotary_status_t rotary_rope_apply(rotary_rope_t* rope, const rotary_apply_args_t* args);

/* Rotates with caller-supplied cos/sin (ONNX RotaryEmbedding, flash-attn, vLLM caches; values used as given):
 *   rank 2 [max_pos, R/2]: indexed by args->positions, any integer kind (OFFSET with batch_offsets, IDS, PACKED
 *                          with seq_offsets); a position >= max_pos is OUT_OF_RANGE;
 *   rank 3 [B, S, R/2]:    already gathered per token (positions must be OFFSET 0).
 * R = 2 * cos.shape[last]; channels >= R pass through. Layouts, strides, k, pairing, direction (INVERSE: the
 * backward pass) and in/out of place as for rotary_rope_apply. */
ROTARY_API rotary_status_t rotary_apply_cos_sin(const rotary_tensor_t* cos, const rotary_tensor_t* sin,
                                                const rotary_apply_args_t* args);

/* ------------------------------------------------------------------ attention prologue (C mirror of rotary/prologue.h;
 * docs/prologue.md): q/k RMSNorm, RoPE and the KV-cache write in one pass; re-rotation of cached keys */

typedef int32_t rotary_cache_layout_t;
enum {
  ROTARY_CACHE_NHD = 0,  /* paged [num_blocks, block_size, Hkv, D], rows by slot_mapping (-1 = skip) */
  ROTARY_CACHE_HND = 1,  /* paged [num_blocks, Hkv, block_size, D] */
  ROTARY_CACHE_BSHD = 2, /* contiguous [B, S_max, Hkv, D], rows from cache_positions[sequence] */
  ROTARY_CACHE_BHSD = 3  /* contiguous [B, Hkv, S_max, D] (Hugging Face StaticCache) */
};

/* A frequency source: a rope (spec + tables) and the length its dynamic/longrope scaling sees. */
typedef struct rotary_frequency_source_t {
  rotary_rope_t* rope;
  int64_t seq_len; /* -1 = max(position) + 1 over the tokens using it */
} rotary_frequency_source_t;

/* Mirror of rotary::PrologueArgs (field meanings there). Tensors with data == NULL are absent. */
typedef struct rotary_prologue_args_t {
  size_t struct_size;            /* = sizeof(rotary_prologue_args_t), set by rotary_prologue_args_init */
  rotary_tensor_t q, k, v;       /* [T,H,D] (layout THD, the default) / [B,S,H,D] / [B,H,S,D]; f32, f16, bf16 */
  rotary_tensor_t q_out;         /* absent or q: in place */
  rotary_tensor_t k_out;         /* without a cache only (absent: k in place) */
  rotary_positions_t positions;  /* default OFFSET 0 */
  rotary_layout_t layout;        /* default THD */
  const rotary_frequency_source_t* sources; /* n_sources entries; 0 = no rotation */
  int64_t n_sources;
  rotary_tensor_t source_index;  /* i32/i64 [N sequences]; required when n_sources > 1 */
  rotary_cache_layout_t cache_layout; /* default NHD */
  rotary_tensor_t k_cache, v_cache;   /* rank 4; f32/f16/bf16/i8/f8e4m3/f8e5m2 */
  rotary_tensor_t slot_mapping;       /* paged: i32/i64 [T] ([B,S] for BSHD/BHSD inputs) */
  rotary_tensor_t cache_positions;    /* contiguous: i32/i64 [N] (absent: 0) */
  rotary_tensor_t k_scale, v_scale;   /* f32: i8 caches [cache dims but the last] (written); fp8 one element */
  rotary_tensor_t q_norm_weight, k_norm_weight; /* [D], any floating dtype; absent = no norm */
  double norm_eps;               /* default 1e-6 */
  double norm_offset;            /* default 0 (1 = Gemma's x * (1 + w)) */
  int32_t threads;               /* 0 = all cores */
  rotary_backend_t backend;      /* AUTO, CPU or REFERENCE (CUDA: UNSUPPORTED) */
} rotary_prologue_args_t;

ROTARY_API void rotary_prologue_args_init(rotary_prologue_args_t* args);
/* One pass per token: RMSNorm (optional), RoPE, q in place / to q_out, k and v into the cache. Every
 * argument is checked before anything is written ("[rotary_prologue] ..."). */
ROTARY_API rotary_status_t rotary_prologue(const rotary_prologue_args_t* args);

/* Mirror of rotary::RerotateArgs. */
typedef struct rotary_rerotate_args_t {
  size_t struct_size;            /* = sizeof(rotary_rerotate_args_t), set by rotary_rerotate_args_init */
  rotary_tensor_t k_cache;       /* rotated in place */
  rotary_cache_layout_t cache_layout;
  rotary_tensor_t k_scale;       /* i8: read and rewritten (not for identity rows); fp8: one element */
  rotary_tensor_t slots;         /* i32/i64 [N]: paged block * block_size + offset; contiguous b * S_max + s; -1 skip */
  rotary_tensor_t from_positions, to_positions; /* i32/i64 [N] */
  rotary_frequency_source_t from, to;           /* to.rope NULL: from.rope */
  int32_t threads;
  rotary_backend_t backend;
} rotary_rerotate_args_t;

ROTARY_API void rotary_rerotate_args_init(rotary_rerotate_args_t* args);
/* Rotates cached keys from (from, from_positions) to (to, to_positions) by the exact difference angle; rows
 * whose rotation is the identity (angle 0 for every pair, equal attention factors) keep their bits and scales. */
ROTARY_API rotary_status_t rotary_rerotate_cache(const rotary_rerotate_args_t* args);


/* ------------------------------------------------------------------ multimodal and cross-framework variants
 * (C mirror of rotary/multimodal.h, ggml.h, context_parallel.h, convert.h; see docs/multimodal.md) */

/* Multi-axis frequencies: pair j rotates by positions[axis_of_freq[j]] * inv_freq[j] (times attention_factor).
 * Used with rotary_apply_axes and ids of shape [n_axes,B,S] / [n_axes,S] / [n_axes,T]. */
typedef struct rotary_axis_freqs_t rotary_axis_freqs_t; /* opaque: a validated rotary::AxisFrequencies */

typedef int32_t rotary_vision_t;
enum {
  ROTARY_VISION_QWEN2VL = 0, /* HF Qwen2-VL / Qwen2.5-VL ViT 2-D RoPE */
  ROTARY_VISION_GGML = 1,    /* ggml GGML_ROPE_TYPE_VISION (llama.cpp clip): same as QWEN2VL */
  ROTARY_VISION_PIXTRAL = 2  /* HF Pixtral (even/odd frequency split); pass INTERLEAVED for mistral's layout */
};

/* 2-D vision RoPE (2 axes: row, col) for head_dim D (multiple of 4). pairing DEFAULT = half-split. */
ROTARY_API rotary_status_t rotary_vision_frequencies(rotary_vision_t convention, int64_t head_dim, double base,
                                                     rotary_pairing_t pairing, rotary_axis_freqs_t** out);

typedef int32_t rotary_ggml_mode_t;
enum {
  ROTARY_GGML_NORMAL = 0, /* interleaved pairs over n_dims */
  ROTARY_GGML_NEOX = 2,   /* half-split pairs over n_dims */
  ROTARY_GGML_MROPE = 8,  /* sectioned t/h/w/e, 4 position rows */
  ROTARY_GGML_VISION = 24,/* n_dims = head_dim/2, theta index restarts per section, 4 position rows */
  ROTARY_GGML_IMROPE = 40 /* interleaved sections (Qwen3-VL), 4 position rows */
};

/* Mirror of ggml_rope_ext / ggml_rope_multi's parameters. */
typedef struct rotary_ggml_params_t {
  size_t struct_size;         /* = sizeof(rotary_ggml_params_t), set by rotary_ggml_params_init */
  rotary_ggml_mode_t mode;    /* default NORMAL */
  int64_t n_dims;             /* required */
  int64_t n_ctx_orig;         /* YaRN (ext_factor != 0) */
  double freq_base;           /* default 10000 */
  double freq_scale;          /* default 1 */
  double ext_factor;          /* default 0 (YaRN off) */
  double attn_factor;         /* default 1 */
  double beta_fast;           /* default 32 */
  double beta_slow;           /* default 1 */
  int64_t sections[4];        /* MROPE / VISION / IMROPE; default 0 */
  const double* freq_factors; /* optional (ggml's `c`), freq_factors_len >= pairs */
  int64_t freq_factors_len;
} rotary_ggml_params_t;

ROTARY_API void rotary_ggml_params_init(rotary_ggml_params_t* params);
/* ggml's parameters as multi-axis frequencies (exact angles: ggml's results to its float rounding). */
ROTARY_API rotary_status_t rotary_ggml_frequencies(const rotary_ggml_params_t* params, rotary_axis_freqs_t** out);
/* A spec's frequencies for `seq_len` (-1: none) with its M-RoPE axis map (3 axes; 1 without sections). */
ROTARY_API rotary_status_t rotary_spec_axis_frequencies(const rotary_spec_t* spec, int64_t seq_len,
                                                        rotary_axis_freqs_t** out);
/* Sizes and scalars of multi-axis frequencies (any output pointer may be NULL). */
ROTARY_API rotary_status_t rotary_axis_freqs_describe(const rotary_axis_freqs_t* freqs, int64_t* pairs,
                                                      int32_t* n_axes, rotary_pairing_t* pairing,
                                                      double* attention_factor);
/* Copies min(capacity, pairs) frequencies and axes (either array may be NULL). */
ROTARY_API rotary_status_t rotary_axis_freqs_get(const rotary_axis_freqs_t* freqs, double* inv_freq,
                                                 uint8_t* axis_of_freq, int64_t capacity);
ROTARY_API void rotary_axis_freqs_free(rotary_axis_freqs_t* freqs);
/* Rotates on the fly with multi-axis frequencies; args->positions must be IDS [n_axes, ...] (n_axes > 1). Ids must
 * be >= 0, except with rotary_ggml_frequencies' result, which takes any sign as ggml does (|id| < 2^31). */
ROTARY_API rotary_status_t rotary_apply_axes(const rotary_axis_freqs_t* freqs, const rotary_apply_args_t* args);

/* Context parallel (TransformerEngine dual-chunk): global positions of a shard of local_len tokens of
 * rank `rank` in a group of `cp_size` (out: local_len values, + offset). */
ROTARY_API rotary_status_t rotary_cp_positions(int64_t rank, int64_t cp_size, int64_t local_len, int64_t offset,
                                               int64_t* out);
/* Packed shard from the GLOBAL cu_seqlens (n_cu = N+1 entries). Writes min(capacity, count) positions; *count =
 * cu_seqlens[N] / cp_size. */
ROTARY_API rotary_status_t rotary_cp_positions_packed(int64_t rank, int64_t cp_size, const int64_t* cu_seqlens,
                                                      int64_t n_cu, int64_t* out, int64_t capacity, int64_t* count);

/* Permutes q/k projection rows (weight [n_heads*head_dim, in] or bias [n_heads*head_dim]) from pairing `from`
 * to pairing `to` (INTERLEAVED -> HALF is HF's convert_llama_weights_to_hf permute). rotary_dim 0 = head_dim;
 * dst may equal src (in place). */
ROTARY_API rotary_status_t rotary_permute_qk_weight(const rotary_tensor_t* src, const rotary_tensor_t* dst,
                                                    int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                                                    rotary_pairing_t from, rotary_pairing_t to);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ROTARY_ROTARY_C_H_ */
