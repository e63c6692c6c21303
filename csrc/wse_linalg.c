/* wse_linalg.c -- LAPACK routines for generated code (lib->linalg), from the
 * scipy-openblas32 library that wse_runtime.c dlopen()s for GEMM.
 *
 * Contract (one entry point, wse_linalg):
 *   p[0] routine (enum below; mirrored in lazydev/trace/lower_linalg.py),
 *   p[1] element size of the float data (4 or 8), p[2] batch, p[3..] routine params;
 *   in[]  row-major float matrices of that type, pivots as int32;
 *   out   the routine's outputs packed one after another, each for the whole
 *         batch (block k of every batch element before block k+1), row-major,
 *         integers (pivots, info) stored as floats (exact below 2^24).
 * LAPACK is column-major: every matrix is copied into a column-major double
 * work buffer and back.  The copies are O(n^2) against O(n^3) factorisations,
 * and computing in double makes float32 results at least as accurate as
 * PyTorch's sgetrf & co. on the CPU, so they agree within float tolerance.
 * Only the LAPACK info codes report failures; they are outputs like any
 * other value (aten.*_ex semantics), checked by _linalg_check_errors nodes.
 */
#include "wse_runtime.h"

#include <dlfcn.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum {
  R_TRSM = 1, R_POTRF, R_POTRI, R_GETRF, R_GETRS, R_PERM, R_GEQRF, R_ORGQR, R_ORMQR,
  R_QR, R_GESDD, R_SYEVD, R_SYTRF, R_SYTRS, R_GELS,
};

/* Fortran LAPACK, 32-bit integers.  Character arguments get their hidden
   length (1) appended: harmless for the C-implemented routines that lack it. */
typedef void (*getrf_t)(const int*, const int*, double*, const int*, int*, int*);
typedef void (*getrs_t)(const char*, const int*, const int*, const double*, const int*,
                        const int*, double*, const int*, int*, size_t);
typedef void (*potrf_t)(const char*, const int*, double*, const int*, int*, size_t);
typedef void (*geqrf_t)(const int*, const int*, double*, const int*, double*, double*,
                        const int*, int*);
typedef void (*orgqr_t)(const int*, const int*, const int*, double*, const int*,
                        const double*, double*, const int*, int*);
typedef void (*ormqr_t)(const char*, const char*, const int*, const int*, const int*,
                        const double*, const int*, const double*, double*, const int*,
                        double*, const int*, int*, size_t, size_t);
typedef void (*gesdd_t)(const char*, const int*, const int*, double*, const int*, double*,
                        double*, const int*, double*, const int*, double*, const int*, int*,
                        int*, size_t);
typedef void (*syevd_t)(const char*, const char*, const int*, double*, const int*, double*,
                        double*, const int*, int*, const int*, int*, size_t, size_t);
typedef void (*sytrf_t)(const char*, const int*, double*, const int*, int*, double*,
                        const int*, int*, size_t);
typedef void (*sytrs_t)(const char*, const int*, const int*, const double*, const int*,
                        const int*, double*, const int*, int*, size_t);
typedef void (*gels_t)(const char*, const int*, const int*, const int*, double*, const int*,
                       double*, const int*, double*, const int*, int*, size_t);
typedef void (*gelsy_t)(const int*, const int*, const int*, double*, const int*, double*,
                        const int*, int*, const double*, int*, double*, const int*, int*);
typedef void (*trsm_t)(int, int, int, int, int, int, int, double, const double*, int, double*,
                       int);

static struct {
  getrf_t getrf; getrs_t getrs; potrf_t potrf, potri; geqrf_t geqrf; orgqr_t orgqr;
  ormqr_t ormqr; gesdd_t gesdd; syevd_t syevd; sytrf_t sytrf; sytrs_t sytrs; gels_t gels;
  gelsy_t gelsy; trsm_t trsm;
} L;
static int g_loaded = 0;

