// The fuzz entry points (config parser, .npy reader, C API apply, Spec validation), shared by the libFuzzer binaries and the ctest replay.
//
// Each function takes arbitrary bytes and returns nullptr when every property held, or a description of
// the violated property. The libFuzzer drivers abort on a violation (a crash); the corpus replay test
// (tests/hostile/fuzz_replay_test.cc) reports it as a failure. Crashes under ASan/UBSan are found by
// the sanitizers themselves.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "npy.h"
#include "rotary/apply.h"
#include "rotary/config.h"
#include "rotary/freqs.h"
#include "rotary/rotary_c.h"
#include "rotary/spec.h"

namespace rotary::fuzz {

/// True when `s` is well-formed UTF-8: Python decodes every message, so a quote cut inside a character, or
/// raw bytes of the input copied into a message, is a defect.
inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    i += n;
  }
  return true;
}

// ------------------------------------------------------------------------------------------ config.json

/// spec_from_hf_config_json: only rotary::Error may escape; a returned Spec is valid and its
/// frequencies are finite (or computing them fails with rotary::Error).
inline const char* config_target(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Spec spec;
  try {
    spec = spec_from_hf_config_json(text, "fuzz.json");
  } catch (const Error& e) {
    if (std::string_view(e.what()).substr(0, 8) != "[rotary_") return "config error message lacks [rotary_...] prefix";
    // Bad values are quoted cut short: the message stays short whatever the input (4096 bytes here,
    // megabytes in tests/hostile/cpp_limits_hostile_test.cc).
    if (std::string_view(e.what()).size() > 700) return "config error message is not short";
    if (!valid_utf8(e.what())) return "config error message is not valid UTF-8";
    return nullptr;
  }
  try {
    spec.validate();
  } catch (const Error&) {
    return "spec_from_hf_config_json returned a spec that does not validate";
  }
  try {
    const Frequencies f = compute_frequencies(spec);
    if (static_cast<int64_t>(f.inv_freq.size()) != spec.effective_rotary_dim() / 2) return "inv_freq has the wrong size";
    for (double v : f.inv_freq)
      if (!std::isfinite(v) || v < 0) return "a validated spec gave a non-finite or negative frequency";
    if (!std::isfinite(f.attention_factor) || f.attention_factor <= 0) return "non-finite attention factor";
  } catch (const Error&) {
    return "a validated spec's frequencies could not be computed";  // Spec::validate evaluates them
  }
  return nullptr;
}

// ------------------------------------------------------------------------------------------ .npy

/// npy_parse: only rotary::Error(kIo) may escape; a parsed array is self-consistent and round-trips.
inline const char* npy_target(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  NpyArray a;
  try {
    a = npy_parse(bytes, "fuzz.npy");
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::kIo) return "npy_parse failed with a kind other than kIo";
    if (std::string_view(e.what()).size() > 700) return "npy error message is not short";
    if (!valid_utf8(e.what())) return "npy error message is not valid UTF-8";
    return nullptr;
  }
  for (int64_t d : a.shape)
    if (d < 0) return "npy_parse returned a negative dimension";
  int64_t n = 0;
  try {
    n = a.numel();  // 0 for any zero dim (the other dims may be huge), else bounded by the data size
  } catch (const Error&) {
    return "numel() failed on a parsed array";
  }
  if (static_cast<uint64_t>(n) * dtype_size(a.dtype) != a.data.size()) return "npy data size does not match its shape";
  if (a.shape.size() <= 4) {
    try {
      (void)a.view();  // strides of an empty array with huge dims must not overflow silently
    } catch (const Error& e) {
      if (e.kind() != Error::Kind::kInvalidArgument) return "view() failed with an unexpected kind";
    }
  }
  try {
    const NpyArray b = npy_parse(npy_serialize(a), "roundtrip.npy");
    if (b.shape != a.shape || b.dtype != a.dtype || b.data != a.data || b.is_uint16 != a.is_uint16)
      return "npy round trip changed the array";
  } catch (const Error&) {
    return "a parsed array could not be serialized and parsed back";
  }
  return nullptr;
}

// ------------------------------------------------------------------------------------------ Spec

