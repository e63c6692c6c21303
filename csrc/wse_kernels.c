/* wse_kernels.c -- library kernels reachable from generated code via wse_lib_t:
 * the batched GEMM (a BLAS dlopen'ed by wse_runtime.c) and the table itself; the
 * convolutions, which run on this GEMM and team, are in wse_conv.c.
 *
 * Threading policy: OpenMP only, one team.  The preferred GEMM is torch's MKL
 * (the "team BLAS"): it is built against the same libgomp as the generated
 * kernels, so a GEMM called outside a parallel region forks the kernels' own
 * team, with no second pool of threads.  It ran the MLP's GEMMs at 240-300
 * GFLOP/s against 190-260 for the fallback below.  The fallback, OpenBLAS, is
 * switched to one thread at load time because its pthread pool and libgomp's
 * team both busy-wait after each call (3-20x slower convs when mixed); with it
 * we split each GEMM into row or column tiles ourselves.  Either way a batch
 * of GEMMs is spread over the team when it can feed every thread.
 */
#include "wse_kernels.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CBLAS_ROW_MAJOR 101
#define CBLAS_NO_TRANS 111
#define CBLAS_TRANS 112
#define WSE_GEMM_MIN_WORK (1LL << 17)

static wse_sgemm_fn g_sgemm = NULL;
static wse_dgemm_fn g_dgemm = NULL;
static wse_fsgemm_fn g_fsgemm = NULL;
static wse_fdgemm_fn g_fdgemm = NULL;

void wse_kernels_set_blas(wse_sgemm_fn sgemm, wse_dgemm_fn dgemm) {
  g_sgemm = sgemm;
  g_dgemm = dgemm;
}

void wse_kernels_set_team_blas(wse_fsgemm_fn sgemm, wse_fdgemm_fn dgemm) {
  g_fsgemm = sgemm;
  g_fdgemm = dgemm;
}

static int max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* Fork a team only for enough work and never from inside another team (so
   nested regions cannot oversubscribe regardless of OMP_MAX_ACTIVE_LEVELS). */
int wse_can_fork(int64_t work) {
#ifdef _OPENMP
  return work >= WSE_OMP_MIN_WORK && !omp_in_parallel() && omp_get_max_threads() > 1;
#else
  (void)work;
  return 0;
#endif
}

/* ======================= batched GEMM ==================================== */

/* A leading dimension only matters when the stored matrix has >1 row; BLAS
   still validates it, so normalise degenerate ones (common for views). */
static int64_t fix_ld(int64_t ld, int64_t rows, int64_t cols) {
  if (rows <= 1 && ld < cols) return cols > 1 ? cols : 1;
  return ld;
}

static int blas_ok(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                   int ta, int tb) {
  const int64_t lim = INT32_MAX; /* scipy-openblas32 uses 32-bit ints */
  if (M > lim || N > lim || K > lim || lda > lim || ldb > lim || ldc > lim) return 0;
  if (lda < (ta ? M : K) || lda < 1) return 0;
  if (ldb < (tb ? K : N) || ldb < 1) return 0;
  return ldc >= N && ldc >= 1;
}

/* Independent tiles of a batched GEMM: batch x mp row blocks x np column
   blocks.  Only split matrices when the batch alone cannot feed every thread.
   Note [Fixed tiles]: the tiles follow the host's team size (wse_team, set where the host
   starts its team), not the running thread's, and whoever runs a GEMM runs exactly these
   tiles, each one BLAS call: forked on the host, one after another on the queue's worker
   (which never forks, Note [One OpenMP team] in wse_runtime.c), which also pauses only
   between them (Note [Sliced GEMM]). OpenBLAS's bits depend on a call's shape (row or column
   halves of a 128x1024x784 product differ from the whole in 7-9K of its 131K elements), so
   tiles that followed the running thread made a step's values depend on who ran it. */
typedef struct { int64_t mp, np, count; int fork; } gemm_tiles_t;