int wse_linalg_load(void* h) {
#define SYM(field, name) if (!(L.field = (void*)dlsym(h, name))) return 1
  SYM(getrf, "scipy_dgetrf_"); SYM(getrs, "scipy_dgetrs_"); SYM(potrf, "scipy_dpotrf_");
  SYM(potri, "scipy_dpotri_"); SYM(geqrf, "scipy_dgeqrf_"); SYM(orgqr, "scipy_dorgqr_");
  SYM(ormqr, "scipy_dormqr_"); SYM(gesdd, "scipy_dgesdd_"); SYM(syevd, "scipy_dsyevd_");
  SYM(sytrf, "scipy_dsytrf_"); SYM(sytrs, "scipy_dsytrs_"); SYM(gels, "scipy_dgels_");
  SYM(gelsy, "scipy_dgelsy_"); SYM(trsm, "scipy_cblas_dtrsm");
#undef SYM
  g_loaded = 1;
  return 0;
}

/* ---- data movement ------------------------------------------------------- */

typedef struct {
  const int64_t* p;        /* routine params (p[3..] of the call) */
  const void* const* in;
  void* out;
  int dbl;                 /* element type of in/out floats: double (1) or float (0) */
  int64_t batch;
  int64_t* failed;         /* scratch not allocated (Note [Scratch failures], wse_runtime.c) */
} call_t;

/* Scratch, or NULL (the call then returns WSE_ERR_NO_MEMORY): a routine that gets NULL skips
   its work. */
static double* dalloc(int64_t* failed, int64_t n) {
  return wse_scratch((size_t)(n > 0 ? n : 1) * sizeof(double), failed);
}

static int ld1(int64_t n) { return n > 1 ? (int)n : 1; }

static double get(const void* x, int dbl, int64_t i) {
  return dbl ? ((const double*)x)[i] : (double)((const float*)x)[i];
}

static void put(void* y, int dbl, int64_t i, double v) {
  if (dbl) ((double*)y)[i] = v;
  else ((float*)y)[i] = (float)v;
}

/* Row-major rows x cols at element `off` of x -> column-major a (leading dim ld). */
static void load(const void* x, int dbl, int64_t off, int64_t rows, int64_t cols, double* a,
                 int64_t ld) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) a[i + j * ld] = get(x, dbl, off + i * cols + j);
}

/* Column-major a (leading dim ld) -> row-major rows x cols at element `off` of y. */
static void store(const double* a, int64_t ld, int64_t rows, int64_t cols, void* y, int dbl,
                  int64_t off) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) put(y, dbl, off + i * cols + j, a[i + j * ld]);
}

static void store_ints(const int* v, int64_t n, void* y, int dbl, int64_t off) {
  for (int64_t i = 0; i < n; i++) put(y, dbl, off + i, (double)v[i]);
}

/* Zero the triangle LAPACK did not write (above the diagonal if lower, else below). */
static void keep_triangle(double* a, int64_t n, int lower) {
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < n; i++)
      if (lower ? i < j : i > j) a[i + j * n] = 0;
}

static int* ialloc(int64_t* failed, int64_t n) {
  return (int*)dalloc(failed, n);   /* a double per int: plenty */
}

/* ---- routines: one batch element each ------------------------------------ */

/* p = {left, upper, unit, m, n}: X = A^-1 B (left) or B A^-1, B m x n. */
static void trsm_one(const call_t* c, int64_t b) {
  int64_t left = c->p[0], m = c->p[3], n = c->p[4], k = left ? m : n;
  double* a = dalloc(c->failed, k * k + m * n);
  if (!a) return;
  double* x = a + k * k;
  load(c->in[0], c->dbl, b * k * k, k, k, a, k);
  load(c->in[1], c->dbl, b * m * n, m, n, x, m);
  if (m > 0 && n > 0)
    L.trsm(102, left ? 141 : 142, c->p[1] ? 121 : 122, 111, c->p[2] ? 132 : 131, (int)m,
           (int)n, 1.0, a, ld1(k), x, ld1(m));
  store(x, m, m, n, c->out, c->dbl, b * m * n);
  free(a);
}