/// Reads spec fields from bytes: each field byte picks a value in and around the valid range (typical
/// values mostly, edges and garbage sometimes). Missing bytes read as 0 (the first typical value).
class SpecReader {
 public:
  SpecReader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  /// One of `typical` for b < 192, else one of `edges`.
  template <class T, size_t A, size_t B>
  T pick(const T (&typical)[A], const T (&edges)[B]) {
    const uint8_t b = u8();
    return b < 192 ? typical[b % A] : edges[(b - 192) % B];
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
};

/// The spec's f32 output of rotating a [1, S, 1, D] tensor of values in [-1, 1] must be finite when
/// |x0*c - x1*s| <= 2 * attention_factor cannot overflow f32.
inline bool output_must_be_finite(double attention_factor) {
  return 2.0 * attention_factor <= static_cast<double>(std::numeric_limits<float>::max());
}

/// Spec::validate: random fields in and around the valid ranges. Only rotary::Error escapes, with a short
/// "[rotary_spec] ..." message; a spec that validates builds a Rope, gives finite frequencies for every
/// seq_len up to 2^31 and applies without error at positions up to 2^31 - 1, with finite outputs from
/// finite inputs (as long as 2 * attention_factor fits in f32).
inline const char* spec_target(const uint8_t* data, size_t size) {
  SpecReader r(data, size);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double kNaN = std::nan("");
  constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
  Spec s;
  static const int kTypes[] = {0, 1, 2, 3, 4, 5, 6};
  static const int kBadTypes[] = {7, -1};
  s.scaling.type = static_cast<RopeType>(r.pick(kTypes, kBadTypes));
  static const int64_t kHeadDims[] = {8, 2, 4, 6, 16, 32, 64, 128, 12, 256};
  static const int64_t kBadHeadDims[] = {0, 1, -8, 65536, 65538, 3, kI64Max, 1024};
  s.head_dim = r.pick(kHeadDims, kBadHeadDims);
  static const int64_t kRotary[] = {0, 0, 0, 2, 4, 6, 8, 16, 32, 64};
  static const int64_t kBadRotary[] = {1, 7, -2, 4096, kI64Max, 10};
  s.rotary_dim = r.pick(kRotary, kBadRotary);
  static const double kBases[] = {10000.0, 500000.0, 1e6, 100.0, 2.0, 1.5, 1e4 + 0.5, 50000.0};
  static const double kBadBases[] = {1.0, 0.999999, 1.000001, 1e-300, 1e-30, 1e-320, 1e300, 0.0, -1.0, kNaN, kInf, 0.5};
  s.base = r.pick(kBases, kBadBases);
  static const double kFactors[] = {0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 1.5, 40.0, 3.0};
  static const double kBadFactors[] = {0.5, 1e300, 1e15, 1e100, kInf, kNaN, -2.0, 1.0000001, 9e15};
  const double factor = r.pick(kFactors, kBadFactors);
  if (factor != 0.0) s.scaling.factor = factor;
  static const int64_t kMaxPos[] = {4096, 0, 2048, 131072, 8192, 64, 32768};
  static const int64_t kBadMaxPos[] = {1, 2, -1, int64_t(1) << 31, kI64Max, 3};
  s.max_position_embeddings = r.pick(kMaxPos, kBadMaxPos);
  static const int64_t kOrig[] = {0, 4096, 2048, 8192, 1024};
  static const int64_t kBadOrig[] = {1, 2, -5, kI64Max, (int64_t(1) << 31) - 1, 3};
  s.scaling.original_max_position_embeddings = r.pick(kOrig, kBadOrig);
  static const double kBetas[] = {32.0, 1.0, 0.0, 16.0, 64.0, 4.0};
  static const double kBadBetas[] = {-1.0, kNaN, kInf, 1e300, 1e-300};
  s.scaling.beta_fast = r.pick(kBetas, kBadBetas);
  s.scaling.beta_slow = r.pick(kBetas, kBadBetas);
  static const double kMscales[] = {0.0, 1.0, 0.707, 0.0, 2.0};
  static const double kBadMscales[] = {-10.0, -20.0, 1e300, kNaN, -1e300, 1e-300};
  const uint8_t ms = r.u8();
  if (ms & 1) s.scaling.mscale = r.pick(kMscales, kBadMscales);
  if (ms & 2) s.scaling.mscale_all_dim = r.pick(kMscales, kBadMscales);
  s.scaling.truncate = (ms & 4) == 0;
  static const double kAttn[] = {0.0, 1.0, 1.2, 0.5, 2.0};
  static const double kBadAttn[] = {1e38, 3.4028234663852886e38, 1e39, 1e-300, -1.0, kInf, kNaN, 1.7e38};
  const double af = r.pick(kAttn, kBadAttn);
  if (af != 0.0) s.scaling.attention_factor = af;
  static const double kLowHigh[] = {1.0, 4.0, 2.0, 8.0, 0.5};
  static const double kBadLowHigh[] = {0.0, -1.0, kNaN, 1e300, 1e-300};
  s.scaling.low_freq_factor = r.pick(kLowHigh, kBadLowHigh);
  s.scaling.high_freq_factor = r.pick(kLowHigh, kBadLowHigh);
  const uint8_t lists = r.u8();
  if (lists & 1) {
    static const double kList[] = {1.0, 1.0, 2.0, 0.5, 1.5, 4.0};
    static const double kBadList[] = {1e-320, 1e300, 0.0, -1.0, kNaN, 1e-30};
    const int64_t n = (s.rotary_dim > 0 ? s.rotary_dim : s.head_dim) / 2 + ((lists & 2) ? 1 : 0);
    for (int64_t i = 0; i < std::min<int64_t>(std::max<int64_t>(n, 0), 4096); ++i) {
      s.scaling.short_factor.push_back(r.pick(kList, kBadList));
      s.scaling.long_factor.push_back(r.pick(kList, kBadList));
    }
  }
  const uint8_t mr = r.u8();
  if (mr & 1) {
    const int64_t half = (s.rotary_dim > 0 ? s.rotary_dim : s.head_dim) / 2;
    const int64_t a = half > 0 ? (mr >> 1) % (half + 1) : 0, b = half > 0 ? (mr >> 4) % (half - a + 1) : 0;
    s.mrope.section = {a, b, half - a - b + ((mr & 0x80) ? 1 : 0)};
    s.mrope.interleaved = (mr & 0x40) != 0;
  }
  static const double kPrf[] = {1.0, 0.5, 0.25, 1.0};
  static const double kBadPrf[] = {0.0, 1.5, kNaN, -0.5};
  s.partial_rotary_factor = r.pick(kPrf, kBadPrf);
  s.pairing = (r.u8() & 1) ? Pairing::kInterleaved : Pairing::kHalfSplit;

  try {
    s.validate();
  } catch (const Error& e) {
    const std::string_view msg(e.what());
    if (msg.substr(0, 14) != "[rotary_spec] ") return "Spec::validate error message lacks the [rotary_spec] prefix";
    if (msg.size() > 600) return "Spec::validate message is not short";
    if (e.kind() != Error::Kind::kInvalidArgument) return "Spec::validate failed with a kind other than kInvalidArgument";
    return nullptr;
  } catch (...) {
    return "Spec::validate threw something other than rotary::Error";
  }
  // Valid: every later use must work.
  const Spec n = s.normalized();
  const int64_t D = n.head_dim, R = n.effective_rotary_dim();
  double attention_factor = 1.0;
  try {
    for (std::optional<int64_t> len : {std::optional<int64_t>(), std::optional<int64_t>(1), std::optional<int64_t>(4097),
                                       std::optional<int64_t>(int64_t(1) << 31)}) {
      const Frequencies f = compute_frequencies(n, len);
      if (static_cast<int64_t>(f.inv_freq.size()) != R / 2) return "inv_freq has the wrong size";
      for (double v : f.inv_freq)
        if (!std::isfinite(v) || v < 0 || v > std::numeric_limits<float>::max()) return "valid spec: inv_freq not finite / f32";
      if (!std::isfinite(f.attention_factor) || !(f.attention_factor > 0) ||
          f.attention_factor > std::numeric_limits<float>::max())
        return "valid spec: attention_factor not finite / f32";
      attention_factor = f.attention_factor;
    }
  } catch (const Error&) {
    return "compute_frequencies failed for a spec that validated";
  }
  const uint8_t m = r.u8();
  RopeOptions o;
  // Tables only for small heads (a table of a 64k head grows by megabytes per row).
  o.mode = D > 512 ? CosSinMode::kOnTheFly : static_cast<CosSinMode>(m % 3);
  o.table.max_positions = (m & 4) ? 300 : int64_t(1) << 22;
  if (o.mode == CosSinMode::kTable) o.table.max_positions = 1 << 14;  // table-only mode: positions below
  try {
    Rope rope(n, o);
    static const int64_t kPositions[] = {0, 1, 5, 100, 4095, 4096, 4097, 8191, 2047, 2049};
    static const int64_t kFarPositions[] = {(int64_t(1) << 31) - 3, 1 << 20, 131071, 131072, 65536, 1 << 24};
    const bool table_only = o.mode == CosSinMode::kTable;
    for (int call = 0; call < 3; ++call) {
      int64_t pos = r.pick(kPositions, kFarPositions);
      if (table_only) pos %= o.table.max_positions - 3;
      const int64_t S = 3;
      std::vector<float> x(static_cast<size_t>(S * D));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(r.u8()) - 128) / 128.0f;
      ApplyArgs a;
      a.q = TensorView::contiguous(x.data(), DType::kF32, {1, S, 1, D});
      a.threads = 1;
      std::vector<int64_t> ids;
      if (n.mrope.enabled()) {
        for (int axis = 0; axis < 3; ++axis)
          for (int64_t t = 0; t < S; ++t) ids.push_back(pos + t + (pos < (int64_t(1) << 30) ? axis % 2 : 0));
        a.positions = Positions::from_ids(TensorView::contiguous(ids.data(), DType::kI64, {3, 1, S}));
      } else {
        a.positions = Positions::contiguous(pos);
      }
      static const int64_t kSeqLens[] = {0, 0, 1, 4096, 4097};
      static const int64_t kFarSeqLens[] = {int64_t(1) << 31, 100000};
      const int64_t sl = r.pick(kSeqLens, kFarSeqLens);
      if (sl > 0) a.seq_len = sl;
      rope.apply(a);
      if (output_must_be_finite(attention_factor))
        for (float v : x)
          if (!std::isfinite(v)) return "a valid spec produced a non-finite output from finite input";
    }
  } catch (const Error& e) {
    (void)e;
    return "a spec that validated failed when applied";
  }
  return nullptr;
}

