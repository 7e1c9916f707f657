// ONNX RotaryEmbedding-23: validates the node's attributes/inputs and maps them onto one apply_cos_sin call.
#include "rotary/onnx.h"

#include <string>
#include <utility>

#include "core/messages.h"
#include "engine/overlap.h"
#include "engine/tensor_checks.h"

namespace rotary {
namespace {

constexpr const char* kWhere = "onnx_rotary_embedding";

[[noreturn]] void invalid(const std::string& message) { fail(Error::Kind::kInvalidArgument, kWhere, message); }

using detail::shape_str;

/// Reads a 3-D [B, S, num_heads * head_size] view as 4-D [B, S, num_heads, head_size] (BSHD).
TensorView split_heads(const TensorView& t, int64_t num_heads, int64_t head_size) {
  TensorView v = t;
  v.rank = 4;
  v.shape[2] = num_heads;
  v.shape[3] = head_size;
  v.strides[3] = t.strides[2];
  v.strides[2] = t.strides[2] * head_size;
  return v;
}

/// The cache restricted to its first `half` columns (the function body's Slice).
TensorView first_columns(const TensorView& t, int64_t half, const char* name) {
  const int64_t width = t.shape[t.rank - 1];
  if (width < half)
    invalid(std::string(name) + " last dimension must be rotary_embedding_dim/2 = " + std::to_string(half) +
            ", got shape " + shape_str(t));
  TensorView v = t;
  v.shape[v.rank - 1] = half;
  return v;
}

bool identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/// Rethrows an error of the apply call the node maps onto in the node's own names: [onnx_rotary_embedding],
/// X for q, Y for q_out, position_ids for positions.ids, cos_cache / sin_cache for cos / sin (whole words only).
[[noreturn]] void rethrow_in_node_names(const Error& e) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"positions.ids", "position_ids"}, {"q_out", "Y"}, {"q", "X"}, {"cos", "cos_cache"}, {"sin", "sin_cache"}};
  std::string in = e.what(), out;
  const std::string apply_where = "[rotary_apply]";
  size_t i = 0;
  if (in.compare(0, apply_where.size(), apply_where) == 0) {
    out = std::string("[") + kWhere + "]";
    i = apply_where.size();
  }
  while (i < in.size()) {
    bool renamed = false;
    if (i == 0 || !(identifier_char(in[i - 1]) || in[i - 1] == '.')) {
      for (const auto& [from, to] : kNames) {
        const size_t n = std::char_traits<char>::length(from);
        if (in.compare(i, n, from) == 0 && (i + n == in.size() || !(identifier_char(in[i + n]) || in[i + n] == '.'))) {
          out += to;
          i += n;
          renamed = true;
          break;
        }
      }
    }
    if (!renamed) out += in[i++];
  }
  throw Error(e.kind(), out, e.cause());
}

}  // namespace