/* p = {upper, n} -> [factor n x n][info] (potrf), or [inverse n x n] (potri). */
static void potr_one(const call_t* c, int64_t b, int inverse) {
  int64_t n = c->p[1];
  int upper = (int)c->p[0], nn = (int)n, info = 0;
  char uplo = upper ? 'U' : 'L';
  double* a = dalloc(c->failed, n * n);
  if (!a) return;
  load(c->in[0], c->dbl, b * n * n, n, n, a, n);
  if (n > 0) (inverse ? L.potri : L.potrf)(&uplo, &nn, a, &nn, &info, 1);
  if (inverse) {      /* potri writes one triangle of the symmetric inverse */
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < j; i++) {
        if (upper) a[j + i * n] = a[i + j * n];
        else a[i + j * n] = a[j + i * n];
      }
  } else {
    keep_triangle(a, n, !upper);
    put(c->out, c->dbl, c->batch * n * n + b, info);
  }
  store(a, n, n, n, c->out, c->dbl, b * n * n);
  free(a);
}

/* A pivoted factorisation's packed output, [factor m x n][pivots k][info] per batch element
   (the layout of getrf and sytrf); frees the column-major factor and the pivots. */
static void store_factor(const call_t* c, int64_t b, double* a, int64_t m, int64_t n, int* piv,
                         int64_t k, int info) {
  store(a, m, m, n, c->out, c->dbl, b * m * n);
  store_ints(piv, k, c->out, c->dbl, c->batch * m * n + b * k);
  put(c->out, c->dbl, c->batch * (m * n + k) + b, info);
  free(a);
  free(piv);
}

/* p = {m, n} -> [LU m x n][pivots k][info]. */
static void getrf_one(const call_t* c, int64_t b) {
  int64_t m = c->p[0], n = c->p[1], k = m < n ? m : n;
  int mm = (int)m, nn = (int)n, lda = ld1(m), info = 0;
  double* a = dalloc(c->failed, m * n);
  int* piv = ialloc(c->failed, k);
  if (!a || !piv) {
    free(a);
    free(piv);
    return;
  }
  load(c->in[0], c->dbl, b * m * n, m, n, a, m);
  if (k > 0) L.getrf(&mm, &nn, a, &lda, piv, &info);
  store_factor(c, b, a, m, n, piv, k, info);
}

/* p = {n, nrhs, trans}; in = {LU, pivots, B} -> X. */
static void getrs_one(const call_t* c, int64_t b) {
  int64_t n = c->p[0], r = c->p[1];
  int nn = (int)n, nr = (int)r, lda = ld1(n), info = 0;
  char trans = c->p[2] ? 'T' : 'N';
  double* a = dalloc(c->failed, n * n + n * r);
  if (!a) return;
  double* x = a + n * n;
  load(c->in[0], c->dbl, b * n * n, n, n, a, n);
  load(c->in[2], c->dbl, b * n * r, n, r, x, n);
  if (n > 0 && r > 0)
    L.getrs(&trans, &nn, &nr, a, &lda, (const int*)c->in[1] + b * n, x, &lda, &info, 1);
  store(x, n, n, r, c->out, c->dbl, b * n * r);
  free(a);
}

/* p = {m, k}; in = {pivots (1-based row swaps)} -> the permutation of 0..m-1 they make.
   Returns the first bad pivot (nonzero) so the caller can report it. */
static int perm_one(const call_t* c, int64_t b, int64_t* errinfo) {
  int64_t m = c->p[0], k = c->p[1];
  const int* piv = (const int*)c->in[0] + b * k;
  double* perm = dalloc(c->failed, m);
  if (!perm) return wse_scratch_status(*c->failed, errinfo);
  for (int64_t i = 0; i < m; i++) perm[i] = (double)i;
  for (int64_t i = 0; i < k; i++) {
    int64_t j = (int64_t)piv[i] - 1;
    if (j < 0 || j >= m) {
      errinfo[0] = piv[i];
      errinfo[1] = m;
      free(perm);
      return WSE_ERR_INDEX;
    }
    double t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int64_t i = 0; i < m; i++) put(c->out, c->dbl, b * m + i, perm[i]);
  free(perm);
  return 0;
}