/* Note [Tiles for the worker]
   A matrix product split for a team of two was two tiles, and the queue's worker can pause
   only between tiles (Note [Sliced GEMM]): the host, come to take over a step's program,
   waited for up to half a product, its core idle (benchmarks/timeline.py: 1.9-2.2 ms of each
   MLP step's read, 1.1-1.2 ms with quarters). Up to four tiles per thread, none under
   WSE_TILE_MIN_WORK multiply-adds; OpenBLAS runs the MLP's products as fast in quarters
   (benchmarks/kernel_profile.py: 107-114 GFLOP/s against 99-107 in halves). */
#define WSE_TILES_PER_THREAD 4
#define WSE_TILE_MIN_WORK (8LL << 20)

/* Note [Program-sized tiles]
   Smaller tiles cost the host's team: each tile is one BLAS call that packs the whole shared
   operand again, so a transformer step's 1024x256x1024 products ran at 149-161 GFLOP/s in eighths
   against 182 in halves (benchmarks/kernel_profile.py), and its GEMMs lost about 8 ms of 120 to
   quarters per thread. What small tiles buy, a short wait when the host takes a run over from the
   worker, comes about once per program, so it is worth less the longer the program. The generated
   program therefore lets a tile hold a fixed share of all its GEMMs' work (WSE_MAX_TILE,
   compile/program.py), and a product is cut into no more tiles per thread than keep each under
   that: the transformer's largest products get two tiles per thread, its 256-wide ones one, while
   the MLP's and the CNN's programs, a seventeenth of its work or less, keep four. The cap is a
   constant of the program, so the tiles, and the bits, still follow no thread (Note [Fixed
   tiles]). One product may be cut differently in two programs, though, and on a CPU whose BLAS
   changes bits with the cut the two results may then differ in their last bits (OpenBLAS on this
   AMD EPYC gave the same bits for every cut of nine shapes tried). Transformer steps, 8 blocks of
   6 alternating in one process: 0.96x and 0.98x the time with four tiles per thread. */

int wse_team = 1;               /* wse_kernels.h */
__thread int wse_whole_gemms;

void wse_kernels_set_team(void) { wse_team = max_threads(); }

static gemm_tiles_t plan_gemm(int64_t batch, int64_t M, int64_t N, int64_t K,
                              int64_t max_tile) {
  gemm_tiles_t t = {1, 1, batch, 0};
  int64_t work = batch * M * N * (K > 0 ? K : 1);
  int nt = work >= WSE_GEMM_MIN_WORK && !wse_whole_gemms ? wse_team : 1;
  if (nt <= 1) return t;
  if (batch < nt && g_fsgemm) return t;   /* the team BLAS forks the team itself */
  if (batch < nt) {
    int64_t per = work / (nt * WSE_TILE_MIN_WORK);      /* Note [Tiles for the worker] */
    if (max_tile > 0) {                                 /* Note [Program-sized tiles] */
      const int64_t fewest = (work + nt * max_tile - 1) / (nt * max_tile);
      per = fewest < per ? fewest : per;
    }
    per = per < 1 ? 1 : per > WSE_TILES_PER_THREAD ? WSE_TILES_PER_THREAD : per;
    int64_t need = (nt * per + batch - 1) / batch;
    if (M >= N) t.mp = need < M ? need : M;
    else t.np = need < N ? need : N;
  }
  t.count = batch * t.mp * t.np;
  t.fork = t.count > 1 && wse_can_fork(work);
  return t;
}

/* Note [Two-level batches]
   Attention's products are batches over (sample, head), and each head's matrix is a strided
   view of the QKV projection: rows 3d apart, heads d/H apart, samples T rows apart. One batch
   stride cannot address them, so each was copied out first (12 copies a transformer step,
   0.8 ms). With `heads` = {Ha, inner stride of A, Hb, inner stride of B}, A's matrix of
   product b starts at (b / Ha) * stride_a + (b % Ha) * its inner stride, likewise B's, and the
   GEMM reads the views in place (lazydev/compile/passes.py, gemm_operand). */