// ------------------------------------------------------------------------------------------ C API apply

/// Reads the fuzz input as a stream of bytes; past the end every read returns 0.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  int8_t i8() { return static_cast<int8_t>(u8()); }
  /// A position-like integer: mostly small, sometimes a hostile edge value.
  int64_t position() {
    static const int64_t kEdges[] = {-1, (int64_t(1) << 31) - 1, int64_t(1) << 31, std::numeric_limits<int64_t>::max(),
                                     std::numeric_limits<int64_t>::min(), 1000, 70000, -70000};
    const uint8_t b = u8();
    if (b < 232) return b % 64;
    return kEdges[(b - 232) % 8];
  }
  double fraction() {  // finite mostly; NaN/inf/negative/huge sometimes
    const uint8_t b = u8();
    switch (b) {
      case 255: return std::nan("");
      case 254: return INFINITY;
      case 253: return -0.5;
      case 252: return 3.0e9;
      default: return b / 4.0;
    }
  }
  float value() { return (static_cast<float>(u8()) - 128.0f) / 16.0f; }  // [-8, 8), finite

 private:
  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
};

inline uint16_t f32_to_half_bits(float f, bool bf16) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (bf16) return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  // Values here are small and exact enough: truncating conversion to binary16 (normal range only).
  const uint32_t sign = (u >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((u >> 13) & 0x3ff));
}