/* In-place geqrf of the column-major m x n matrix a; tau gets min(m, n) entries. */
static void geqrf_cm(double* a, int64_t m, int64_t n, double* tau, int64_t* failed) {
  int mm = (int)m, nn = (int)n, lda = ld1(m), lw = -1, info = 0;
  double q = 0;
  if (m == 0 || n == 0) return;
  L.geqrf(&mm, &nn, a, &lda, tau, &q, &lw, &info);
  lw = (int)q > 1 ? (int)q : 1;
  double* w = dalloc(failed, lw);
  if (w) L.geqrf(&mm, &nn, a, &lda, tau, w, &lw, &info);
  free(w);
}

/* In place: the first n columns of Q from k reflectors stored in a (m x n, ld m). */
static void orgqr_cm(double* a, int64_t m, int64_t n, int64_t k, const double* tau,
                     int64_t* failed) {
  int mm = (int)m, nn = (int)n, kk = (int)k, lda = ld1(m), lw = -1, info = 0;
  double q = 0;
  if (m == 0 || n == 0) return;
  L.orgqr(&mm, &nn, &kk, a, &lda, tau, &q, &lw, &info);
  lw = (int)q > 1 ? (int)q : 1;
  double* w = dalloc(failed, lw);
  if (w) L.orgqr(&mm, &nn, &kk, a, &lda, tau, w, &lw, &info);
  free(w);
}

/* p = {m, n} -> [QR m x n][tau k]. */
static void geqrf_one(const call_t* c, int64_t b) {
  int64_t m = c->p[0], n = c->p[1], k = m < n ? m : n;
  double* a = dalloc(c->failed, m * n + k);
  if (!a) return;
  load(c->in[0], c->dbl, b * m * n, m, n, a, m);
  geqrf_cm(a, m, n, a + m * n, c->failed);
  store(a, m, m, n, c->out, c->dbl, b * m * n);
  store(a + m * n, 1, 1, k, c->out, c->dbl, c->batch * m * n + b * k);
  free(a);
}

/* p = {m, n, k}; in = {A m x n, tau k} -> Q m x n (householder_product). */
static void orgqr_one(const call_t* c, int64_t b) {
  int64_t m = c->p[0], n = c->p[1], k = c->p[2];
  double* a = dalloc(c->failed, m * n + k);
  if (!a) return;
  load(c->in[0], c->dbl, b * m * n, m, n, a, m);
  load(c->in[1], c->dbl, b * k, 1, k, a + m * n, 1);
  orgqr_cm(a, m, n, k, a + m * n, c->failed);
  store(a, m, m, n, c->out, c->dbl, b * m * n);
  free(a);
}

/* p = {m, n, k, left, trans}; in = {A r x k, tau k, C m x n}, r = left ? m : n -> op(Q) C. */
static void ormqr_one(const call_t* c, int64_t b) {
  int64_t m = c->p[0], n = c->p[1], k = c->p[2], r = c->p[3] ? m : n;
  int mm = (int)m, nn = (int)n, kk = (int)k, lda = ld1(r), ldc = ld1(m), lw = -1, info = 0;
  char side = c->p[3] ? 'L' : 'R', trans = c->p[4] ? 'T' : 'N';
  double* a = dalloc(c->failed, r * k + k + m * n);
  if (!a) return;
  double *tau = a + r * k, *x = tau + k, q = 0;
  load(c->in[0], c->dbl, b * r * k, r, k, a, r);
  load(c->in[1], c->dbl, b * k, 1, k, tau, 1);
  load(c->in[2], c->dbl, b * m * n, m, n, x, m);
  if (m > 0 && n > 0 && k > 0) {
    L.ormqr(&side, &trans, &mm, &nn, &kk, a, &lda, tau, x, &ldc, &q, &lw, &info, 1, 1);
    lw = (int)q > 1 ? (int)q : 1;
    double* w = dalloc(c->failed, lw);
    if (w) L.ormqr(&side, &trans, &mm, &nn, &kk, a, &lda, tau, x, &ldc, w, &lw, &info, 1, 1);
    free(w);
  }
  store(x, m, m, n, c->out, c->dbl, b * m * n);
  free(a);
}