/* gemm_tile_NAME and gemm_tiles_NAME: tile t, and tiles [t0, t1), of a plan, each tile one
   call of ONE (the BLAS product of WSE_DEFINE_GEMM, or the bfloat16 one). */
#define WSE_DEFINE_TILES(NAME, T, ONE)                                                     \
  static void gemm_tile_##NAME(const gemm_tiles_t* tl, int64_t t, int ta, int tb, int64_t M, \
                              int64_t N, int64_t K, T alpha, const T* A, int64_t lda,      \
                              int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta,     \
                              T* C, int64_t ldc, int64_t sc, const int64_t* hb) {          \
    int64_t b = t / (tl->mp * tl->np), im = t / tl->np % tl->mp, jn = t % tl->np;          \
    int64_t i0 = M * im / tl->mp, i1 = M * (im + 1) / tl->mp;                              \
    int64_t j0 = N * jn / tl->np, j1 = N * (jn + 1) / tl->np;                              \
    int64_t oa = b * sa, ob = b * sb;                                                      \
    if (hb) { /* Note [Two-level batches] */                                               \
      oa = b / hb[0] * sa + b % hb[0] * hb[1];                                             \
      ob = b / hb[2] * sb + b % hb[2] * hb[3];                                             \
    }                                                                                      \
    ONE(ta, tb, i1 - i0, j1 - j0, K, alpha, A + oa + (ta ? i0 : i0 * lda), lda,            \
        B + ob + (tb ? j0 * ldb : j0), ldb, beta, C + b * sc + i0 * ldc + j0, ldc);        \
  }                                                                                        \
  /* Tiles [t0, t1) of the plan `tl`, forked when it says so. No inactive `parallel if (0)`  \
     region around unforked calls: a threaded BLAS called inside one starts a nested team   \
     each time (MKL ran 3-5x slower). */                                                   \
  static void gemm_tiles_##NAME(const gemm_tiles_t* tl, int64_t t0, int64_t t1, int ta,      \
                               int tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, \
                               int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, \
                               T beta, T* C, int64_t ldc, int64_t sc, const int64_t* hb) { \
    if (!tl->fork || t1 - t0 < 2) {                                                        \
      for (int64_t t = t0; t < t1; t++)                                                    \
        gemm_tile_##NAME(tl, t, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C,   \
                        ldc, sc, hb);                                                      \
      return;                                                                              \
    }                                                                                      \
    _Pragma("omp parallel for schedule(static)")                                           \
    for (int64_t t = t0; t < t1; t++)                                                      \
      gemm_tile_##NAME(tl, t, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, \
                      sc, hb);                                                             \
  }

/* One templated body for f32/f64: reference loop (no BLAS, huge or odd
   strides) and the batched driver.  beta == 0 means C is write-only, as in
   BLAS, so NaN garbage in uninitialised outputs never leaks through. */