inline bool half_bits_finite(uint16_t h, bool bf16) {
  return bf16 ? ((h >> 7) & 0xff) != 0xff : ((h >> 10) & 0x1f) != 0x1f;
}

/// One tensor argument: its own buffer (sentinel-filled), a view, and whether it is an output.
struct FuzzTensor {
  std::vector<unsigned char> buf;
  rotary_tensor_t t{};
};

inline size_t elem_size(int32_t dt) {
  switch (dt) {
    case ROTARY_DTYPE_F32: case ROTARY_DTYPE_I32: return 4;
    case ROTARY_DTYPE_F16: case ROTARY_DTYPE_BF16: return 2;
    case ROTARY_DTYPE_F64: case ROTARY_DTYPE_I64: return 8;
    default: return 4;  // invalid dtypes: the library must reject them; the buffer size is irrelevant
  }
}

/// Largest element offset of a view with non-negative strides (0 if any dim is empty); -1 if it is huge.
inline int64_t view_extent(const rotary_tensor_t& t) {
  int64_t e = 0;
  for (int i = 0; i < t.rank && i < 4; ++i) {
    if (t.shape[i] == 0) return 0;
    e += (t.shape[i] - 1) * (t.strides[i] < 0 ? -t.strides[i] : t.strides[i]);
  }
  return e > (int64_t(1) << 20) ? -1 : e;
}

