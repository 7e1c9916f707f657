/* Downstream C smoke test: a decode step through the installed librotary (C API), linked by gcc via pkg-config. */
#include <math.h>
#include <stdio.h>

#include <rotary/rotary_c.h>

int main(void) {
  static float q[8 * 64];
  int64_t shape[4] = {1, 1, 8, 64};
  double inv_freq[32];
  int64_t count = 0;
  rotary_spec_t* spec = NULL;
  rotary_rope_t* rope = NULL;
  rotary_apply_args_t args;
  double err = 0;
  int i, h;
  for (i = 0; i < 8 * 64; ++i) q[i] = (float)sin(0.37 * i);
  if (rotary_spec_from_preset("llama-3.2-1b", &spec) != ROTARY_OK || rotary_rope_create(spec, NULL, &rope) != ROTARY_OK ||
      rotary_spec_inv_freq(spec, -1, inv_freq, 32, &count) != ROTARY_OK || count != 32) {
    fprintf(stderr, "%s\n", rotary_last_error());
    return 1;
  }
  rotary_apply_args_init(&args);
  rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, shape);
  args.positions.offset = 777;
  if (rotary_rope_apply(rope, &args) != ROTARY_OK) {
    fprintf(stderr, "%s\n", rotary_last_error());
    return 1;
  }
  for (h = 0; h < 8; ++h)
    for (i = 0; i < 32; ++i) {
      double a = 777.0 * inv_freq[i], x0 = sin(0.37 * (h * 64 + i)), x1 = sin(0.37 * (h * 64 + i + 32));
      err = fmax(err, fabs(q[h * 64 + i] - (float)(x0 * cos(a) - x1 * sin(a))));
      err = fmax(err, fabs(q[h * 64 + i + 32] - (float)(x0 * sin(a) + x1 * cos(a))));
    }
  printf("c consumer: max abs error %.3g\n", err);
  rotary_rope_free(rope);
  rotary_spec_free(spec);
  return err < 4e-6 ? 0 : 1;
}