#define WSE_DEFINE_GEMM(SUF, T, BLASFN, FBLASFN)                                           \
  static void gemm_ref_##SUF(int ta, int tb, int64_t M, int64_t N, int64_t K, T alpha,     \
                             const T* A, int64_t lda, const T* B, int64_t ldb, T beta,     \
                             T* C, int64_t ldc) {                                          \
    for (int64_t i = 0; i < M; i++)                                                        \
      for (int64_t j = 0; j < N; j++) {                                                    \
        T acc = 0;                                                                         \
        for (int64_t k = 0; k < K; k++)                                                    \
          acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]); \
        T* c = &C[i * ldc + j];                                                            \
        *c = alpha * acc + (beta == 0 ? (T)0 : beta * *c);                                 \
      }                                                                                    \
  }                                                                                        \
  static void gemm_one_##SUF(int ta, int tb, int64_t M, int64_t N, int64_t K, T alpha,     \
                             const T* A, int64_t lda, const T* B, int64_t ldb, T beta,     \
                             T* C, int64_t ldc) {                                          \
    if (FBLASFN && K > 0 && blas_ok(M, N, K, lda, ldb, ldc, ta, tb)) {                     \
      /* Column-major BLAS: C^T = op(B)^T op(A)^T. */                                      \
      const char tA = ta ? 'T' : 'N', tB = tb ? 'T' : 'N';                                  \
      const int m = (int)N, n = (int)M, k = (int)K, la = (int)lda, lb = (int)ldb, lc = (int)ldc; \
      FBLASFN(&tB, &tA, &m, &n, &k, &alpha, B, &lb, A, &la, &beta, C, &lc);                 \
    } else if (BLASFN && K > 0 && blas_ok(M, N, K, lda, ldb, ldc, ta, tb))                 \
      BLASFN(CBLAS_ROW_MAJOR, ta ? CBLAS_TRANS : CBLAS_NO_TRANS,                           \
             tb ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)M, (int)N, (int)K, alpha, A, (int)lda, \
             B, (int)ldb, beta, C, (int)ldc);                                              \
    else                                                                                   \
      gemm_ref_##SUF(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);                \
  }                                                                                        \
  WSE_DEFINE_TILES(SUF, T, gemm_one_##SUF)                                                 \
  static void gemm_##SUF(int64_t batch, int ta, int tb, int64_t M, int64_t N, int64_t K,   \
                         T alpha, const T* A, int64_t lda, int64_t sa, const T* B,         \
                         int64_t ldb, int64_t sb, T beta, T* C, int64_t ldc, int64_t sc) { \
    if (batch <= 0 || M <= 0 || N <= 0) return;                                            \
    lda = fix_ld(lda, ta ? K : M, ta ? M : K);                                             \
    ldb = fix_ld(ldb, tb ? N : K, tb ? K : N);                                             \
    ldc = fix_ld(ldc, M, N);                                                               \
    gemm_tiles_t tl = plan_gemm(batch, M, N, K, 0);                                        \
    gemm_tiles_##SUF(&tl, 0, tl.count, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb,     \
                     beta, C, ldc, sc, NULL);                                              \
  }

WSE_DEFINE_GEMM(f32, float, g_sgemm, g_fsgemm)
WSE_DEFINE_GEMM(f64, double, g_dgemm, g_fdgemm)

/* A float product of bfloat16 values by the CPU's bfloat16 dot products (Note [BF16 GEMM] in
   wse_gemm_bf16.c) where they apply: OpenBLAS in tiles (a team BLAS, torch's MKL, gets whole
   products and forks for them; this kernel runs on one thread), the template's alpha 1 and
   beta 0, a tile big enough to fill its registers; else the float product. Which one runs
   depends on the tile's shape alone, so the bits still follow no thread. */