void onnx_rotary_embedding(const OnnxRotaryArgs& a) {
  if (!a.x.present()) invalid("input X is missing");
  if (!a.y.present()) invalid("output Y is missing");
  if (!a.cos_cache.present()) invalid("input cos_cache is missing");
  if (!a.sin_cache.present()) invalid("input sin_cache is missing");
  if (a.x.rank != 3 && a.x.rank != 4)
    invalid("X must have rank 3 [batch, seq, hidden] (with num_heads) or 4 [batch, num_heads, seq, head_size], got "
            "rank " + std::to_string(a.x.rank) + (a.x.rank >= 1 && a.x.rank <= 4 ? " (shape " + shape_str(a.x) + ")" : ""));
  if (a.y.rank != a.x.rank || a.y.dtype != a.x.dtype)
    invalid("Y must have X's shape " + shape_str(a.x) + " and dtype " + dtype_name(a.x.dtype) + ", got " +
            shape_str(a.y) + " " + dtype_name(a.y.dtype));
  for (int i = 0; i < a.x.rank; ++i)
    if (a.y.shape[i] != a.x.shape[i])
      invalid("Y must have X's shape " + shape_str(a.x) + ", got " + shape_str(a.y));
  if (a.interleaved != 0 && a.interleaved != 1) invalid("interleaved must be 0 or 1, got " + std::to_string(a.interleaved));

  ApplyArgs args;
  int64_t head_size = 0;
  if (a.x.rank == 4) {
    head_size = a.x.shape[3];
    args.layout = Layout::kBHSD;
    args.q = a.x;
    args.q_out = a.y;
  } else {
    if (a.num_heads <= 0) invalid("num_heads must be > 0 for 3-D input, got " + std::to_string(a.num_heads));
    const int64_t hidden = a.x.shape[2];
    if (hidden % a.num_heads != 0)
      invalid("X hidden size " + std::to_string(hidden) + " must be a multiple of num_heads " +
              std::to_string(a.num_heads));
    head_size = hidden / a.num_heads;
    args.layout = Layout::kBSHD;
    args.q = split_heads(a.x, a.num_heads, head_size);
    args.q_out = split_heads(a.y, a.num_heads, head_size);
  }
  // head_size 0 (an empty last axis) has no pair to rotate: named here, not as an empty cos_cache slice further down.
  if (head_size <= 0)
    invalid("head_size must be > 0, got 0 (X shape " + shape_str(a.x) + (a.x.rank == 3 ? ", num_heads " +
            std::to_string(a.num_heads) : std::string()) + ")");
  // A full rotation needs an even head; a partial one (R even) passes the odd rest through, as the function body.
  if (a.rotary_embedding_dim == 0 && head_size % 2 != 0)
    invalid("head_size must be even when rotary_embedding_dim is 0 (the whole head rotates), got " +
            std::to_string(head_size));
  if (a.rotary_embedding_dim < 0 || a.rotary_embedding_dim % 2 != 0 || a.rotary_embedding_dim > head_size)
    invalid("rotary_embedding_dim must be 0 or even and <= head_size " + std::to_string(head_size) + ", got " +
            std::to_string(a.rotary_embedding_dim));
  const int64_t rotary_dim = a.rotary_embedding_dim > 0 ? a.rotary_embedding_dim : head_size;

  const int want_rank = a.position_ids.present() ? 2 : 3;
  if (a.cos_cache.rank != want_rank)
    invalid(std::string("cos_cache must be ") +
            (want_rank == 2 ? "2-D [max_pos, R/2] when position_ids is given" : "3-D [batch, seq, R/2] without position_ids") +
            ", got shape " + shape_str(a.cos_cache));
  if (a.sin_cache.rank != a.cos_cache.rank)
    invalid("sin_cache must have cos_cache's shape " + shape_str(a.cos_cache) + ", got " + shape_str(a.sin_cache));
  for (int i = 0; i < a.cos_cache.rank; ++i)
    if (a.sin_cache.shape[i] != a.cos_cache.shape[i])
      invalid("sin_cache must have cos_cache's shape " + shape_str(a.cos_cache) + ", got " + shape_str(a.sin_cache));
  TensorView cos = first_columns(a.cos_cache, rotary_dim / 2, "cos_cache");
  TensorView sin = first_columns(a.sin_cache, rotary_dim / 2, "sin_cache");

  if (a.position_ids.present()) {
    if (a.position_ids.rank != 2)
      invalid("position_ids must be 2-D [batch, seq], got shape " + shape_str(a.position_ids));
    args.positions = Positions::from_ids(a.position_ids);
  }
  // Y must not share memory with an input it would change before reading it (X itself is checked as q).
  detail::check_view(a.y, "Y", /*allow_broadcast_zero=*/false);
  const std::pair<const TensorView*, const char*> inputs[3] = {
      {&a.position_ids, "position_ids"}, {&a.cos_cache, "cos_cache"}, {&a.sin_cache, "sin_cache"}};
  for (const auto& [view, name] : inputs) {
    if (!view->present()) continue;
    detail::check_view(*view, name, /*allow_broadcast_zero=*/true);
    if (detail::views_overlap(*view, a.y))
      invalid(std::string("Y overlaps ") + name + " in memory: writing Y would change " + name +
              " before it is read (outputs must not share memory with any input)");
  }
  args.pairing = a.interleaved ? Pairing::kInterleaved : Pairing::kHalfSplit;
  args.direction = a.direction;
  args.threads = a.threads;
  args.backend = a.backend;
  args.stream = a.stream;
  try {
    apply_cos_sin(cos, sin, args);
  } catch (const Error& e) {
    rethrow_in_node_names(e);
  }
}

}  // namespace rotary
