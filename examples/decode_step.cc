// README example (C++): RoPE on q and k of a Llama-3-8B decode step; built and run by ctest.
#include <rotary/rotary.h>

#include <cstdio>
#include <vector>

int main() {
  rotary::Rope rope(rotary::preset("llama-3.1-8b"));   // or rotary::spec_from_hf_config_file("config.json")
  std::vector<float> q(32 * 128, 0.5f), k(8 * 128, 0.25f);  // [B=1, S=1, H, D], filled by your model
  rotary::ApplyArgs args;
  args.q = rotary::TensorView::contiguous(q.data(), rotary::DType::kF32, {1, 1, 32, 128});
  args.k = rotary::TensorView::contiguous(k.data(), rotary::DType::kF32, {1, 1, 8, 128});
  args.positions = rotary::Positions::contiguous(12345);  // or Positions::from_ids / Positions::packed
  args.threads = 1;                                      // decode: stay on the calling thread
  rope.apply(args);                                      // in place; set q_out/k_out for out of place
  std::printf("q[0] = %.6f, k[0] = %.6f\n", q[0], k[0]);
}
