// The bench's one-thread-per-pair peer: vLLM's rotary_embedding scheme (a block per token, a thread per (head, pair)), re-implemented.
//
// Facts from vLLM's csrc/pos_encoding_kernels.cu (docs/performance.md): one block per token with
// min(heads * rot_dim / 2, 512) threads; each thread rotates pair (head, i) in place with cos/sin read from a
// float cache row [cos | sin] of the token's position. Written here from that description (not copied), so
// that `rotary bench --backend cuda` has such a kernel to compare with on the same tensors.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/naive_rope.h"

namespace rotary::cli {
namespace {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <class T, bool kNeox>
__device__ __forceinline__ void rotate_pair(T* head, const float* cos_row, const float* sin_row, int i, int embed) {
  const int xi = kNeox ? i : 2 * i, yi = kNeox ? embed + i : 2 * i + 1;
  const float c = cos_row[i], s = sin_row[i];
  const float x = to_f(head[xi]), y = to_f(head[yi]);
  head[xi] = from_f<T>(x * c - y * s);
  head[yi] = from_f<T>(y * c + x * s);
}

template <class T, bool kNeox>
__global__ void naive_rope_kernel(const int64_t* __restrict__ positions, T* __restrict__ q, T* __restrict__ k,
                                  const float* __restrict__ cache, int rot_dim, int64_t q_token_stride,
                                  int64_t k_token_stride, int hq, int hk, int head_size) {
  const int64_t token = blockIdx.x;
  const float* cos_row = cache + positions[token] * rot_dim;
  const float* sin_row = cos_row + rot_dim / 2;
  const int embed = rot_dim / 2;
  for (int i = threadIdx.x; i < hq * embed; i += blockDim.x)
    rotate_pair<T, kNeox>(q + token * q_token_stride + (i / embed) * head_size, cos_row, sin_row, i % embed, embed);
  for (int i = threadIdx.x; i < hk * embed; i += blockDim.x)
    rotate_pair<T, kNeox>(k + token * k_token_stride + (i / embed) * head_size, cos_row, sin_row, i % embed, embed);
}

template <class T>
void launch(bool neox, const NaiveRopeArgs& a) {
  const int threads = std::min(a.hq * a.rot_dim / 2, 512);
  auto* q = static_cast<T*>(a.q);
  auto* k = static_cast<T*>(a.k);
  const int64_t qs = static_cast<int64_t>(a.hq) * a.head_size, ks = static_cast<int64_t>(a.hk) * a.head_size;
  const auto s = static_cast<cudaStream_t>(a.stream);
  if (neox)
    naive_rope_kernel<T, true><<<static_cast<unsigned>(a.tokens), threads, 0, s>>>(a.positions, q, k, a.cache, a.rot_dim, qs, ks,
                                                                                   a.hq, a.hk, a.head_size);
  else
    naive_rope_kernel<T, false><<<static_cast<unsigned>(a.tokens), threads, 0, s>>>(a.positions, q, k, a.cache, a.rot_dim, qs, ks,
                                                                                    a.hq, a.hk, a.head_size);
}

}  // namespace

void naive_rope(const NaiveRopeArgs& a) {
  switch (a.elem_bytes_kind) {
    case 0: launch<float>(a.neox, a); break;
    case 1: launch<__half>(a.neox, a); break;
    default: launch<__nv_bfloat16>(a.neox, a); break;
  }
}

}  // namespace rotary::cli
