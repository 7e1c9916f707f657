// The C API's multimodal and cross-framework calls: axis frequencies, apply_axes, context parallelism, weight permutation.
#include <algorithm>
#include <vector>

#include "c_api/boundary.h"
#include "rotary/context_parallel.h"
#include "rotary/convert_weights.h"
#include "rotary/ggml.h"

using namespace rotary::c_api;

namespace {

void put_axis_freqs(rotary::AxisFrequencies af, rotary_axis_freqs_t** out) {
  *out = new rotary_axis_freqs_t{std::move(af)};
}

}  // namespace

extern "C" {

rotary_status_t rotary_vision_frequencies(rotary_vision_t convention, int64_t head_dim, double base,
                                          rotary_pairing_t pairing, rotary_axis_freqs_t** out) {
  constexpr const char* where = "rotary_vision_frequencies";
  return guarded(where, [&] {
    require_non_null(out, where, "out");
    const int c = static_cast<int>(convention);
    if (c < 0 || c > 2) invalid(where, "convention must be QWEN2VL (0), GGML (1) or PIXTRAL (2), got " + std::to_string(c));
    rotary::VisionSpec vs;
    vs.convention = static_cast<rotary::VisionConvention>(c);
    vs.head_dim = head_dim;
    vs.base = base;
    if (static_cast<int>(pairing) != -1) vs.pairing = to_pairing(pairing, where, "pairing", false);
    put_axis_freqs(rotary::vision_frequencies(vs), out);
  });
}

void rotary_ggml_params_init(rotary_ggml_params_t* params) {
  if (params == nullptr) return;
  *params = rotary_ggml_params_t{};
  params->struct_size = sizeof(rotary_ggml_params_t);
  params->mode = ROTARY_GGML_NORMAL;
  params->freq_base = 10000.0;
  params->freq_scale = 1.0;
  params->ext_factor = 0.0;
  params->attn_factor = 1.0;
  params->beta_fast = 32.0;
  params->beta_slow = 1.0;
}

rotary_status_t rotary_ggml_frequencies(const rotary_ggml_params_t* params, rotary_axis_freqs_t** out) {
  constexpr const char* where = "rotary_ggml_frequencies";
  return guarded(where, [&] {
    require_non_null(params, where, "params");
    require_non_null(out, where, "out");
    check_struct_size(params->struct_size, sizeof(rotary_ggml_params_t), where, "params", "rotary_ggml_params_t",
                      "rotary_ggml_params_init");
    rotary::GgmlRopeParams p;
    p.mode = static_cast<rotary::GgmlRopeMode>(params->mode);  // validated by ggml_frequencies
    p.n_dims = params->n_dims;
    p.n_ctx_orig = params->n_ctx_orig;
    p.freq_base = params->freq_base;
    p.freq_scale = params->freq_scale;
    p.ext_factor = params->ext_factor;
    p.attn_factor = params->attn_factor;
    p.beta_fast = params->beta_fast;
    p.beta_slow = params->beta_slow;
    for (int i = 0; i < 4; ++i) p.sections[static_cast<std::size_t>(i)] = params->sections[i];
    if (params->freq_factors_len < 0)
      invalid(where, "params->freq_factors_len must be >= 0, got " + std::to_string(params->freq_factors_len));
    if (params->freq_factors_len > 0) {
      require_non_null(params->freq_factors, where, "params->freq_factors");
      p.freq_factors.assign(params->freq_factors, params->freq_factors + params->freq_factors_len);
    }
    put_axis_freqs(rotary::ggml_frequencies(p), out);
  });
}

rotary_status_t rotary_spec_axis_frequencies(const rotary_spec_t* spec, int64_t seq_len, rotary_axis_freqs_t** out) {
  constexpr const char* where = "rotary_spec_axis_frequencies";
  return guarded(where, [&] {
    require_non_null(spec, where, "spec");
    require_non_null(out, where, "out");
    put_axis_freqs(rotary::mrope_frequencies(spec->spec, to_seq_len(seq_len, where)), out);
  });
}

rotary_status_t rotary_axis_freqs_describe(const rotary_axis_freqs_t* freqs, int64_t* pairs, int32_t* n_axes,
                                           rotary_pairing_t* pairing, double* attention_factor) {
  constexpr const char* where = "rotary_axis_freqs_describe";
  return guarded(where, [&] {
    require_non_null(freqs, where, "freqs");
    if (pairs) *pairs = static_cast<int64_t>(freqs->freqs.freqs.inv_freq.size());
    if (n_axes) *n_axes = freqs->freqs.n_axes;
    if (pairing) *pairing = static_cast<rotary_pairing_t>(freqs->freqs.pairing);
    if (attention_factor) *attention_factor = freqs->freqs.freqs.attention_factor;
  });
}

rotary_status_t rotary_axis_freqs_get(const rotary_axis_freqs_t* freqs, double* inv_freq, uint8_t* axis_of_freq,
                                      int64_t capacity) {
  constexpr const char* where = "rotary_axis_freqs_get";
  return guarded(where, [&] {
    require_non_null(freqs, where, "freqs");
    if (capacity < 0) invalid(where, "capacity must be >= 0, got " + std::to_string(capacity));
    const auto& f = freqs->freqs;
    const int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(f.freqs.inv_freq.size()));
    for (int64_t j = 0; j < n; ++j) {
      if (inv_freq) inv_freq[j] = f.freqs.inv_freq[static_cast<std::size_t>(j)];
      if (axis_of_freq) axis_of_freq[j] = f.axis_of_freq[static_cast<std::size_t>(j)];
    }
  });
}