/* p = {m, n, mode: 0 reduced, 1 complete, 2 r only} -> [Q m x qc][R rr x n], as linalg.qr:
   geqrf, R = the upper triangle, Q = orgqr on a copy of the reflectors. */
static void qr_one(const call_t* c, int64_t b) {
  int64_t m = c->p[0], n = c->p[1], mode = c->p[2], k = m < n ? m : n;
  int64_t qc = mode == 1 ? m : (mode == 0 ? k : 0), rr = mode == 1 ? m : k;
  double* a = dalloc(c->failed, m * n + k + m * qc + rr * n);
  if (!a) return;
  double *tau = a + m * n, *q = tau + k, *r = q + m * qc;
  load(c->in[0], c->dbl, b * m * n, m, n, a, m);
  geqrf_cm(a, m, n, tau, c->failed);
  for (int64_t j = 0; j < n; j++)
    for (int64_t i = 0; i < rr; i++) r[i + j * rr] = i <= j && i < m ? a[i + j * m] : 0;
  for (int64_t j = 0; j < qc; j++)
    for (int64_t i = 0; i < m; i++) q[i + j * m] = j < n ? a[i + j * m] : 0;
  orgqr_cm(q, m, qc, k, tau, c->failed);
  store(q, m, m, qc, c->out, c->dbl, b * m * qc);
  store(r, rr, rr, n, c->out, c->dbl, c->batch * m * qc + b * rr * n);
  free(a);
}

/* gesdd of the column-major m x n matrix a (destroyed): s, u (m x uc), vt (vr x n). */
static int gesdd_cm(char jobz, int64_t m, int64_t n, double* a, double* s, double* u,
                    double* vt, int64_t vr, int64_t* failed) {
  int64_t k = m < n ? m : n;
  int mm = (int)m, nn = (int)n, lda = ld1(m), ldvt = ld1(vr), lw = -1, info = 0;
  double q = 0;
  int* iw = ialloc(failed, 8 * k);
  if (iw) L.gesdd(&jobz, &mm, &nn, a, &lda, s, u, &lda, vt, &ldvt, &q, &lw, iw, &info, 1);
  lw = (int)q > 1 ? (int)q : 1;
  double* w = dalloc(failed, lw);
  if (iw && w) L.gesdd(&jobz, &mm, &nn, a, &lda, s, u, &lda, vt, &ldvt, w, &lw, iw, &info, 1);
  free(w);
  free(iw);
  return info;
}

/* p = {m, n, jobz: 0 N, 1 S, 2 A} -> [U m x uc][S k][Vh vr x n][info], gesdd as
   torch.linalg.svd on the CPU; an empty matrix gets identity U / Vh like ATen's.  Singular
   vectors are unique up to sign: for tall and square matrices reference LAPACK's signs are
   MKL's (PyTorch's CPU LAPACK); for wide ones MKL's gesdd often picks others. */
static void gesdd_one(const call_t* c, int64_t b) {
  int64_t m = c->p[0], n = c->p[1], jobz = c->p[2], k = m < n ? m : n, B = c->batch;
  int64_t uc = jobz == 2 ? m : (jobz ? k : 0), vr = jobz == 2 ? n : (jobz ? k : 0);
  int info = 0;
  double* a = dalloc(c->failed, m * n + k + m * uc + vr * n);
  if (!a) return;
  double *s = a + m * n, *u = s + k, *vt = u + m * uc;
  int64_t off_s = B * m * uc, off_v = off_s + B * k;
  if (k == 0) {
    for (int64_t i = 0; i < m * uc; i++) u[i] = i % (m + 1) == 0;
    for (int64_t i = 0; i < vr * n; i++) vt[i] = i % (vr + 1) == 0;
  } else {
    load(c->in[0], c->dbl, b * m * n, m, n, a, m);
    info = gesdd_cm("NSA"[jobz], m, n, a, s, u, vt, vr, c->failed);
  }
  store(u, m, m, uc, c->out, c->dbl, b * m * uc);
  store(s, 1, 1, k, c->out, c->dbl, off_s + b * k);
  store(vt, vr, vr, n, c->out, c->dbl, off_v + b * vr * n);
  put(c->out, c->dbl, off_v + B * vr * n + b, info);
  free(a);
}