/// Builds a view of `rank` dims with shape `shape`; strides contiguous or (mode != 0) read from the input
/// (possibly zero or negative). Allocates extent + 1 elements (+ `slack` elements) filled with 0xA5.
inline void make_tensor(FuzzTensor& ft, Reader& r, int32_t dtype, int rank, const int64_t* shape, bool hostile_strides,
                        int64_t slack = 0) {
  ft.t.dtype = dtype;
  ft.t.rank = rank;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    ft.t.shape[i] = shape[i];
    ft.t.strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  if (hostile_strides)
    for (int i = 0; i < rank; ++i)
      if (r.u8() & 1) ft.t.strides[i] = r.i8();
  int64_t extent = view_extent(ft.t);
  if (extent < 0) extent = 0;  // a huge view over a tiny buffer: must be rejected (overlap/zero stride)
  const size_t n = static_cast<size_t>(extent + 1 + slack) * elem_size(dtype);
  ft.buf.assign(n, 0xA5);
  // Negative strides walk backwards: start at the end so a (wrongly accepted) view would still be valid.
  int64_t start = 0;
  for (int i = 0; i < rank; ++i)
    if (ft.t.strides[i] < 0 && ft.t.shape[i] > 0) start += (ft.t.shape[i] - 1) * -ft.t.strides[i];
  if (start > extent) start = 0;
  ft.t.data = ft.buf.data() + static_cast<size_t>(start) * elem_size(dtype);
}

/// Every element of `t` (non-negative strides assumed; views with negative strides are rejected earlier).
template <class F>
void for_each_element(const rotary_tensor_t& t, F&& f) {
  int64_t n[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0};
  for (int i = 0; i < t.rank; ++i) {
    n[i] = t.shape[i];
    s[i] = t.strides[i];
  }
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c)
        for (int64_t d = 0; d < n[3]; ++d) f(a * s[0] + b * s[1] + c * s[2] + d * s[3]);
}

inline void fill_values(FuzzTensor& ft, Reader& r) {
  if (ft.t.data == nullptr || view_extent(ft.t) < 0) return;
  for (int i = 0; i < ft.t.rank; ++i)
    if (ft.t.strides[i] < 0) return;
  unsigned char* base = static_cast<unsigned char*>(ft.t.data);
  for_each_element(ft.t, [&](int64_t off) {
    unsigned char* p = base + off * static_cast<int64_t>(elem_size(ft.t.dtype));
    const float v = r.value();
    switch (ft.t.dtype) {
      case ROTARY_DTYPE_F32: std::memcpy(p, &v, 4); break;
      case ROTARY_DTYPE_F64: { const double d = v; std::memcpy(p, &d, 8); break; }
      case ROTARY_DTYPE_F16: { const uint16_t h = f32_to_half_bits(v, false); std::memcpy(p, &h, 2); break; }
      case ROTARY_DTYPE_BF16: { const uint16_t h = f32_to_half_bits(v, true); std::memcpy(p, &h, 2); break; }
      default: break;
    }
  });
}

inline bool element_finite(const unsigned char* p, int32_t dt) {
  switch (dt) {
    case ROTARY_DTYPE_F32: { float v; std::memcpy(&v, p, 4); return std::isfinite(v); }
    case ROTARY_DTYPE_F64: { double v; std::memcpy(&v, p, 8); return std::isfinite(v); }
    case ROTARY_DTYPE_F16: case ROTARY_DTYPE_BF16: {
      uint16_t h; std::memcpy(&h, p, 2); return half_bits_finite(h, dt == ROTARY_DTYPE_BF16);
    }
    default: return true;
  }
}