void rotary_axis_freqs_free(rotary_axis_freqs_t* freqs) { delete freqs; }

rotary_status_t rotary_apply_axes(const rotary_axis_freqs_t* freqs, const rotary_apply_args_t* args) {
  constexpr const char* where = "rotary_apply_axes";
  return guarded(where, [&] {
    require_non_null(freqs, where, "freqs");
    rotary::ApplyArgs a = to_apply_args(args, where);
    rotary::apply_axes(freqs->freqs, a);
  });
}

rotary_status_t rotary_cp_positions(int64_t rank, int64_t cp_size, int64_t local_len, int64_t offset, int64_t* out) {
  constexpr const char* where = "rotary_cp_positions";
  return guarded(where, [&] {
    const std::vector<int64_t> pos = rotary::cp_positions({rank, cp_size}, local_len, offset);
    if (!pos.empty()) require_non_null(out, where, "out");
    std::copy(pos.begin(), pos.end(), out);
  });
}

rotary_status_t rotary_cp_positions_packed(int64_t rank, int64_t cp_size, const int64_t* cu_seqlens, int64_t n_cu,
                                           int64_t* out, int64_t capacity, int64_t* count) {
  constexpr const char* where = "rotary_cp_positions_packed";
  return guarded(where, [&] {
    require_non_null(cu_seqlens, where, "cu_seqlens");
    require_non_null(count, where, "count");
    if (n_cu < 1) invalid(where, "n_cu must be >= 1 (N+1 entries), got " + std::to_string(n_cu));
    if (capacity < 0) invalid(where, "capacity must be >= 0, got " + std::to_string(capacity));
    const std::vector<int64_t> pos =
        rotary::cp_positions_packed({rank, cp_size}, std::vector<int64_t>(cu_seqlens, cu_seqlens + n_cu));
    const int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(pos.size()));
    if (n > 0) require_non_null(out, where, "out");
    std::copy(pos.begin(), pos.begin() + n, out);
    *count = static_cast<int64_t>(pos.size());
  });
}

rotary_status_t rotary_permute_qk_weight(const rotary_tensor_t* src, const rotary_tensor_t* dst, int64_t n_heads,
                                         int64_t head_dim, int64_t rotary_dim, rotary_pairing_t from,
                                         rotary_pairing_t to) {
  constexpr const char* where = "rotary_permute_qk_weight";
  return guarded(where, [&] {
    require_non_null(src, where, "src");
    require_non_null(dst, where, "dst");
    if (src->data == nullptr) invalid(where, "src->data must not be NULL");
    if (dst->data == nullptr) invalid(where, "dst->data must not be NULL");
    rotary::QkPermutation p;
    p.n_heads = n_heads;
    p.head_dim = head_dim;
    p.rotary_dim = rotary_dim;
    p.from = to_pairing(from, where, "from", false);
    p.to = to_pairing(to, where, "to", false);
    rotary::permute_qk_weight(to_view(*src, where, "src"), to_view(*dst, where, "dst"), p);
  });
}

}  // extern "C"