/* p = {n, upper, vectors} -> [eigenvalues n][eigenvectors n x n or none][info] (syevd). */
static void syevd_one(const call_t* c, int64_t b) {
  int64_t n = c->p[0], vc = c->p[2] ? n : 0;
  int nn = (int)n, lda = ld1(n), lw = -1, liw = -1, info = 0, qi = 0;
  char jobz = c->p[2] ? 'V' : 'N', uplo = c->p[1] ? 'U' : 'L';
  double* a = dalloc(c->failed, n * n + n);
  if (!a) return;
  double *w = a + n * n, q = 0;
  load(c->in[0], c->dbl, b * n * n, n, n, a, n);
  if (n > 0) {
    L.syevd(&jobz, &uplo, &nn, a, &lda, w, &q, &lw, &qi, &liw, &info, 1, 1);
    lw = (int)q > 1 ? (int)q : 1;
    liw = qi > 1 ? qi : 1;
    double* work = dalloc(c->failed, lw);
    int* iw = ialloc(c->failed, liw);
    if (work && iw) L.syevd(&jobz, &uplo, &nn, a, &lda, w, work, &lw, iw, &liw, &info, 1, 1);
    free(work);
    free(iw);
  }
  store(w, 1, 1, n, c->out, c->dbl, b * n);
  store(a, n, n, vc, c->out, c->dbl, c->batch * n + b * n * vc);
  put(c->out, c->dbl, c->batch * (n + n * vc) + b, info);
  free(a);
}

/* p = {n} -> [LD n x n][pivots n][info]: sytrf on the lower triangle, as linalg.ldl_factor. */
static void sytrf_one(const call_t* c, int64_t b) {
  int64_t n = c->p[0];
  int nn = (int)n, lda = ld1(n), lw = -1, info = 0;
  char uplo = 'L';
  double* a = dalloc(c->failed, n * n);
  double q = 0;
  int* piv = ialloc(c->failed, n);
  if (!a || !piv) {
    free(a);
    free(piv);
    return;
  }
  load(c->in[0], c->dbl, b * n * n, n, n, a, n);
  keep_triangle(a, n, 1);
  if (n > 0) {
    L.sytrf(&uplo, &nn, a, &lda, piv, &q, &lw, &info, 1);
    lw = (int)q > 1 ? (int)q : 1;
    double* w = dalloc(c->failed, lw);
    if (w) L.sytrf(&uplo, &nn, a, &lda, piv, w, &lw, &info, 1);
    free(w);
  }
  store_factor(c, b, a, n, n, piv, n, info);
}

/* p = {n, nrhs}; in = {LD, pivots, B} -> X (sytrs, lower). */
static void sytrs_one(const call_t* c, int64_t b) {
  int64_t n = c->p[0], r = c->p[1];
  int nn = (int)n, nr = (int)r, lda = ld1(n), info = 0;
  char uplo = 'L';
  double* a = dalloc(c->failed, n * n + n * r);
  if (!a) return;
  double* x = a + n * n;
  load(c->in[0], c->dbl, b * n * n, n, n, a, n);
  load(c->in[2], c->dbl, b * n * r, n, r, x, n);
  if (n > 0 && r > 0)
    L.sytrs(&uplo, &nn, &nr, a, &lda, (const int*)c->in[1] + b * n, x, &lda, &info, 1);
  store(x, n, n, r, c->out, c->dbl, b * n * r);
  free(a);
}

/* p = {m, n, nrhs, driver: 0 gels, 1 gelsy, rcond's bits as a double}; in = {A m x n, B m x nrhs}
   -> [X max(m, n) x nrhs (LAPACK's B: the solution, then gels's residual rows)][rank][info]. */
