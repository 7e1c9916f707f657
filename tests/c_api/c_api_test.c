/* C API test, compiled as C: a Llama-3-8B decode step (GQA q/k) vs an fp64 formula, plus error paths. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rotary/rotary_c.h"

static int g_failures = 0;

#define CHECK(cond, ...)                                            \
  do {                                                              \
    if (!(cond)) {                                                  \
      ++g_failures;                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                 \
      fprintf(stderr, "\n");                                        \
    }                                                               \
  } while (0)

#define CHECK_OK(call)                                                                               \
  do {                                                                                               \
    rotary_status_t st_ = (call);                                                                    \
    if (st_ != ROTARY_OK) {                                                                          \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #call, rotary_status_name(st_), \
              rotary_last_error());                                                                  \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

/* Expects `st` to be `want` and the last error to mention `needle`. */
static void expect_error(rotary_status_t st, rotary_status_t want, const char* needle, const char* what) {
  const char* msg = rotary_last_error();
  CHECK(st == want, "%s: status %s, expected %s (message: %s)", what, rotary_status_name(st),
        rotary_status_name(want), msg);
  CHECK(msg != NULL && strstr(msg, needle) != NULL, "%s: message \"%s\" does not mention \"%s\"", what,
        msg ? msg : "(null)", needle);
}

