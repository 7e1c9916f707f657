/* README example (C): RoPE on q and k of a Llama-3-8B decode step; built and run by ctest. */
#include <rotary/rotary_c.h>
#include <stdio.h>

int main(void) {
  static float q[32 * 128], k[8 * 128];  /* [B=1, S=1, H, D], filled by your model */
  int64_t qs[4] = {1, 1, 32, 128}, ks[4] = {1, 1, 8, 128};
  rotary_spec_t* spec = NULL;
  rotary_rope_t* rope = NULL;
  rotary_apply_args_t args;
  for (int i = 0; i < 32 * 128; ++i) q[i] = 0.5f;
  for (int i = 0; i < 8 * 128; ++i) k[i] = 0.25f;
  if (rotary_spec_from_preset("llama-3.1-8b", &spec) != ROTARY_OK ||
      rotary_rope_create(spec, NULL, &rope) != ROTARY_OK) {
    fprintf(stderr, "%s\n", rotary_last_error());
    return 1;
  }
  rotary_apply_args_init(&args);
  rotary_tensor_contiguous(&args.q, q, ROTARY_DTYPE_F32, 4, qs);
  rotary_tensor_contiguous(&args.k, k, ROTARY_DTYPE_F32, 4, ks);
  args.positions.offset = 12345;
  if (rotary_rope_apply(rope, &args) != ROTARY_OK) fprintf(stderr, "%s\n", rotary_last_error());
  printf("q[0] = %.6f, k[0] = %.6f\n", q[0], k[0]);
  rotary_rope_free(rope);
  rotary_spec_free(spec);
  return 0;
}