static void gels_one(const call_t* c, int64_t b) {
  int64_t m = c->p[0], n = c->p[1], r = c->p[2], mx = m > n ? m : n;
  int mm = (int)m, nn = (int)n, nr = (int)r, lda = ld1(m), ldb = ld1(mx), lw = -1, info = 0;
  int rank = 0;
  double rcond, q = 0;
  memcpy(&rcond, &c->p[4], sizeof rcond);
  char trans = 'N';
  double* a = dalloc(c->failed, m * n + mx * r);
  int* jpvt = ialloc(c->failed, n);
  if (!a || !jpvt) {
    free(a);
    free(jpvt);
    return;
  }
  double* x = a + m * n;
  load(c->in[0], c->dbl, b * m * n, m, n, a, m);
  for (int64_t i = 0; i < mx * r; i++) x[i] = 0;
  load(c->in[1], c->dbl, b * m * r, m, r, x, mx);
  for (int64_t i = 0; i < n; i++) jpvt[i] = 0;
  if (m > 0 && n > 0 && r > 0) {
    if (c->p[3]) L.gelsy(&mm, &nn, &nr, a, &lda, x, &ldb, jpvt, &rcond, &rank, &q, &lw, &info);
    else L.gels(&trans, &mm, &nn, &nr, a, &lda, x, &ldb, &q, &lw, &info, 1);
    lw = (int)q > 1 ? (int)q : 1;
    double* w = dalloc(c->failed, lw);
    if (w && c->p[3])
      L.gelsy(&mm, &nn, &nr, a, &lda, x, &ldb, jpvt, &rcond, &rank, w, &lw, &info);
    else if (w)
      L.gels(&trans, &mm, &nn, &nr, a, &lda, x, &ldb, w, &lw, &info, 1);
    free(w);
  }
  store(x, mx, mx, r, c->out, c->dbl, b * mx * r);
  put(c->out, c->dbl, c->batch * mx * r + b, rank);
  put(c->out, c->dbl, c->batch * (mx * r + 1) + b, info);
  free(a);
  free(jpvt);
}

/* ---- entry point ----------------------------------------------------------- */

typedef void (*one_fn)(const call_t*, int64_t);

static void potrf_one(const call_t* c, int64_t b) { potr_one(c, b, 0); }
static void potri_one(const call_t* c, int64_t b) { potr_one(c, b, 1); }

static one_fn routine_fn(int64_t r) {
  switch (r) {
    case R_TRSM: return trsm_one;
    case R_POTRF: return potrf_one;
    case R_POTRI: return potri_one;
    case R_GETRF: return getrf_one;
    case R_GETRS: return getrs_one;
    case R_GEQRF: return geqrf_one;
    case R_ORGQR: return orgqr_one;
    case R_ORMQR: return ormqr_one;
    case R_QR: return qr_one;
    case R_GESDD: return gesdd_one;
    case R_SYEVD: return syevd_one;
    case R_SYTRF: return sytrf_one;
    case R_SYTRS: return sytrs_one;
    case R_GELS: return gels_one;
    default: return NULL;
  }
}

int wse_linalg(const int64_t* p, const void* const* in, void* out, int64_t* errinfo) {
  int64_t failed = 0;
  call_t c = {p + 3, in, out, p[1] == 8, p[2], &failed};
  if (!g_loaded) return WSE_ERR_NO_LAPACK;
  if (p[0] == R_PERM) {
    for (int64_t b = 0; b < c.batch; b++) {
      int rc = perm_one(&c, b, errinfo);
      if (rc) return rc;
    }
    return 0;
  }
  one_fn fn = routine_fn(p[0]);
  if (!fn) return WSE_ERR_NO_LAPACK;
  /* Batch elements are independent; LAPACK itself runs single-threaded (wse_runtime.c). */
  int fork = 0;
#ifdef _OPENMP
  fork = c.batch > 1 && !omp_in_parallel() && omp_get_max_threads() > 1;
#endif
  _Pragma("omp parallel for schedule(dynamic) if (fork)")
  for (int64_t b = 0; b < c.batch; b++) fn(&c, b);
  return wse_scratch_status(failed, errinfo);
}
