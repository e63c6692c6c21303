/* wse_gemm_bf16.c -- one thread's float product of bfloat16 values by AVX-512 BF16 dot
 * products (Note [BF16 GEMM]).
 */
#include "wse_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Note [BF16 GEMM]
   Under autocast a bfloat16 product is a float32 GEMM of casts (trace/lower.py matmul), and
   OpenBLAS has no bfloat16 routine: an MLP step's products ran at 160 GFLOP/s where eager's
   oneDNN, with the CPU's AVX512_BF16 dot products, ran 366-405. This GEMM packs the float
   operands, which hold bfloat16 values, back into bfloat16 pairs (the cast's upper half: exact)
   and multiplies them with vdpbf16ps: 300-350 GFLOP/s on two threads for the MLP's shapes
   against OpenBLAS's 165-200 on their float copies. Each product of two bfloat16 values is
   exact in float, and the sum runs in float as OpenBLAS's does, in another order: results
   agree with it to float rounding, except that the instruction reads subnormal inputs as zero
   (bfloat16 subnormals are below 1.2e-38), as oneDNN's does. GotoBLAS blocking: B in panels of
   NR columns, A in panels of MR rows, a KC-deep slice at a time, MR x NR results in registers.
   Its bits depend only on the product's shape, so a tile has the same bits on any thread (Note
   [Fixed tiles] in wse_kernels.c). Without AVX512_BF16 (at build or at run time) the caller
   keeps the float path. */
#define MR 12
#define NR 32
#define KC 256
#define MC 120
#define NC 1024
#define SLOTS 8

int wse_bf16_gemm_ready(void) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  static int ok = -1;
  if (ok < 0) ok = __builtin_cpu_supports("avx512bf16") ? 1 : 0;
  return ok;
#else
  return 0;
#endif
}

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>

static inline uint32_t bf_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u >> 16;
}

/* 16 floats, 8 pairs (k, k+1) -> 8 words, k in the low half. */
static inline __m256i pairs8(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi64(u, 32), _mm512_set1_epi64(0xFFFF0000));
  const __m512i lo = _mm512_and_si512(_mm512_srli_epi64(u, 16), _mm512_set1_epi64(0xFFFF));
  return _mm512_cvtepi64_epi32(_mm512_or_si512(hi, lo));
}

/* Rows k and k+1, 16 values each -> 16 words. */
static inline __m512i rows16(__m512 lo, __m512 hi) {
  const __m512i h = _mm512_and_si512(_mm512_castps_si512(hi), _mm512_set1_epi32((int)0xFFFF0000));
  return _mm512_or_si512(h, _mm512_srli_epi32(_mm512_castps_si512(lo), 16));
}

/* `width` rows (past `rows`: zeros) whose k runs along memory: row r's pairs to out[k2 *
   width + r]. A untransposed, B transposed. */
static void pack_along(const float* x, int64_t ld, int64_t rows, int64_t kc, int64_t width,
                       uint32_t* out) {
  const int64_t k2n = (kc + 1) / 2;
  for (int64_t r = 0; r < width; r++) {
    uint32_t* o = out + r;
    if (r >= rows) {
      for (int64_t k2 = 0; k2 < k2n; k2++) o[k2 * width] = 0;
      continue;
    }
    const float* row = x + r * ld;
    int64_t k = 0, k2 = 0;
    for (; k + 16 <= kc; k += 16, k2 += 8) {
      uint32_t w[8];
      _mm256_storeu_si256((__m256i*)w, pairs8(_mm512_loadu_ps(row + k)));
      for (int i = 0; i < 8; i++) o[(k2 + i) * width] = w[i];
    }
    for (; k < kc; k += 2, k2++)
      o[k2 * width] = bf_bits(row[k]) | (k + 1 < kc ? bf_bits(row[k + 1]) << 16 : 0);
  }
}

/* `width` columns (past `cols`: zeros) whose k runs across rows: rows k, k+1 to out[k2 *
   width + c]. A transposed, B untransposed. */
