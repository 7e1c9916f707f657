/* Example (C): a paged-KV-cache decode loop serving two sequences of different lengths from one shared block pool
 * with rotary_prologue (RoPE + cache write in one call per step); built and run by ctest, checks its own q and cache. */
#include <math.h>
#include <rotary/rotary_c.h>
#include <stdio.h>
#include <string.h>

enum { HQ = 4, HKV = 2, D = 128, BLOCK = 4, NUM_BLOCKS = 8, MAX_T = 10, NSEQ = 2, MAX_BLOCKS_PER_SEQ = 4 };

static float k_cache[NUM_BLOCKS][BLOCK][HKV][D]; /* paged NHD: [num_blocks, block_size, Hkv, D] */
static float v_cache[NUM_BLOCKS][BLOCK][HKV][D];

/* The block pool: a free list shared by the sequences, and each sequence's block table. */
static int free_blocks[NUM_BLOCKS], n_free;
static int block_table[NSEQ][MAX_BLOCKS_PER_SEQ], seq_len[NSEQ];

static float value(int seq, int pos, int head, int d, int which) { /* what "the model" produces for a token */
  return (float)sin(0.37 * (seq + 1) + 0.11 * pos + 0.05 * head + 0.013 * d + which);
}

/* The cache slot of position `pos` of sequence `seq`, taking a block from the pool when a new one starts. */
static int64_t slot_for(int seq, int pos) {
  if (pos % BLOCK == 0) block_table[seq][pos / BLOCK] = free_blocks[--n_free];
  return (int64_t)block_table[seq][pos / BLOCK] * BLOCK + pos % BLOCK;
}

/* One step: `count[n]` new tokens of each sequence (packed, sequence after sequence), plus `pad` padding
 * tokens at the end whose slot is -1 (not written), through one rotary_prologue call. */
static int step(rotary_rope_t* rope, const int count[NSEQ], int pad) {
  static float q[MAX_T][HQ][D], k[MAX_T][HKV][D], v[MAX_T][HKV][D];
  int64_t slots[MAX_T], ids[MAX_T], t = 0;
  int64_t qs[3] = {0, HQ, D}, ks[3] = {0, HKV, D}, one[1] = {0}, cs[4] = {NUM_BLOCKS, BLOCK, HKV, D};
  rotary_prologue_args_t a;
  rotary_frequency_source_t src = {rope, -1};
  if (count[0] + count[1] + pad > MAX_T) return 1;
  for (int n = 0; n < NSEQ; ++n)
    for (int i = 0; i < count[n]; ++i, ++t) {
      const int pos = seq_len[n] + i;
      ids[t] = pos;
      slots[t] = slot_for(n, pos);
      for (int h = 0; h < HQ; ++h)
        for (int d = 0; d < D; ++d) q[t][h][d] = value(n, pos, h, d, 0);
      for (int h = 0; h < HKV; ++h)
        for (int d = 0; d < D; ++d) k[t][h][d] = value(n, pos, h, d, 1), v[t][h][d] = value(n, pos, h, d, 2);
    }
  for (int i = 0; i < pad; ++i, ++t) ids[t] = 0, slots[t] = -1, memset(k[t], 0x7f, sizeof k[t]);
  qs[0] = ks[0] = one[0] = t;
  rotary_prologue_args_init(&a);
  rotary_tensor_contiguous(&a.q, q, ROTARY_DTYPE_F32, 3, qs);  /* q rotated in place */
  rotary_tensor_contiguous(&a.k, k, ROTARY_DTYPE_F32, 3, ks);
  rotary_tensor_contiguous(&a.v, v, ROTARY_DTYPE_F32, 3, ks);
  a.positions.kind = ROTARY_POSITIONS_IDS;
  rotary_tensor_contiguous(&a.positions.ids, ids, ROTARY_DTYPE_I64, 1, one);
  a.sources = &src;
  a.n_sources = 1;
  a.cache_layout = ROTARY_CACHE_NHD;
  rotary_tensor_contiguous(&a.k_cache, k_cache, ROTARY_DTYPE_F32, 4, cs);
  rotary_tensor_contiguous(&a.v_cache, v_cache, ROTARY_DTYPE_F32, 4, cs);
  rotary_tensor_contiguous(&a.slot_mapping, slots, ROTARY_DTYPE_I64, 1, one);
  a.threads = 1;
  if (rotary_prologue(&a) != ROTARY_OK) {
    fprintf(stderr, "%s\n", rotary_last_error());
    return 1;
  }
  /* q was rotated in place: it must equal rotating the token's q alone with rotary_rope_apply, and every
   * half-split pair (d, d + D/2) must keep its length (a rotation; this preset's attention factor is 1). */
  t = 0;
  for (int n = 0; n < NSEQ; ++n)
    for (int i = 0; i < count[n]; ++i, ++t) {
      const int pos = seq_len[n] + i;
      float want[HQ][D];
      int64_t shape[4] = {1, 1, HQ, D};
      rotary_apply_args_t r;
      for (int h = 0; h < HQ; ++h)
        for (int d = 0; d < D; ++d) want[h][d] = value(n, pos, h, d, 0);
      rotary_apply_args_init(&r);
      rotary_tensor_contiguous(&r.q, want, ROTARY_DTYPE_F32, 4, shape);
      r.positions.offset = pos;
      r.threads = 1;
      if (rotary_rope_apply(rope, &r) != ROTARY_OK) return 1;
      for (int h = 0; h < HQ; ++h)
        for (int d = 0; d < D / 2; ++d) {
          const double x = value(n, pos, h, d, 0), y = value(n, pos, h, d + D / 2, 0);
          const double len = hypot(q[t][h][d], q[t][h][d + D / 2]);
          if (fabs(q[t][h][d] - want[h][d]) > 1e-6 || fabs(q[t][h][d + D / 2] - want[h][d + D / 2]) > 1e-6 ||
              fabs(len - hypot(x, y)) > 1e-5) {
            fprintf(stderr, "q of sequence %d, position %d, head %d, channel %d is not its rotation\n", n, pos, h, d);
            return 1;
          }
        }
    }
  for (int n = 0; n < NSEQ; ++n) seq_len[n] += count[n];
  return 0;
}

