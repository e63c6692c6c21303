/* wse_sort.c -- the stable row sort behind torch.sort and everything built on
 * it (argsort, topk, kthvalue, median, mode, quantile), reached from
 * generated code as lib->argsort.
 *
 * Contract: x is a contiguous [outer, n, inner] array of dtype `dt` (WSE_DT_*);
 * every (outer, inner) row of length n is sorted and the permutation written to
 * idx (same layout, int64): idx[.., j, ..] is the position in the row of the
 * j-th element in sorted order.  The sort is stable; NaN sorts as the largest
 * value (first when descending), -0.0 equals 0.0, as in PyTorch's CPU sort.
 *
 * Keys are widened once per row to double (float dtypes: exact) or int64
 * (integer dtypes: exact), so one merge sort per key type serves every dtype.
 */
#include "wse_runtime.h"

#include <stdlib.h>

#define WSE_SORT_MIN_WORK (1LL << 15)   /* elements below which rows run serially */
#define WSE_INSERTION_RUN 16            /* runs this short are insertion-sorted */


/* Stable merge sort of idx[0..n) by key, using tmp[0..n) as scratch.
   BEFORE(a, b) is true when key a must be placed strictly before key b. */
#define WSE_DEFINE_MERGESORT(NAME, KEY_T, BEFORE)                                    \
  static void NAME(const KEY_T* key, int64_t* idx, int64_t* tmp, int64_t n) {        \
    for (int64_t lo = 0; lo < n; lo += WSE_INSERTION_RUN) {                          \
      int64_t hi = lo + WSE_INSERTION_RUN < n ? lo + WSE_INSERTION_RUN : n;          \
      for (int64_t i = lo + 1; i < hi; i++) {                                        \
        int64_t v = idx[i], j = i;                                                   \
        while (j > lo && BEFORE(key[v], key[idx[j - 1]])) { idx[j] = idx[j - 1]; j--; } \
        idx[j] = v;                                                                  \
      }                                                                              \
    }                                                                                \
    int64_t *src = idx, *dst = tmp;                                                  \
    for (int64_t w = WSE_INSERTION_RUN; w < n; w *= 2) {                             \
      for (int64_t lo = 0; lo < n; lo += 2 * w) {                                    \
        int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n; \
        int64_t a = lo, b = mid, o = lo;                                             \
        while (a < mid && b < hi)                                                    \
          dst[o++] = BEFORE(key[src[b]], key[src[a]]) ? src[b++] : src[a++];         \
        while (a < mid) dst[o++] = src[a++];                                         \
        while (b < hi) dst[o++] = src[b++];                                          \
      }                                                                              \
      int64_t* t = src; src = dst; dst = t;                                          \
    }                                                                                \
    if (src != idx) memcpy(idx, src, (size_t)n * sizeof(int64_t));                  \
  }

#define WSE_ASC_F(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define WSE_DESC_F(a, b) ((a) > (b) || ((a) != (a) && (b) == (b)))
#define WSE_ASC_I(a, b) ((a) < (b))
#define WSE_DESC_I(a, b) ((a) > (b))
WSE_DEFINE_MERGESORT(msort_asc_f, double, WSE_ASC_F)
WSE_DEFINE_MERGESORT(msort_desc_f, double, WSE_DESC_F)
WSE_DEFINE_MERGESORT(msort_asc_i, int64_t, WSE_ASC_I)
WSE_DEFINE_MERGESORT(msort_desc_i, int64_t, WSE_DESC_I)

static int is_float(int dt) {
  return dt == WSE_DT_F32 || dt == WSE_DT_F64 || dt == WSE_DT_F16 || dt == WSE_DT_BF16;
}

/* Element k of x (flat index) widened to a double key (float dtypes). */
static double load_f(const void* x, int dt, int64_t k) {
  switch (dt) {
    case WSE_DT_F32: return ((const float*)x)[k];
    case WSE_DT_F64: return ((const double*)x)[k];
    case WSE_DT_F16: return wse_f16_to_f32(((const uint16_t*)x)[k]);
    default: return wse_bf16_to_f32(((const uint16_t*)x)[k]);
  }
}

/* Element k of x widened to an int64 key (integer and bool dtypes). */
static int64_t load_i(const void* x, int dt, int64_t k) {
  switch (dt) {
    case WSE_DT_I64: return ((const int64_t*)x)[k];
    case WSE_DT_I32: return ((const int32_t*)x)[k];
    case WSE_DT_I16: return ((const int16_t*)x)[k];
    case WSE_DT_I8: return ((const int8_t*)x)[k];
    case WSE_DT_U8: return ((const uint8_t*)x)[k];
    default: return ((const bool*)x)[k];
  }
}

/* Sort one row: base = flat index of its first element, step = inner. */
static void sort_row(const void* x, int dt, int64_t base, int64_t n, int64_t step,
                     int descending, int64_t* out, void* keys, int64_t* idx, int64_t* tmp) {
  for (int64_t j = 0; j < n; j++) idx[j] = j;
  if (is_float(dt)) {
    double* k = keys;
    for (int64_t j = 0; j < n; j++) k[j] = load_f(x, dt, base + j * step);
    (descending ? msort_desc_f : msort_asc_f)(k, idx, tmp, n);
  } else {
    int64_t* k = keys;
    for (int64_t j = 0; j < n; j++) k[j] = load_i(x, dt, base + j * step);
    (descending ? msort_desc_i : msort_asc_i)(k, idx, tmp, n);
  }
  for (int64_t j = 0; j < n; j++) out[base + j * step] = idx[j];
}

int wse_argsort(const void* x, int dt, int64_t outer, int64_t n, int64_t inner,
                int descending, int64_t* idx_out, int64_t* errinfo) {
  int64_t rows = outer * inner, failed = 0;
  if (rows <= 0 || n <= 0) return 0;
  int parallel = rows > 1 && rows * n >= WSE_SORT_MIN_WORK;
  (void)parallel;
  _Pragma("omp parallel if (parallel)")
  {
    void* keys = wse_scratch((size_t)n * 8, &failed);
    int64_t* idx = wse_scratch((size_t)n * sizeof(int64_t), &failed);
    int64_t* tmp = wse_scratch((size_t)n * sizeof(int64_t), &failed);
    int ok = keys && idx && tmp;   /* Note [Scratch failures] in wse_runtime.c */
    _Pragma("omp for schedule(static)")
    for (int64_t r = 0; r < rows; r++) {
      int64_t base = (r / inner) * n * inner + r % inner;
      if (ok) sort_row(x, dt, base, n, inner, descending, idx_out, keys, idx, tmp);
    }
    free(keys);
    free(idx);
    free(tmp);
  }
  return wse_scratch_status(failed, errinfo);
}