static void pack_across(const float* x, int64_t ld, int64_t cols, int64_t kc, int64_t width,
                        uint32_t* out) {
  for (int64_t k = 0, k2 = 0; k < kc; k += 2, k2++) {
    const float* lo = x + k * ld;
    const float* hi = k + 1 < kc ? lo + ld : NULL;
    uint32_t* o = out + k2 * width;
    int64_t c = 0;
    for (; c + 16 <= cols && c + 16 <= width; c += 16)
      _mm512_storeu_si512(o + c, rows16(_mm512_loadu_ps(lo + c),
                                        hi ? _mm512_loadu_ps(hi + c) : _mm512_setzero_ps()));
    for (; c < width; c++)
      o[c] = c < cols ? bf_bits(lo[c]) | (hi ? bf_bits(hi[c]) << 16 : 0) : 0;
  }
}

/* n rows (along: k runs along memory) or columns (across: k runs across rows) of x, in panels
   of `width`, each kc deep. A packs along untransposed, B transposed. */
static void pack(int along, const float* x, int64_t ld, int64_t n, int64_t kc, int64_t width,
                 uint32_t* out) {
  const int64_t k2n = (kc + 1) / 2;
  for (int64_t i = 0; i < n; i += width, out += width * k2n) {
    const int64_t count = n - i < width ? n - i : width;
    if (along) pack_along(x + i * ld, ld, count, kc, width, out);
    else pack_across(x + i, ld, count, kc, width, out);
  }
}

/* C[mr x nr] (+)= the panels' product over k2n pairs; MR x NR sums in 24 registers. */
static void micro(int64_t k2n, const uint32_t* ap, const uint32_t* bp, float* c, int64_t ldc,
                  int64_t mr, int64_t nr, int add) {
  __m512 acc[MR][2];
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k2 = 0; k2 < k2n; k2++, ap += MR, bp += NR) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bp);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(bp + 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32((int)ap[r]);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
    }
  }
  const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
  const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
  for (int64_t r = 0; r < mr; r++, c += ldc) {
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (add) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, c));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, c + 16));
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

/* Packing space, kept: the host's team threads end at each release (Note [Releasing the team]
   in wse_runtime.c), so space of their own would be allocated, faulted in and leaked at
   every step. A call takes a free slot; with none free, or no memory, it declines. */
static struct {
  _Atomic int busy;
  uint32_t* space;
} g_slots[SLOTS];

static uint32_t* take(int* slot) {
  const size_t words = (size_t)(MC + NC) * (KC / 2);
  for (int i = 0; i < SLOTS; i++) {
    if (atomic_exchange(&g_slots[i].busy, 1)) continue;
    if (!g_slots[i].space) g_slots[i].space = aligned_alloc(64, words * sizeof(uint32_t));
    if (g_slots[i].space) {
      *slot = i;
      return g_slots[i].space;
    }
    atomic_store(&g_slots[i].busy, 0);
    return NULL;
  }
  return NULL;
}

int wse_gemm_bf16_one(int ta, int tb, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  if (!wse_bf16_gemm_ready()) return 0;
  int slot;
  uint32_t* const ap = take(&slot);
  if (!ap) return 0;
  uint32_t* const bp = ap + (size_t)MC * (KC / 2);
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = N - jc < NC ? N - jc : NC;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t kc = K - pc < KC ? K - pc : KC, k2n = (kc + 1) / 2;
      pack(tb, tb ? B + jc * ldb + pc : B + pc * ldb + jc, ldb, nc, kc, NR, bp);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = M - ic < MC ? M - ic : MC;
        pack(!ta, ta ? A + pc * lda + ic : A + ic * lda + pc, lda, mc, kc, MR, ap);
        for (int64_t jr = 0; jr < nc; jr += NR)
          for (int64_t ir = 0; ir < mc; ir += MR)
            micro(k2n, ap + ir * k2n, bp + jr * k2n, C + (ic + ir) * ldc + jc + jr, ldc,
                  mc - ir < MR ? mc - ir : MR, nc - jr < NR ? nc - jr : NR, pc > 0);
      }
    }
  }
  atomic_store(&g_slots[slot].busy, 0);
  return 1;
}
#else
int wse_gemm_bf16_one(int ta, int tb, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  (void)ta; (void)tb; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb;
  (void)C; (void)ldc;
  return 0;
}
#endif