/* Deterministic values in [-1, 1). */
static float next_uniform(uint64_t* state) {
  *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* fp64 truth: rotates one head (head_dim d, rotary_dim r) by pos*theta_i, half-split or interleaved. */
static void rotate_f64(const float* x, double* y, int64_t d, int64_t r, const double* theta, double af,
                       double pos, int interleaved, int inverse) {
  int64_t i;
  for (i = 0; i < d; ++i) y[i] = x[i];
  for (i = 0; i < r / 2; ++i) {
    int64_t j1 = interleaved ? 2 * i : i;
    int64_t j2 = interleaved ? 2 * i + 1 : i + r / 2;
    double angle = pos * theta[i];
    double c = cos(angle) * af, s = sin(angle) * af * (inverse ? -1.0 : 1.0);
    y[j1] = (double)x[j1] * c - (double)x[j2] * s;
    y[j2] = (double)x[j1] * s + (double)x[j2] * c;
  }
}

enum { HQ = 32, HK = 8, D = 128 };

static void test_llama3_decode_step(void) {
  rotary_spec_t* spec = NULL;
  rotary_rope_t* rope = NULL;
  rotary_spec_desc_t desc;
  double theta[D / 2];
  int64_t count = 0, h, i;
  double af = 0.0, max_err = 0.0;
  const int64_t pos = 12345;
  static float q[HQ * D], k[HK * D], q_out[HQ * D], k_orig[HK * D];
  double ref[D];
  uint64_t rng = 42;
  rotary_apply_args_t args;
  int64_t qshape[4] = {1, 1, HQ, D}, kshape[4] = {1, 1, HK, D};
  int interleaved;

  CHECK_OK(rotary_spec_from_preset("llama-3.1-8b", &spec));
  rotary_spec_desc_init(&desc); /* struct_size: how much room describe has */
  CHECK_OK(rotary_spec_describe(spec, &desc));
  CHECK(desc.head_dim == D && desc.rotary_dim == D, "head_dim %lld rotary_dim %lld", (long long)desc.head_dim,
        (long long)desc.rotary_dim);
  CHECK(desc.rope_type == ROTARY_ROPE_LLAMA3, "rope_type %d", (int)desc.rope_type);
  interleaved = desc.pairing == ROTARY_PAIRING_INTERLEAVED;

  /* count query, then fill */
  CHECK_OK(rotary_spec_inv_freq(spec, -1, NULL, 0, &count));
  CHECK(count == D / 2, "inv_freq count %lld", (long long)count);
  CHECK_OK(rotary_spec_inv_freq(spec, -1, theta, D / 2, &count));
  CHECK_OK(rotary_spec_attention_factor(spec, -1, &af));
  CHECK(theta[0] == 1.0, "theta_0 = %.17g (base^0 must be exactly 1)", theta[0]);
  /* llama3 scaling: highest frequencies untouched (theta_1 = 500000^(-2/128)), lowest divided by 8. */
  CHECK(fabs(theta[1] - pow(500000.0, -2.0 / 128.0)) < 1e-15, "theta_1 = %.17g", theta[1]);
  CHECK(fabs(theta[63] - pow(500000.0, -126.0 / 128.0) / 8.0) < 1e-18, "theta_63 = %.17g", theta[63]);
  CHECK(af == 1.0, "attention factor %g", af);

  for (i = 0; i < HQ * D; ++i) q[i] = next_uniform(&rng);
  for (i = 0; i < HK * D; ++i) k_orig[i] = k[i] = next_uniform(&rng);

  CHECK_OK(rotary_rope_create(spec, NULL, &rope));
  rotary_spec_free(spec); /* the rope keeps its own copy */

  /* q out of place, k in place; one call, different head counts (GQA), decode step at pos 12345 */
  rotary_apply_args_init(&args);
  CHECK_OK(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, qshape));
  CHECK_OK(rotary_tensor_contiguous(&args.q_out, q_out, ROTARY_DTYPE_F32, 4, qshape));
  CHECK_OK(rotary_tensor_contiguous(&args.k, k, ROTARY_DTYPE_F32, 4, kshape));
  args.positions.kind = ROTARY_POSITIONS_OFFSET;
  args.positions.offset = pos;
  CHECK_OK(rotary_rope_apply(rope, &args));

  for (h = 0; h < HQ; ++h) {
    rotate_f64(q + h * D, ref, D, D, theta, af, (double)pos, interleaved, 0);
    for (i = 0; i < D; ++i) {
      double e = fabs(ref[i] - (double)q_out[h * D + i]);
      if (e > max_err) max_err = e;
    }
  }
  for (h = 0; h < HK; ++h) {
    rotate_f64(k_orig + h * D, ref, D, D, theta, af, (double)pos, interleaved, 0);
    for (i = 0; i < D; ++i) {
      double e = fabs(ref[i] - (double)k[h * D + i]);
      if (e > max_err) max_err = e;
    }
  }
  /* Accuracy contract: <= 4e-6 vs fp64 truth for |x| ~ 1 at any position < 2^24. */
  CHECK(max_err <= 4e-6, "max abs error vs fp64 = %g", max_err);
  printf("llama-3.1-8b decode step at position %lld: max abs error vs fp64 = %.3g\n", (long long)pos, max_err);

  /* Same step with explicit int32 position ids; then the inverse restores k. */
  {
    int32_t ids[1] = {(int32_t)pos};
    int64_t ishape[2] = {1, 1};
    static float q_out2[HQ * D];
    rotary_apply_args_init(&args);
    CHECK_OK(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, qshape));
    CHECK_OK(rotary_tensor_contiguous(&args.q_out, q_out2, ROTARY_DTYPE_F32, 4, qshape));
    args.positions.kind = ROTARY_POSITIONS_IDS;
    CHECK_OK(rotary_tensor_contiguous(&args.positions.ids, ids, ROTARY_DTYPE_I32, 2, ishape));
    CHECK_OK(rotary_rope_apply(rope, &args));
    CHECK(memcmp(q_out, q_out2, sizeof q_out) == 0, "ids path differs from offset path");

    rotary_apply_args_init(&args);
    CHECK_OK(rotary_tensor_contiguous(&args.q, k, ROTARY_DTYPE_F32, 4, kshape));
    args.positions.offset = pos;
    args.direction = ROTARY_DIRECTION_INVERSE;
    CHECK_OK(rotary_rope_apply(rope, &args));
    max_err = 0.0;
    for (i = 0; i < HK * D; ++i) {
      double e = fabs((double)k[i] - (double)k_orig[i]);
      if (e > max_err) max_err = e;
    }
    CHECK(max_err <= 4e-6, "inverse(forward(k)) differs from k by %g", max_err);
  }
  rotary_rope_free(rope);
}