/// Decodes the input into one rotary_rope_apply or rotary_apply_cos_sin call on small tensors.
/// Properties: no crash or sanitizer report; a failure leaves every buffer bit-identical and sets a
/// "[rotary..." message; a success writes only the output elements, and they are finite.
inline const char* apply_target(const uint8_t* data, size_t size) {
  Reader r(data, size);
  const uint8_t b0 = r.u8(), b1 = r.u8(), b2 = r.u8();
  const bool use_cos_sin = b0 & 1;
  const int mode = ((b0 >> 1) & 3) % 3;
  const int q_out_mode = (b0 >> 3) & 3;  // 0 absent, 1 == q, 2 separate, 3 alias inside q's buffer
  const bool has_k = (b0 >> 5) & 1;
  const int k_out_mode = (b0 >> 6) & 3;  // 0 absent, 1 separate, 2 alias inside q's buffer, 3 == k
  const int32_t layout = b1 % 4;          // 3: invalid
  static const int32_t kDtypes[8] = {ROTARY_DTYPE_F32, ROTARY_DTYPE_F16, ROTARY_DTYPE_BF16, ROTARY_DTYPE_F64,
                                     ROTARY_DTYPE_F32, ROTARY_DTYPE_I32, ROTARY_DTYPE_F32, 17};
  const int32_t dtype = kDtypes[(b1 >> 2) & 7];
  const int32_t pairing = static_cast<int32_t>((b1 >> 5) & 3) - 1;  // -1..2
  const int32_t direction = b2 & 1 ? ROTARY_DIRECTION_INVERSE : ROTARY_DIRECTION_FORWARD;
  const int32_t backend = ((b2 >> 1) & 1) ? ROTARY_BACKEND_REFERENCE : ROTARY_BACKEND_CPU;
  const int32_t pos_kind = (b2 >> 2) & 3;  // 3: invalid
  const bool hostile_strides = (b2 >> 4) & 1;
  const int32_t threads = (b2 >> 5) & 1 ? 2 : 1;

  const int64_t B = r.u8() % 4, S = r.u8() % 7, H = r.u8() % 4, D = r.u8() % 17, Hk = r.u8() % 4;
  const bool thd = layout == ROTARY_LAYOUT_THD;
  const int64_t T = B * S;
  auto act_shape = [&](int64_t h, int64_t* out) -> int {
    if (thd) { out[0] = T; out[1] = h; out[2] = D; return 3; }
    if (layout == ROTARY_LAYOUT_BHSD) { out[0] = B; out[1] = h; out[2] = S; out[3] = D; return 4; }
    out[0] = B; out[1] = S; out[2] = h; out[3] = D; return 4;
  };
  int64_t qs[4], ks[4];
  const int qrank = act_shape(H, qs);
  const int krank = act_shape(Hk, ks);
  if (r.u8() == 7) ks[krank - 1] += 2;  // occasionally a k whose head_dim differs

  FuzzTensor q, q_out, k, k_out;
  const int64_t q_extent_guess = 2 * (T * (H + 1) * (D + 1) + 64);
  make_tensor(q, r, dtype, qrank, qs, hostile_strides, q_extent_guess);
  fill_values(q, r);
  if (q_out_mode == 2) make_tensor(q_out, r, dtype, qrank, qs, hostile_strides);
  if (has_k) {
    make_tensor(k, r, dtype, krank, ks, hostile_strides);
    fill_values(k, r);
    if (k_out_mode == 1) make_tensor(k_out, r, dtype, krank, ks, hostile_strides);
  }
  rotary_apply_args_t a;
  rotary_apply_args_init(&a);
  a.q = q.t;
  if (q_out_mode == 1) a.q_out = q.t;
  if (q_out_mode == 2) a.q_out = q_out.t;
  if (q_out_mode == 3) {  // same shape, shifted inside q's (slack-extended) buffer: partial overlap or disjoint
    a.q_out = q.t;
    const int64_t shift = r.u8() % (q_extent_guess / 2 + 1);
    a.q_out.data = static_cast<unsigned char*>(q.t.data) + shift * static_cast<int64_t>(elem_size(dtype));
    if (view_extent(a.q_out) < 0 || shift + view_extent(a.q_out) >= q_extent_guess) a.q_out = q.t;
  }
  if (has_k) {
    a.k = k.t;
    if (k_out_mode == 1) a.k_out = k_out.t;
    if (k_out_mode == 3) a.k_out = k.t;
    if (k_out_mode == 2) {  // k's output placed inside q's buffer
      rotary_tensor_t t = k.t;
      const int64_t shift = r.u8() % (q_extent_guess / 2 + 1);
      t.data = static_cast<unsigned char*>(q.t.data) + shift * static_cast<int64_t>(elem_size(dtype));
      if (view_extent(t) >= 0 && shift + view_extent(t) < q_extent_guess && t.dtype == q.t.dtype) a.k_out = t;
    }
  }
  a.layout = layout;
  a.pairing = pairing;
  a.direction = direction;
  a.backend = backend;
  a.threads = threads;
  a.positions.kind = pos_kind;
  const uint8_t sl = r.u8();
  a.seq_len = sl < 200 ? -1 : (sl < 250 ? sl : (sl == 250 ? 0 : -5));

  // Positions.
  FuzzTensor ids, cu, offs, bo;
  if (pos_kind == ROTARY_POSITIONS_OFFSET || pos_kind == 3) {
    a.positions.offset = r.position();
    if (r.u8() & 1) {
      const int64_t shape[1] = {B + (r.u8() == 3 ? 1 : 0)};
      make_tensor(bo, r, ROTARY_DTYPE_I64, 1, shape, false);
      int64_t* p = reinterpret_cast<int64_t*>(bo.t.data);
      for (int64_t i = 0; i < shape[0]; ++i) p[i] = r.position();
      a.positions.batch_offsets = bo.t;
    }
  } else if (pos_kind == ROTARY_POSITIONS_IDS) {
    const uint8_t v = r.u8();
    static const int32_t kIdTypes[5] = {ROTARY_DTYPE_I64, ROTARY_DTYPE_I32, ROTARY_DTYPE_F32, ROTARY_DTYPE_F64,
                                        ROTARY_DTYPE_F16};
    const int32_t idt = kIdTypes[v % 5];
    int64_t shape[3];
    int rank;
    switch ((v / 5) % 4) {
      case 0: rank = thd ? 1 : 2; shape[0] = thd ? T : B; shape[1] = S; break;
      case 1: rank = 1; shape[0] = thd ? T : S; break;
      case 2: rank = thd ? 2 : 3; shape[0] = 3; shape[1] = thd ? T : B; shape[2] = S; break;
      default: rank = 1; shape[0] = (thd ? T : S) + 1; break;
    }
    make_tensor(ids, r, idt, rank, shape, hostile_strides && (v & 0x80));
    if (view_extent(ids.t) >= 0) {
      bool neg = false;
      for (int i = 0; i < rank; ++i) neg |= ids.t.strides[i] < 0;
      if (!neg)
        for_each_element(ids.t, [&](int64_t off) {
          unsigned char* p = static_cast<unsigned char*>(ids.t.data) + off * static_cast<int64_t>(elem_size(idt));
          if (idt == ROTARY_DTYPE_I64) { const int64_t x = r.position(); std::memcpy(p, &x, 8); }
          else if (idt == ROTARY_DTYPE_I32) { const int32_t x = static_cast<int32_t>(r.position()); std::memcpy(p, &x, 4); }
          else if (idt == ROTARY_DTYPE_F32) { const float x = static_cast<float>(r.fraction()); std::memcpy(p, &x, 4); }
          else if (idt == ROTARY_DTYPE_F64) { const double x = r.fraction(); std::memcpy(p, &x, 8); }
        });
    }
    a.positions.ids = ids.t;
  } else {  // packed
    const int64_t n = r.u8() % 5 + 1;
    const int64_t shape[1] = {n};
    make_tensor(cu, r, ROTARY_DTYPE_I32, 1, shape, false);
    int32_t* p = reinterpret_cast<int32_t*>(cu.t.data);
    const bool raw = r.u8() & 1;
    int32_t acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t step = static_cast<int32_t>(r.u8() % 8) - (raw ? 3 : 0);
      acc = i == 0 ? (raw ? step : 0) : acc + step;
      p[i] = acc;
    }
    if (!raw) p[n - 1] = static_cast<int32_t>(T);  // mostly consistent: last = T
    a.positions.cu_seqlens = cu.t;
    if (r.u8() & 1) {
      const int64_t s2[1] = {n - 1};
      make_tensor(offs, r, ROTARY_DTYPE_I64, 1, s2, false);
      int64_t* o = reinterpret_cast<int64_t*>(offs.t.data);
      for (int64_t i = 0; i < n - 1; ++i) o[i] = r.position();
      if (n - 1 > 0) a.positions.seq_offsets = offs.t;
    }
  }

  // Snapshot every buffer.
  std::vector<FuzzTensor*> all = {&q, &q_out, &k, &k_out, &ids, &cu, &offs, &bo};
  FuzzTensor cos, sin;
  rotary_spec_t* spec = nullptr;
  rotary_rope_t* rope = nullptr;
  rotary_status_t st;
  if (use_cos_sin) {
    const uint8_t c = r.u8();
    const int64_t half = (c & 1) ? r.u8() % 10 : D / 2;
    static const int32_t kCosTypes[4] = {ROTARY_DTYPE_F32, ROTARY_DTYPE_F16, ROTARY_DTYPE_BF16, ROTARY_DTYPE_F64};
    const int32_t ct = kCosTypes[(c >> 1) & 3], st_t = (c & 0x40) ? kCosTypes[(c >> 3) & 3] : ct;
    int64_t shape[3];
    int rank;
    if (c & 0x20) { rank = 3; shape[0] = B; shape[1] = thd ? T : S; shape[2] = half; }
    else { rank = 2; shape[0] = r.u8() % 70; shape[1] = half; }
    make_tensor(cos, r, ct, rank, shape, false);
    make_tensor(sin, r, st_t, rank, shape, false);
    for (FuzzTensor* t : {&cos, &sin})
      for_each_element(t->t, [&](int64_t off) {
        unsigned char* p = static_cast<unsigned char*>(t->t.data) + off * static_cast<int64_t>(elem_size(t->t.dtype));
        const float v = (static_cast<float>(r.u8()) - 128.0f) / 85.0f;  // [-1.5, 1.5]
        if (t->t.dtype == ROTARY_DTYPE_F32) std::memcpy(p, &v, 4);
        else if (t->t.dtype == ROTARY_DTYPE_F64) { const double d = v; std::memcpy(p, &d, 8); }
        else { const uint16_t h = f32_to_half_bits(v, t->t.dtype == ROTARY_DTYPE_BF16); std::memcpy(p, &h, 2); }
      });
    all.push_back(&cos);
    all.push_back(&sin);
  } else {
    rotary_spec_desc_t d;
    rotary_spec_desc_init(&d);
    const uint8_t s0 = r.u8(), s1 = r.u8();
    d.head_dim = (s0 & 1) ? r.u8() % 17 : D;
    d.rotary_dim = (s0 & 2) ? r.u8() % 18 : 0;
    d.max_position_embeddings = 32;
    d.pairing = (s0 >> 2) & 1;
    static const int32_t kTypes[6] = {ROTARY_ROPE_DEFAULT, ROTARY_ROPE_LINEAR, ROTARY_ROPE_DYNAMIC, ROTARY_ROPE_YARN,
                                      ROTARY_ROPE_LLAMA3, ROTARY_ROPE_DEFAULT};
    d.rope_type = kTypes[s1 % 6];
    d.factor = 1.0 + (s1 >> 4);
    int64_t sections[3] = {0, 0, 0};
    if (s0 & 8) {
      for (int64_t& x : sections) x = r.u8() % 6;
      d.mrope_section = sections;
      d.mrope_section_len = 3;
      d.mrope_interleaved = (s0 >> 4) & 1;
    }
    if (rotary_spec_create(&d, &spec) != ROTARY_OK) return nullptr;
    rotary_rope_options_t o;
    rotary_rope_options_init(&o);
    o.mode = mode;
    o.max_positions = r.u8() % 80;
    if (rotary_rope_create(spec, &o, &rope) != ROTARY_OK) {
      rotary_spec_free(spec);
      return "rotary_rope_create failed for a valid spec and options";
    }
  }
  std::vector<std::vector<unsigned char>> before;
  for (FuzzTensor* t : all) before.push_back(t->buf);

  st = use_cos_sin ? rotary_apply_cos_sin(&cos.t, &sin.t, &a) : rotary_rope_apply(rope, &a);
  rotary_rope_free(rope);
  rotary_spec_free(spec);

  if (st < ROTARY_OK || st > ROTARY_ERROR_INTERNAL) return "status outside the documented codes";
  if (st == ROTARY_ERROR_INTERNAL) return "an apply call reported an internal error";
  if (st != ROTARY_OK) {
    if (std::string_view(rotary_last_error()).substr(0, 7) != "[rotary") return "error message lacks [rotary prefix";
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i]->buf != before[i]) return "a failed call changed a buffer (half-written)";
    return nullptr;
  }
  // Success: the outputs are exactly the writable bytes, and they are finite.
  auto mark = [&](const rotary_tensor_t& out, std::vector<std::vector<bool>>& masks) -> const char* {
    if (out.data == nullptr) return nullptr;
    for (size_t i = 0; i < all.size(); ++i) {
      const unsigned char* lo = all[i]->buf.data();
      const unsigned char* p = static_cast<const unsigned char*>(out.data);
      if (all[i]->buf.empty() || p < lo || p >= lo + all[i]->buf.size()) continue;
      const size_t es = elem_size(out.dtype);
      const char* err = nullptr;
      for_each_element(out, [&](int64_t off) {
        const int64_t byte = (p - lo) + off * static_cast<int64_t>(es);
        if (byte < 0 || static_cast<size_t>(byte) + es > all[i]->buf.size()) { err = "accepted view lies outside its buffer"; return; }
        for (size_t b = 0; b < es; ++b) masks[i][static_cast<size_t>(byte) + b] = true;
        if (!element_finite(lo + byte, out.dtype)) err = "OK result holds a non-finite value";
      });
      return err;
    }
    return "output pointer not inside any buffer";
  };
  std::vector<std::vector<bool>> masks;
  for (FuzzTensor* t : all) masks.emplace_back(t->buf.size(), false);
  const rotary_tensor_t& qo = a.q_out.data ? a.q_out : a.q;
  if (const char* e = mark(qo, masks)) return e;
  if (a.k.data) {
    const rotary_tensor_t& ko = a.k_out.data ? a.k_out : a.k;
    if (const char* e = mark(ko, masks)) return e;
  }
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t b = 0; b < all[i]->buf.size(); ++b)
      if (!masks[i][b] && all[i]->buf[b] != before[i][b]) return "a successful call wrote outside its output elements";
  return nullptr;
}

}  // namespace rotary::fuzz