static void gemm_one_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                          float* C, int64_t ldc) {
  if (!g_fsgemm && alpha == 1.0f && beta == 0.0f && M >= 16 && N >= 16 && K >= 32 &&
      wse_gemm_bf16_one(ta, tb, M, N, K, A, lda, B, ldb, C, ldc))
    return;
  gemm_one_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

WSE_DEFINE_TILES(bf16, float, gemm_one_bf16)

/* Note [Sliced GEMM]
   A GEMM is most of a training step's program, and the queue's worker, which runs programs on
   one thread while the host traces the next step, used to leave every long one to the host
   (Note [Who runs a program] in lazydev/runtime/queue.py): the host can take a run over only
   between two calls, and a one-thread GEMM of several milliseconds would keep it waiting. The
   sliced GEMM lets the worker run them anyway. Under a run with a long-call limit (stop[1] > 0:
   the worker), it runs the GEMM's tiles (Note [Fixed tiles]) about WSE_SLICE_FLOPS at a time,
   at least one, and after each slice returns WSE_PAUSED if the run was asked to pause, with
   the tiles done in stop[2]; the entry then leaves *next at this call. The host resumes the
   call and runs the tiles left on its team. A run without a limit (the host) does the same
   from stop[2] without slicing, and both leave stop[2] = 0 when done. A slice is a whole tile,
   not a block of one, so a pause never changes a value; on two threads a single product has
   two tiles, so the host may wait for half a product (a transformer's 1024x1024x256, 1.3 ms).
   The run's stop array reaches the library through a thread-local that wse_program_run sets
   around the entry: generated kernels do not take it as an argument. */
#define WSE_SLICE_FLOPS (32LL << 20)   /* ~0.25 ms on one core here */

static __thread volatile int32_t* tls_stop;

void wse_kernels_set_run(volatile int32_t* stop) { tls_stop = stop; }

#define WSE_DEFINE_SLICED_GEMM(SUF, T)                                                     \
  static int gemm_##SUF##_sliced(int64_t batch, int ta, int tb, int64_t M, int64_t N,      \
                                 int64_t K, T alpha, const T* A, int64_t lda, int64_t sa,  \
                                 const T* B, int64_t ldb, int64_t sb, T beta, T* C,         \
                                 int64_t ldc, int64_t sc, int64_t max_tile,                \
                                 const int64_t* hb) {                                      \
    volatile int32_t* st = tls_stop;                                                       \
    if (batch <= 0 || M <= 0 || N <= 0) return 0;                                          \
    lda = fix_ld(lda, ta ? K : M, ta ? M : K);                                             \
    ldb = fix_ld(ldb, tb ? N : K, tb ? K : N);                                             \
    ldc = fix_ld(ldc, M, N);                                                               \
    gemm_tiles_t tl = plan_gemm(batch, M, N, K, max_tile);                                 \
    if (!st || tl.count > INT32_MAX) {                                                     \
      gemm_tiles_##SUF(&tl, 0, tl.count, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb,   \
                       beta, C, ldc, sc, hb);                                              \
      return 0;                                                                            \
    }                                                                                      \
    const int64_t tile = 2 * batch * M * N * (K > 0 ? K : 1) / tl.count;                   \
    int64_t per = st[1] > 0 ? WSE_SLICE_FLOPS / (tile > 0 ? tile : 1) : tl.count;          \
    per = per < 1 ? 1 : per;                                                               \
    for (int64_t t0 = st[2]; t0 < tl.count;) {                                             \
      const int64_t t1 = tl.count - t0 < per ? tl.count : t0 + per;                        \
      gemm_tiles_##SUF(&tl, t0, t1, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, \
                       C, ldc, sc, hb);                                                    \
      t0 = t1;                                                                             \
      if (t0 < tl.count && st[0]) {                                                        \
        st[2] = (int32_t)t0;                                                               \
        return WSE_PAUSED;                                                                 \
      }                                                                                    \
    }                                                                                      \
    st[2] = 0;                                                                             \
    return 0;                                                                              \
  }

WSE_DEFINE_SLICED_GEMM(f32, float)
WSE_DEFINE_SLICED_GEMM(f64, double)
WSE_DEFINE_SLICED_GEMM(bf16, float)

/* One row-major float product, tiled over the team as any other (Note [Fixed tiles]): the
   convolutions' GEMMs (wse_conv.c). */
void wse_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_f32(1, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0);
}

const wse_lib_t wse_kernels_lib = {
    .gemm_f32 = gemm_f32,
    .gemm_f64 = gemm_f64,
    .gemm_f32_sliced = gemm_f32_sliced,
    .gemm_f64_sliced = gemm_f64_sliced,
    .gemm_bf16_sliced = gemm_bf16_sliced,
    .conv2d_f32 = wse_conv2d_f32,
    .conv2d_bwd_input_f32 = wse_conv2d_bwd_input_f32,
    .conv2d_bwd_weight_f32 = wse_conv2d_bwd_weight_f32,
    .linalg = wse_linalg,
    .argsort = wse_argsort,
};