/* Caller cos/sin (ONNX semantics): cache [max_pos, R/2], partial rotation R = 4 of D = 6, interleaved. */
static void test_apply_cos_sin(void) {
  float x[2 * 6], y[2 * 6], cs[3 * 2], sn[3 * 2];
  int64_t ids[2] = {2, 0};
  int64_t xshape[4] = {1, 2, 1, 6}, cshape[2] = {3, 2}, ishape[2] = {1, 2};
  rotary_tensor_t cos_t, sin_t;
  rotary_apply_args_t args;
  int64_t t, i;
  uint64_t rng = 7;
  for (i = 0; i < 12; ++i) x[i] = next_uniform(&rng);
  for (i = 0; i < 6; ++i) {
    cs[i] = next_uniform(&rng);
    sn[i] = next_uniform(&rng);
  }
  CHECK_OK(rotary_tensor_contiguous(&cos_t, cs, ROTARY_DTYPE_F32, 2, cshape));
  CHECK_OK(rotary_tensor_contiguous(&sin_t, sn, ROTARY_DTYPE_F32, 2, cshape));
  rotary_apply_args_init(&args);
  CHECK_OK(rotary_tensor_contiguous(&args.q, x, ROTARY_DTYPE_F32, 4, xshape));
  CHECK_OK(rotary_tensor_contiguous(&args.q_out, y, ROTARY_DTYPE_F32, 4, xshape));
  args.pairing = ROTARY_PAIRING_INTERLEAVED;
  args.positions.kind = ROTARY_POSITIONS_IDS;
  CHECK_OK(rotary_tensor_contiguous(&args.positions.ids, ids, ROTARY_DTYPE_I64, 2, ishape));
  CHECK_OK(rotary_apply_cos_sin(&cos_t, &sin_t, &args));
  for (t = 0; t < 2; ++t) {
    const float* xt = x + t * 6;
    const float* yt = y + t * 6;
    for (i = 0; i < 2; ++i) {
      double c = cs[ids[t] * 2 + i], s = sn[ids[t] * 2 + i];
      double e1 = c * xt[2 * i] - s * xt[2 * i + 1], e2 = s * xt[2 * i] + c * xt[2 * i + 1];
      CHECK(fabs(e1 - yt[2 * i]) < 1e-6 && fabs(e2 - yt[2 * i + 1]) < 1e-6, "token %lld pair %lld", (long long)t,
            (long long)i);
    }
    CHECK(yt[4] == xt[4] && yt[5] == xt[5], "pass-through channels changed");
  }
  /* A position past the caller's table is an error, never identity. */
  ids[0] = 3;
  expect_error(rotary_apply_cos_sin(&cos_t, &sin_t, &args), ROTARY_ERROR_OUT_OF_RANGE, "3",
               "position beyond caller table");
}

