// Apply with fp8 outputs (issue 20.6): rotation into f32 scratch, then fp8 stores with the cache writer's encoder.
#include "engine/fp8_output.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/messages.h"
#include "engine/overlap.h"
#include "engine/plan_request.h"
#include "engine/tensor_checks.h"
#include "plan/dtype_scalar.h"
#include "plan/quantize.h"

namespace rotary::detail {
namespace {

[[noreturn]] void invalid(const std::string& msg) { detail::invalid(kApplyWhere, msg); }

bool is_fp8_out(const TensorView& v) { return !absent(v) && is_fp8(v.dtype); }

/// One fp8 output: its input, the f32 scratch holding the input (then the rotated values), and its scale.
struct Fp8Out {
  const TensorView* in = nullptr;
  const TensorView* out = nullptr;
  float scale = 1.0f;
  std::vector<float> scratch;
  TensorView scratch_view;
};

/// Checks an fp8 output against its input (the rest of the call is checked by the apply it runs).
void check_fp8_out(const TensorView& out, const TensorView& in, const char* name, const char* in_name, float scale,
                   const char* scale_name, Layout layout, Backend backend) {
  if (absent(in)) invalid(std::string(name) + " is given but " + in_name + " is absent, got " + name + " shape " + shape_str(out));
  check_view(out, name);
  check_view(in, in_name);
  if (out.rank != expected_rank(layout))
    invalid(std::string(name) + " must have rank " + str(expected_rank(layout)) + " " + layout_dims(layout) + ", got rank " +
            str(out.rank));
  if (in.rank != out.rank)
    invalid(std::string(name) + " shape must equal " + in_name + " shape " + shape_str(in) + ", got " + shape_str(out));
  for (int i = 0; i < out.rank; ++i)
    if (out.shape[i] != in.shape[i])
      invalid(std::string(name) + " shape must equal " + in_name + " shape " + shape_str(in) + ", got " + shape_str(out));
  if (!(std::isfinite(scale) && scale > 0.0f))
    invalid(std::string(scale_name) + " must be finite and > 0 for an fp8 " + name + ", got " + num(scale));
  if (backend == Backend::kCuda)
    fail(Error::Kind::kUnsupported, kApplyWhere, std::string(name) + " dtype " + dtype_name(out.dtype) +
                                                     " is a CPU feature; backend cuda was requested");
  check_no_self_overlap(out, name);
  if (activations_overlap(in, out, layout))
    invalid(std::string(name) + " (fp8) must not overlap " + in_name + " (rotating in place needs one dtype)");
}

/// Calls f(input element offset, output element offset) for every element, in canonical (b, s, h, d) order.
template <class F>
void for_each_element(const TensorView& in, const TensorView& out, Layout layout, F&& f) {
  const Canon ci = canonical(in, layout), co = canonical(out, layout);
  for (int64_t b = 0; b < ci.B; ++b)
    for (int64_t s = 0; s < ci.S; ++s)
      for (int64_t h = 0; h < ci.H; ++h)
        for (int64_t d = 0; d < ci.D; ++d)
          f(b * ci.sb + s * ci.ss + h * ci.sh + d * ci.sd, b * co.sb + s * co.ss + h * co.sh + d * co.sd);
}

}  // namespace

bool has_fp8_output(const ApplyArgs& args) { return is_fp8_out(args.q_out) || is_fp8_out(args.k_out); }

void apply_fp8_outputs(const ApplyArgs& args, const std::function<void(const ApplyArgs&)>& rotate) {
  const int layout_i = static_cast<int>(args.layout);
  if (layout_i < 0 || layout_i > 2) invalid("layout must be bshd, bhsd or thd, got " + str(layout_i));
  Fp8Out outs[2];
  int n = 0;
  ApplyArgs inner = args;
  if (is_fp8_out(args.q_out)) {
    check_fp8_out(args.q_out, args.q, "q_out", "q", args.q_out_scale, "q_out_scale", args.layout, args.backend);
    outs[n++] = Fp8Out{&args.q, &args.q_out, args.q_out_scale, {}, {}};
  }
  if (is_fp8_out(args.k_out)) {
    check_fp8_out(args.k_out, args.k, "k_out", "k", args.k_out_scale, "k_out_scale", args.layout, args.backend);
    outs[n++] = Fp8Out{&args.k, &args.k_out, args.k_out_scale, {}, {}};
  }
  for (int i = 0; i < n; ++i) {  // an fp8 output shares no byte with any other tensor of the call
    const std::pair<const TensorView*, const char*> others[] = {
        {&args.q, "q"}, {&args.k, "k"}, {&args.q_out, "q_out"}, {&args.k_out, "k_out"}};
    const char* name = outs[i].out == &args.q_out ? "q_out" : "k_out";
    for (const auto& [t, tname] : others)
      if (t != outs[i].out && t != outs[i].in && !absent(*t)) {
        check_view(*t, tname);
        if (t->rank == expected_rank(args.layout) && activations_overlap(*t, *outs[i].out, args.layout))
          invalid(std::string(name) + " (fp8) must not overlap " + tname);
      }
  }
  for (int i = 0; i < n; ++i) {  // the input widened to contiguous f32 (exact), rotated in place by `rotate`
    Fp8Out& o = outs[i];
    const TensorView& in = *o.in;
    if (!is_floating(in.dtype) || in.dtype == DType::kF64)
      invalid_dtype(kApplyWhere, std::string(o.out == &args.q_out ? "q" : "k") +
                                     " dtype must be f32, f16 or bf16 for an fp8 output, got " + dtype_name(in.dtype));
    int64_t numel = 1;
    for (int i = 0; i < in.rank; ++i) numel *= in.shape[i];
    o.scratch.resize(static_cast<size_t>(numel));
    TensorView& sv = o.scratch_view;  // contiguous f32 of in's shape
    sv.data = o.scratch.data();
    sv.dtype = DType::kF32;
    sv.rank = in.rank;
    int64_t stride = 1;
    for (int i = in.rank - 1; i >= 0; --i) {
      sv.shape[i] = in.shape[i];
      sv.strides[i] = stride;
      stride *= in.shape[i];
    }
    for_each_element(in, o.scratch_view, args.layout, [&](int64_t src, int64_t dst) {
      o.scratch[static_cast<size_t>(dst)] = static_cast<float>(load_as_double(in.data, in.dtype, src));
    });
    if (o.in == &args.q) { inner.q = o.scratch_view; inner.q_out = TensorView{}; }
    else { inner.k = o.scratch_view; inner.k_out = TensorView{}; }
  }
  rotate(inner);  // validates the whole call (positions, spec, the other tensors) before writing anything
  for (int i = 0; i < n; ++i) {
    const Fp8Out& o = outs[i];
    auto* dst = static_cast<uint8_t*>(o.out->data);
    const DType dt = o.out->dtype;
    for_each_element(o.scratch_view, *o.out, args.layout, [&](int64_t src, int64_t d) {
      dst[d] = quantize_fp8(o.scratch[static_cast<size_t>(src)], o.scale, dt);
    });
  }
}

}  // namespace rotary::detail