/* Checks every cached row against rotating that token's k alone with rotary_rope_apply (an independent call),
 * v against the token's v, and that every other row (padding tokens' slot -1, unused blocks) is still zero. */
static double check(rotary_rope_t* rope) {
  static int owned[NUM_BLOCKS][BLOCK];
  double worst = 0.0;
  for (int n = 0; n < NSEQ; ++n)
    for (int pos = 0; pos < seq_len[n]; ++pos) owned[block_table[n][pos / BLOCK]][pos % BLOCK] = 1;
  for (int b = 0; b < NUM_BLOCKS; ++b)
    for (int off = 0; off < BLOCK; ++off)
      for (int h = 0; h < HKV && !owned[b][off]; ++h)
        for (int d = 0; d < D; ++d)
          if (k_cache[b][off][h][d] != 0.0f || v_cache[b][off][h][d] != 0.0f) return INFINITY;
  for (int n = 0; n < NSEQ; ++n)
    for (int pos = 0; pos < seq_len[n]; ++pos) {
      float k[HKV][D];
      int64_t shape[4] = {1, 1, HKV, D};
      rotary_apply_args_t a;
      const int block = block_table[n][pos / BLOCK], off = pos % BLOCK;
      for (int h = 0; h < HKV; ++h)
        for (int d = 0; d < D; ++d) {
          k[h][d] = value(n, pos, h, d, 1);
          if (v_cache[block][off][h][d] != value(n, pos, h, d, 2)) return INFINITY;
        }
      rotary_apply_args_init(&a);
      rotary_tensor_contiguous(&a.q, k, ROTARY_DTYPE_F32, 4, shape);
      a.positions.offset = pos;
      a.threads = 1;
      if (rotary_rope_apply(rope, &a) != ROTARY_OK) return INFINITY;
      for (int h = 0; h < HKV; ++h)
        for (int d = 0; d < D; ++d) {
          const double e = fabs((double)k[h][d] - k_cache[block][off][h][d]);
          worst = e > worst ? e : worst;
        }
    }
  return worst;
}

int main(void) {
  rotary_spec_t* spec = NULL;
  rotary_rope_t* rope = NULL;
  const int prefill[NSEQ] = {6, 3}, decode[NSEQ] = {1, 1};
  int used = 0;
  double worst;
  for (int i = 0; i < NUM_BLOCKS; ++i) free_blocks[n_free++] = NUM_BLOCKS - 1 - i;  /* pop order 0, 1, 2, ... */
  memset(k_cache, 0, sizeof k_cache);
  if (rotary_spec_from_preset("llama-3.1-8b", &spec) != ROTARY_OK || rotary_rope_create(spec, NULL, &rope) != ROTARY_OK) {
    fprintf(stderr, "%s\n", rotary_last_error());
    return 1;
  }
  if (step(rope, prefill, 0)) return 1;                 /* prefill: 6 + 3 tokens in one call */
  for (int i = 0; i < 4; ++i)
    if (step(rope, decode, i % 2)) return 1;            /* decode: one token each, sometimes a padding token */
  used = NUM_BLOCKS - n_free;
  worst = check(rope);
  printf("paged decode: sequences of %d and %d tokens in %d shared blocks of %d, max |cache - rope_apply| = %g\n",
         seq_len[0], seq_len[1], used, BLOCK, worst);
  rotary_rope_free(rope);
  rotary_spec_free(spec);
  if (!(worst <= 1e-6)) return 1;
  printf("paged decode ok\n");
  return 0;
}