static void test_errors(void) {
  rotary_spec_t* spec = NULL;
  rotary_rope_t* rope = NULL;
  rotary_apply_args_t args;
  rotary_spec_desc_t desc;
  float q[2 * 4 * 8], q_copy[2 * 4 * 8];
  int64_t shape[4] = {1, 2, 4, 8};
  int64_t bad_shape[4] = {1, 2, 4, 7};
  int64_t count = 0;
  int i;
  for (i = 0; i < 64; ++i) q_copy[i] = q[i] = (float)i * 0.1f;

  expect_error(rotary_spec_from_preset(NULL, &spec), ROTARY_ERROR_INVALID_ARGUMENT, "name", "NULL name");
  expect_error(rotary_spec_from_preset("llama-3.1-8b", NULL), ROTARY_ERROR_INVALID_ARGUMENT, "out", "NULL out");
  expect_error(rotary_spec_from_preset("no-such-model", &spec), ROTARY_ERROR_INVALID_ARGUMENT, "no-such-model",
               "unknown preset");
  CHECK(spec == NULL, "spec written on failure");
  expect_error(rotary_spec_from_config_file("/nonexistent/config.json", &spec), ROTARY_ERROR_IO,
               "/nonexistent/config.json", "missing config file");
  expect_error(rotary_spec_from_config_json("{\"head_dim\": ", 12, &spec), ROTARY_ERROR_IO, "not valid JSON",
               "truncated json");
  expect_error(rotary_spec_create(NULL, &spec), ROTARY_ERROR_INVALID_ARGUMENT, "desc", "NULL desc");

  rotary_spec_desc_init(&desc);
  desc.head_dim = 8;
  desc.rotary_dim = 7;
  expect_error(rotary_spec_create(&desc, &spec), ROTARY_ERROR_INVALID_ARGUMENT, "rotary_dim", "odd rotary_dim");
  desc.rotary_dim = 0;
  desc.struct_size = 3;
  expect_error(rotary_spec_create(&desc, &spec), ROTARY_ERROR_INVALID_ARGUMENT, "struct_size", "bad struct_size");
  rotary_spec_desc_init(&desc);
  desc.head_dim = 8;
  desc.base = 10000.0;
  CHECK_OK(rotary_spec_create(&desc, &spec));
  expect_error(rotary_spec_inv_freq(spec, -1, NULL, 4, &count), ROTARY_ERROR_INVALID_ARGUMENT, "out",
               "NULL out with capacity");
  expect_error(rotary_spec_inv_freq(spec, -1, NULL, 0, NULL), ROTARY_ERROR_INVALID_ARGUMENT, "count", "NULL count");
  expect_error(rotary_spec_inv_freq(NULL, -1, NULL, 0, &count), ROTARY_ERROR_INVALID_ARGUMENT, "spec", "NULL spec");
  expect_error(rotary_spec_inv_freq(spec, -5, NULL, 0, &count), ROTARY_ERROR_INVALID_ARGUMENT, "seq_len",
               "negative seq_len");
  expect_error(rotary_rope_create(NULL, NULL, &rope), ROTARY_ERROR_INVALID_ARGUMENT, "spec", "NULL spec");
  CHECK_OK(rotary_rope_create(spec, NULL, &rope));

  expect_error(rotary_rope_apply(rope, NULL), ROTARY_ERROR_INVALID_ARGUMENT, "args", "NULL args");
  rotary_apply_args_init(&args);
  expect_error(rotary_rope_apply(NULL, &args), ROTARY_ERROR_INVALID_ARGUMENT, "rope", "NULL rope");
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "q", "absent q");

  CHECK_OK(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, shape));
  args.q.rank = 7;
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "args->q.rank", "rank 7");
  CHECK_OK(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, bad_shape));
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "the spec's head_dim 8, got 7", "head_dim 7 vs spec 8");
  CHECK_OK(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_I32, 4, shape));
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "q", "integer q");
  CHECK_OK(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, shape));
  args.q.dtype = (rotary_dtype_t)42;
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "args->q.dtype", "dtype 42");
  CHECK_OK(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, shape));
  args.layout = (rotary_layout_t)9;
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "args->layout", "layout 9");
  args.layout = ROTARY_LAYOUT_BSHD;
  args.pairing = (rotary_pairing_t)5;
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "args->pairing", "pairing 5");
  args.pairing = ROTARY_PAIRING_DEFAULT;
  args.struct_size = 0;
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "struct_size", "struct_size 0");
  args.struct_size = sizeof(rotary_apply_args_t);
  args.positions.kind = ROTARY_POSITIONS_IDS; /* ids absent */
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "ids", "IDS without ids");
  args.positions.kind = ROTARY_POSITIONS_OFFSET;
  args.positions.offset = -3;
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "-3", "negative offset");
  args.positions.offset = 0;
  args.q.strides[3] = 0;
  expect_error(rotary_rope_apply(rope, &args), ROTARY_ERROR_INVALID_ARGUMENT, "stride", "zero stride");
  CHECK(memcmp(q, q_copy, sizeof q) == 0, "q modified by a failed in-place call");

  expect_error(rotary_apply_cos_sin(NULL, NULL, &args), ROTARY_ERROR_INVALID_ARGUMENT, "cos", "NULL cos");
  expect_error(rotary_tensor_contiguous(NULL, q, ROTARY_DTYPE_F32, 4, shape), ROTARY_ERROR_INVALID_ARGUMENT, "t",
               "NULL t");
  expect_error(rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 5, shape), ROTARY_ERROR_INVALID_ARGUMENT,
               "rank", "rank 5");

  rotary_rope_free(rope);
  rotary_spec_free(spec);
  rotary_spec_free(NULL);
  rotary_rope_free(NULL);
}

static void test_misc(void) {
  int64_t n = rotary_preset_count(), i;
  int found = 0;
  CHECK(n > 0, "no presets");
  for (i = 0; i < n; ++i)
    if (strcmp(rotary_preset_name(i), "llama-3.1-8b") == 0) found = 1;
  CHECK(found, "llama-3.1-8b not listed");
  CHECK(rotary_preset_name(n) == NULL, "out-of-range preset index");
  CHECK(rotary_preset_name(-1) == NULL, "negative preset index");
  CHECK(strcmp(rotary_version(), "") != 0, "empty version");
}

int main(void) {
  test_llama3_decode_step();
  test_apply_cos_sin();
  test_errors();
  test_misc();
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
