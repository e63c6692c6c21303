/* wse_prefix.h -- pasted verbatim at the top of every GENERATED C program.
 *
 * It must stay self-contained: generated code is compiled from a temp dir with
 * no include path into the project, so this text is the only shared context
 * between the runtime (which fills in wse_lib_t) and the generated program.
 * The runtime includes this same header so the struct layout cannot drift.
 *
 * All helpers are `static inline` so that pasting the prefix into several
 * translation units never produces duplicate symbols.  The float16/bfloat16
 * conversions use integer bit manipulation only, so they stay exact even if a
 * generated program is compiled with -ffast-math.
 */
#ifndef WSE_PREFIX_H
#define WSE_PREFIX_H

#include <math.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

/* ---- ABI shared with the runtime ------------------------------------- */

/* The parameters of every GEMM entry below, for element type T: one list, so the plain and
   the sliced entries cannot drift apart. */
#define WSE_GEMM_PARAMS(T)                                                  \
  int64_t batch, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, \
      T alpha, const T* A, int64_t lda, int64_t stride_a,                   \
      const T* B, int64_t ldb, int64_t stride_b,                            \
      T beta, T* C, int64_t ldc, int64_t stride_c

typedef struct wse_lib {
  /* Row-major batched GEMM: for b in [0,batch):
       C_b = alpha * op(A_b) @ op(B_b) + beta * C_b,  op(X) = X or X^T.
     A_b = A + b*stride_a (elements), likewise B_b, C_b; M,N,K as in BLAS. */
  void (*gemm_f32)(WSE_GEMM_PARAMS(float));
  void (*gemm_f64)(WSE_GEMM_PARAMS(double));
  /* The same product, resumable: a run with a long-call limit computes it in slices and
     returns WSE_PAUSED between two if asked to pause; calling it again on the same run goes
     on from there (Note [Sliced GEMM] in csrc/wse_kernels.c). Otherwise returns 0.
     max_tile: the multiply-adds one of its tiles may hold, from the program (Note
     [Program-sized tiles] in csrc/wse_kernels.c); 0 leaves the library's own tiles.
     heads: NULL, or {Ha, inner stride of A, Hb, inner stride of B} for operands batched in
     two levels: A_b = A + (b / Ha) * stride_a + (b % Ha) * its inner stride, likewise B_b
     (Note [Two-level batches] in csrc/wse_kernels.c). */
  int (*gemm_f32_sliced)(WSE_GEMM_PARAMS(float), int64_t max_tile, const int64_t* heads);
  int (*gemm_f64_sliced)(WSE_GEMM_PARAMS(double), int64_t max_tile, const int64_t* heads);
  /* conv2d on contiguous NCHW input, OIHW weight (I = C/groups), output
     N,O,OH,OW, no bias.  p = {N, C, H, W, O, KH, KW, stride_h, stride_w,
     pad_h, pad_w, dil_h, dil_w, groups, OH, OW}.  Outputs are overwritten.
     Return 0, or WSE_ERR_NO_MEMORY when their scratch could not be allocated. */
  int (*conv2d_f32)(const float* x, const float* w, float* y, const int64_t* p,
                    int64_t* errinfo);
  int (*conv2d_bwd_input_f32)(const float* gy, const float* w, float* gx, const int64_t* p,
                              int64_t* errinfo);
  int (*conv2d_bwd_weight_f32)(const float* gy, const float* x, float* gw, const int64_t* p,
                               int64_t* errinfo);
  /* LAPACK routine p[0] on row-major matrices (csrc/wse_linalg.c has the contract);
     returns 0 or a WSE_ERR_* code. */
  int (*linalg)(const int64_t* p, const void* const* in, void* out, int64_t* errinfo);
  /* Stable sort of every row along the middle axis of a contiguous
     [outer, n, inner] array of dtype dt (WSE_DT_*): writes each row's sorting
     permutation to idx (same layout).  NaN sorts as the largest value.  Returns 0, or
     WSE_ERR_NO_MEMORY when its scratch could not be allocated. */
  int (*argsort)(const void* x, int dt, int64_t outer, int64_t n, int64_t inner,
                 int descending, int64_t* idx, int64_t* errinfo);
  /* gemm_f32_sliced for operands that hold bfloat16 values (casts of bfloat16 tensors): the
     CPU's bfloat16 dot products where it has them, summing in float (Note [BF16 GEMM] in
     csrc/wse_gemm_bf16.c); the float product elsewhere. */
  int (*gemm_bf16_sliced)(WSE_GEMM_PARAMS(float), int64_t max_tile, const int64_t* heads);
} wse_lib_t;

/* dtype codes of library kernels that take any dtype (lib->argsort). */
enum {
  WSE_DT_F32, WSE_DT_F64, WSE_DT_F16, WSE_DT_BF16, WSE_DT_I64, WSE_DT_I32,
  WSE_DT_I16, WSE_DT_I8, WSE_DT_U8, WSE_DT_BOOL
};

/* The single entry point every generated program exports. It runs the program's kernel calls
   from *next on, in order, and keeps *next at the call it is at (stored with release order, so
   another thread that reads *next >= c sees everything calls before c wrote) and, once it
   returns, at the first call not finished. Before each call it reads stop[0]: when set, it
   returns WSE_PAUSED, and a later call (from any thread) resumes there (Note [Who runs a
   program] in lazydev/runtime/queue.py). It also pauses before call stop[3] when that is
   nonzero (a host that needs only what the calls before it write: Note [Early reads] in
   lazydev/compile/passes.py). When stop[1] is nonzero it also pauses before a call whose last
   run took more than stop[1] microseconds: a worker that runs on one thread leaves long calls
   to a host that may soon wait for them, except sliced GEMMs, which may also pause inside,
   with their progress in stop[2] (Note [Sliced GEMM]), and calls that fit in what is left of
   stop[4], a budget in microseconds from the entry's start (WSE_IN_BUDGET). */
typedef int (*wse_entry_fn)(const wse_lib_t* lib, void* const* bufs,
                            const double* scalars, int64_t* errinfo, int32_t* next,
                            const volatile int32_t* stop);

/* Entry-point return codes; details go to errinfo[0..3]. */
#define WSE_OK 0
#define WSE_PAUSED (-1)  /* stop[] said so: resume from *next */
#define WSE_ERR_INDEX 1    /* errinfo[0] = index value, errinfo[1] = dim size */
#define WSE_ERR_ZERO_DIV 2 /* integer division by zero */
#define WSE_ERR_CHECK 3    /* a CHECK node failed (lazydev/trace/checks.py): errinfo[0] = the
                              value it shows, [1] = flat position, [2] = check id */
#define WSE_ERR_NO_LAPACK 4 /* the LAPACK routine could not be loaded */
#define WSE_ERR_NO_MEMORY 5 /* errinfo[0] = bytes of scratch a library routine could not get */
#define WSE_ERR_INDEX_DIM 64 /* + the axis indexed: errinfo as WSE_ERR_INDEX's */

/* The entry times each call with it (stop[1] above). */
static inline int64_t wse_clock_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Whether a call whose last run took `us` still fits in the run's budget (stop[4]) if it
   starts now: twice its time, as the last run may have had the host's team and this one has
   one thread (Note [Worker's budget] in lazydev/runtime/queue.py). */
#define WSE_IN_BUDGET(stop, t_entry, us)                                                   \
  ((stop)[4] && (wse_clock_ns() - (t_entry)) / 1000 + 2 * (int64_t)(us) <= (stop)[4])

/* Conv parameter slots, so generated code need not hard-code offsets. */
enum {
  WSE_CONV_N, WSE_CONV_C, WSE_CONV_H, WSE_CONV_W, WSE_CONV_O, WSE_CONV_KH,
  WSE_CONV_KW, WSE_CONV_SH, WSE_CONV_SW, WSE_CONV_PH, WSE_CONV_PW,
  WSE_CONV_DH, WSE_CONV_DW, WSE_CONV_GROUPS, WSE_CONV_OH, WSE_CONV_OW,
  WSE_CONV_NPARAMS
};

/* ---- float16 / bfloat16 (storage type uint16_t) ----------------------- */

static inline uint32_t wse_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float wse_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Round-to-nearest-even, like torch. A NaN keeps its sign and its payload's top ten bits, so a
   half NaN read as float (below) converts back to the same bits: an int16 view of a half tensor
   reads and writes -3 (a NaN's bits) through a float. A float NaN of the usual payload becomes
   0x7E00, torch's NaN; one with none of those bits set gets the quiet bit, not inf. */
static inline uint16_t wse_f32_to_f16(float f) {
  uint32_t x = wse_f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) {                               /* NaN */
    uint16_t payload = (uint16_t)((ax >> 13) & 0x3FFu);
    return sign | 0x7C00u | (payload ? payload : 0x200u);
  }
  if (ax >= 0x477FF000u) return sign | 0x7C00u;         /* >= 65520 rounds to inf */
  if (ax >= 0x38800000u) {                              /* normal half */
    uint32_t h = (ax >> 13) - (112u << 10);             /* rebias exponent 127 -> 15 */
    uint32_t rem = ax & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;  /* carry may bump exponent: fine */
    return sign | (uint16_t)h;
  }
  uint32_t e = ax >> 23;
  if (e < 102u) return sign;                            /* < 2^-25: rounds to (signed) zero */
  uint32_t m = (ax & 0x7FFFFFu) | 0x800000u, s = 126u - e;  /* subnormal: m * 2^-s units of 2^-24 */
  uint32_t h = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  if (rem > half || (rem == half && (h & 1u))) h++;     /* 0x3FF+1 becomes smallest normal: correct */
  return sign | (uint16_t)h;
}

static inline float wse_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0x1Fu) return wse_bits_f32(sign | 0x7F800000u | (man << 13));
  if (exp != 0) return wse_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return wse_bits_f32(sign);
  /* subnormal: renormalise so the leading 1 lands in the implicit bit */
  uint32_t e = 113u;
  while (!(man & 0x400u)) { man <<= 1; e--; }
  return wse_bits_f32(sign | (e << 23) | ((man & 0x3FFu) << 13));
}

/* Same rounding as c10::BFloat16: RNE; a NaN keeps its top bits (torch's NaN gives 0x7FC0). */
static inline uint16_t wse_f32_to_bf16(float f) {
  uint32_t x = wse_f32_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {                /* NaN: its top bits, as for half */
    uint16_t h = (uint16_t)(x >> 16);
    return (h & 0x7Fu) ? h : (uint16_t)(h | 0x40u);
  }
  return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

static inline float wse_bf16_to_f32(uint16_t h) { return wse_bits_f32((uint32_t)h << 16); }

/* ---- integer division with Python / torch semantics -------------------- */
/* Callers must check b == 0 themselves (-> WSE_ERR_ZERO_DIV).  b == -1 is
   special-cased because INT64_MIN / -1 is UB in C; torch wraps around. */

static inline int64_t wse_floordiv_i64(int64_t a, int64_t b) {
  if (b == -1) return (int64_t)(0u - (uint64_t)a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

/* C's / and % by -1 trap (SIGFPE) for the most negative integer, killing the process; the
   CPU's fmod gives 0 there, and its truncating division (which traps on the CPU) wraps here. */
static inline int64_t wse_truncdiv_i64(int64_t a, int64_t b) {
  return b == -1 ? (int64_t)(0u - (uint64_t)a) : a / b;
}

static inline int64_t wse_fmod_i64(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }

/* Result has the sign of the divisor, like Python % and torch.remainder. */
static inline int64_t wse_mod_i64(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/* ---- floating point division helpers ---------------------------------- */

/* torch.fmod: C semantics, sign of the dividend. */
static inline double wse_fmod(double a, double b) { return fmod(a, b); }
static inline float wse_fmodf(float a, float b) { return fmodf(a, b); }

/* torch.remainder: sign of the divisor (same formula as ATen's CPU kernel). */
static inline double wse_remainder(double a, double b) {
  double m = fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}
static inline float wse_remainderf(float a, float b) {
  float m = fmodf(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

/* torch.lerp, ATen's formula (exact at both ends): |w| < 0.5 ? s + w*(e-s) : e - (e-s)*(1-w). */
static inline double wse_lerp(double s, double e, double w) {
  double d = e - s;
  return fabs(w) < 0.5 ? fma(w, d, s) : fma(w - 1.0, d, e);
}
static inline float wse_lerpf(float s, float e, float w) {
  float d = e - s;
  return fabsf(w) < 0.5f ? fmaf(w, d, s) : fmaf(w - 1.0f, d, e);
}

/* torch.div(..., rounding_mode="floor") for floats (ATen div_floor_floating). */
static inline double wse_floordiv(double a, double b) {
  if (b == 0) return a / b;
  double m = fmod(a, b), d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1.0;
  if (d == 0) return copysign(0.0, a / b);
  double f = floor(d);
  return (d - f > 0.5) ? f + 1.0 : f;
}
static inline float wse_floordivf(float a, float b) {
  if (b == 0) return a / b;
  float m = fmodf(a, b), d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1.0f;
  if (d == 0) return copysignf(0.0f, a / b);
  float f = floorf(d);
  return (d - f > 0.5f) ? f + 1.0f : f;
}

/* ---- exp, erf ------------------------------------------------------------- */

/* Note [Own float math]
   Generated loops call these float functions instead of libm's (which -D__FAST_MATH__ maps to
   libmvec's vector variants) where that was measured to pay. Figures are ns per float in a
   vectorised in-L1 loop on one core, and the worst error over all 2^32 floats against double
   libm (benchmarks/mathf.py measures both):
   * expf: libmvec's (0.21 ns, 2.6 ulp) sends any lane beyond its fast range (-inf from
     attention's causal mask, overflow) down a scalar path: 512K masked softmax inputs took
     0.68-1.03 ms against 0.11. wse_expf: 0.25 ns, 0.89 ulp, no special lane.
   * erff: libmvec's takes 0.59-0.67 ns, 4.0 ulp; wse_erff 0.35 ns, 1.37 ulp.
   * tanhf: on AVX2-only CPUs, wse_tanhf (below, a rational: faster, 5.4 ulp); with
     AVX-512, libmvec's.
   * sinf: wse_sinf_small below, a Cody-Waite reduction by pi and one odd polynomial, 0.20 ns
     (AVX-512) or 0.365 (AVX2; libmvec's 0.418), holds for |x| < 2^17 only: beyond that (and
     for NaN, inf) an exact path is needed. A per-vector escape call made it as slow as
     libmvec's (0.25 ns against 0.25-0.27 on AVX-512), so generated code checks a tile of
     arguments first and calls it on tiles where it holds (Note [Tile-checked math] in
     kernels.py). wse_expf_normal likewise skips wse_expf's clamps where |x| < 87.
   (Those figures are from an AVX-512 Intel machine. On an AVX2 AMD EPYC: wse_expf 0.42 ns,
   libmvec's 0.36; wse_erff 0.59, libmvec's 0.62; libmvec's sinf 0.41.)
   Each is straight-line code: special cases are selects, never branches, so gcc vectorises a
   loop calling it, and the functions are always_inline: gcc -O2 declined to inline a larger one
   called several times in a loop, and the loop was then not vectorised at all (5-10x slower).
   -ffp-contract=off is safe: every fused multiply-add here is an explicit fmaf.
   Not replaced, since straight-line C did not beat libmvec, whose AVX-512 code uses vscalefps
   and in-register table lookups that plain C cannot reach. logf, not written: libmvec's takes
   0.2 ns (3.9 ulp; 3.8 ns when a lane is <= 0, a scalar path), and a straight-line one would
   need about 27 vector operations by count (about 0.27 ns at the two per cycle measured
   here). */
#define WSE_MATHF static inline __attribute__((always_inline))
#define WSE_ROUND_MAGIC 12582912.0f  /* 1.5 * 2^23: (x + M) - M rounds |x| < 2^22 to an integer */

/* expf for generated loops: 0.89 ulp at worst over all floats. x = n ln2 + r (Cody-Waite,
   |r| <= ln2/2; n is read from the bits of n + M), e^r by a degree-6 minimax polynomial in
   Horner form, then 2^n as two exponent-field scalings, so n down to -150 gives the subnormal
   results. NaN propagates through the multiplies; x > 89 computes e^89 (inf). Lanes below -104
   (e^x < 2^-150 rounds to 0) compute on -176 instead, where n = -254 makes both scalings +0.0
   and the result 0: computing them on x would underflow, and an underflowing or subnormal
   product takes a microcode assist of some hundred cycles, as results in the subnormal range
   (x in [-104, -87.3]) still do. */
WSE_MATHF float wse_exp_poly(float r) {     /* e^r for |r| <= ln2/2 */
  float p = fmaf(r, 1.381313311867416e-3f, 8.369424380362034e-3f);
  p = fmaf(p, r, 4.166845604777336e-2f);
  p = fmaf(p, r, 1.6666515171527863e-1f);
  p = fmaf(p, r, 4.999999403953552e-1f);
  p = fmaf(p, r, 1.0f);
  return fmaf(p, r, 1.0f);
}

/* x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 in two parts); returns r and sets *k to
   n + WSE_ROUND_MAGIC, whose bits are bits(M) + n. */
WSE_MATHF float wse_exp_reduce(float x, float* k) {
  *k = fmaf(x, 1.44269504f, WSE_ROUND_MAGIC);
  const float n = *k - WSE_ROUND_MAGIC;
  const float r = fmaf(n, -0.693359375f, x);
  return fmaf(n, 2.12194440e-4f, r);
}

WSE_MATHF float wse_expf(float x) {
  float xc = x > 89.0f ? 89.0f : x;
  xc = x < -104.0f ? -176.0f : xc;
  float k;
  const float p = wse_exp_poly(wse_exp_reduce(xc, &k));
  const int32_t ki = (int32_t)wse_f32_bits(k), n1 = ki >> 1;   /* ki = bits(M) + n */
  const int32_t bias = 127 - (0x4B400000 >> 1);                 /* bits(M) is even */
  return p * wse_bits_f32((uint32_t)(n1 + bias) << 23)
           * wse_bits_f32((uint32_t)(ki - n1 + bias) << 23);
}

/* wse_expf for |x| < 87, where 2^n is a normal float: one exponent-field scaling, no clamps.
   Bit for bit wse_expf's result there (checked over every such float). 0.24 ns a float
   against wse_expf's 0.43 (AVX2 EPYC): generated loops call it on tiles whose arguments all
   lie in its range (Note [Tile-checked math] in compile/kernels.py). */
WSE_MATHF float wse_expf_normal(float x) {
  float k;
  const float p = wse_exp_poly(wse_exp_reduce(x, &k));
  const int32_t ki = (int32_t)wse_f32_bits(k);                 /* ki = bits(M) + n */
  return p * wse_bits_f32((uint32_t)(ki + (127 - 0x4B400000)) << 23);
}

/* erff for generated loops: 1.37 ulp at worst over all floats. |x| < 1: x + x P(x^2) (the
   leading 2/sqrt(pi) - 1 keeps the coefficient's rounding off the result); 1 <= |x| < 3.9193:
   one degree-12 polynomial in |x| - 2.45965; beyond, erf rounds to 1. Both polynomials are
   minimax fits with float coefficients (each rounded, the lower ones refitted). The sign is
   or-ed back, so erf(-0) = -0; NaN takes the second polynomial and stays NaN. */
WSE_MATHF float wse_erff(float x) {
  const float a = fabsf(x), t = a * a;
  float p = fmaf(t, 7.853861461626366e-05f, -8.010193705558777e-04f);
  p = fmaf(p, t, 5.188327748328447e-03f);
  p = fmaf(p, t, -2.6853812858462334e-02f);
  p = fmaf(p, t, 1.128358542919159e-01f);
  p = fmaf(p, t, -3.761262595653534e-01f);
  p = fmaf(p, t, 1.2837916612625122e-01f);
  const float small = fmaf(a, p, a);
  const float d = a - 2.4596500396728516f;
  float q = fmaf(d, -9.124654752667993e-06f, 2.545877214288339e-05f);
  q = fmaf(q, d, 5.156814222573303e-05f);
  q = fmaf(q, d, -3.018560237251222e-04f);
  q = fmaf(q, d, 3.9208351518027484e-04f);
  q = fmaf(q, d, 4.610706528183073e-04f);
  q = fmaf(q, d, -2.964642131701112e-03f);
  q = fmaf(q, d, 6.803878117352724e-03f);
  q = fmaf(q, d, -9.916726499795914e-03f);
  q = fmaf(q, d, 9.846868924796581e-03f);
  q = fmaf(q, d, -6.546093616634607e-03f);
  q = fmaf(q, d, 2.6607715990394354e-03f);
  q = fmaf(q, d, 9.994957447052002e-01f);
  const float large = a >= 3.9193f ? 1.0f : q;
  const float y = a < 1.0f ? small : large;
  return wse_bits_f32(wse_f32_bits(y) | (wse_f32_bits(x) & 0x80000000u));
}

/* sinf for |x| < 2^17 only, 1.84 ulp at worst there: a = n pi + r, |r| <= pi/2, by a
   three-part Cody-Waite reduction (exact for these n), then an odd polynomial in r. Past
   2^17 (and for inf, NaN) the reduction needs more bits of pi than three floats hold, so
   generated code calls it only on tiles it has checked (Note [Tile-checked math] in
   compile/kernels.py). */
WSE_MATHF float wse_sinf_small(float x) {
  const float a = fabsf(x);
  const float k = fmaf(a, 0.318309873f, WSE_ROUND_MAGIC), n = k - WSE_ROUND_MAGIC;
  float r = fmaf(n, -3.141592502593994f, a);
  r = fmaf(n, -1.5099578831723193e-07f, r);
  r = fmaf(n, -1.0780605906948477e-14f, r);
  const float r2 = r * r;
  float s = fmaf(r2, 2.605630925e-06f, -1.980953821e-04f);
  s = fmaf(s, r2, 8.333065547e-03f);
  s = fmaf(s, r2, -1.666665971e-01f);
  s = fmaf(s, r * r2, r);
  const uint32_t sb = wse_f32_bits(s), mag = sb & 0x7FFFFFFFu;
  const uint32_t m1 = mag < 0x3F800000u ? mag : 0x3F800000u;      /* |sin| <= 1 */
  /* sin(n pi + r) = (-1)^n sin r (n's parity is k's lowest bit), and sin is odd */
  return wse_bits_f32(m1 | ((sb ^ (wse_f32_bits(k) << 31) ^ wse_f32_bits(x)) & 0x80000000u));
}

/* tanhf for generated loops. Which one is faster depends on the vector ISA
   (benchmarks/mathf.py): with AVX-512, libmvec's (vscalefps, masked lanes) took 0.28-0.30 ns;
   with AVX2 only (AMD EPYC, Zen 3), libmvec's took 0.91 ns, the 1.36-ulp two-branch form this
   replaced (odd polynomial below 0.625, 1 - 2 / (e^2a + 1) above) 0.71, and this one 0.34.
   It is x P(x^2) / Q(x^2), a [9/8] rational fitted for least maximum relative error on
   [0, 9] (2.1e-8, linearised Lawson iteration), the form Eigen's and XLA's CPU tanh take: no
   branch, no exponent, one division. The price is accuracy: 5.4 ulp at worst over all floats
   (the rounding of the two Horner chains, 3.5 ulp already near 0), against 1 ulp for torch's
   Sleef-based kernel; the suite's float32 tolerance (1.3e-6 relative) is 20 ulp. The 20-op
   chain (4 tanh per element) spent 3 of its 16 ms on tanh's extra 0.37 ns. x is clamped to
   WSE_TANH_CLAMP, the least float where the rational rounds to 1 (it exceeds 1 by an ulp
   beyond), so the result never leaves [-1, 1], and past it is 1, tanh's value there to
   3.8 ulp. The selects keep NaN (a comparison with NaN is false) and the form keeps -0. */
#ifdef __AVX512F__
WSE_MATHF float wse_tanhf(float x) { return tanhf(x); }
#else
#define WSE_TANH_CLAMP 7.99643373f
WSE_MATHF float wse_tanhf(float x) {
  const float a = x > WSE_TANH_CLAMP ? WSE_TANH_CLAMP : x;
  const float c = a < -WSE_TANH_CLAMP ? -WSE_TANH_CLAMP : a, t = c * c;
  float p = fmaf(t, 1.3354395963313561e-08f, 2.0608897415532253e-05f);
  p = fmaf(p, t, 3.495577253114668e-03f);
  p = fmaf(p, t, 1.338101661331308e-01f);
  p = fmaf(p, t, 9.999999794644586e-01f);
  float q = fmaf(t, 7.776451471951481e-07f, 3.285616769580045e-04f);
  q = fmaf(q, t, 2.587694123169012e-02f);
  q = fmaf(q, t, 4.6714332209030496e-01f);
  q = fmaf(q, t, 1.0f);
  return (c * p) / q;
}
#endif

/* ---- activations -------------------------------------------------------- */

static inline double wse_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline float wse_sigmoidf(float x) { return 1.0f / (1.0f + wse_expf(-x)); }

/* Exact (erf) GELU, torch's default approximate="none", and its derivative
   for the backward pass.  Own constants: M_SQRT1_2 is missing under -std=c11. */
#define WSE_SQRT1_2 0.70710678118654752440
#define WSE_INV_SQRT_2PI 0.39894228040143267794
static inline double wse_gelu(double x) { return 0.5 * x * (1.0 + erf(x * WSE_SQRT1_2)); }
static inline float wse_geluf(float x) {
  return 0.5f * x * (1.0f + wse_erff(x * (float)WSE_SQRT1_2));
}
static inline double wse_gelu_grad(double x) {
  return 0.5 * (1.0 + erf(x * WSE_SQRT1_2)) + x * exp(-0.5 * x * x) * WSE_INV_SQRT_2PI;
}
static inline float wse_gelu_gradf(float x) {
  return 0.5f * (1.0f + wse_erff(x * (float)WSE_SQRT1_2)) +
         x * wse_expf(-0.5f * x * x) * (float)WSE_INV_SQRT_2PI;
}

/* ---- helpers used by generated code ------------------------------------ */

/* Integer power by squaring (torch.pow on integers); negative exponents give 0 except for
   bases 1 and -1, as in ATen. */
static inline int64_t wse_ipow(int64_t base, int64_t exp) {
  if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  int64_t r = 1;
  while (exp) { if (exp & 1) r *= base; base *= base; exp >>= 1; }
  return r;
}

/* Float -> integer as PyTorch's CPU kernels give it on x86 (cvttss2si/cvttsd2si): NaN and values
   out of range become INT64_MIN for int64, INT32_MIN for the narrower types, which then keep
   their low bits (inf -> uint8 is 0, 300.0 -> uint8 is 44). C leaves these undefined. */
static inline int64_t wse_f2i64(double x) {
  if (!(x >= -9.2233720368547758e18 && x < 9.2233720368547758e18)) return INT64_MIN;
  return (int64_t)x;
}

static inline int32_t wse_f2i32(double x) {
  if (!(x > -2147483649.0 && x < 2147483648.0)) return INT32_MIN;
  return (int32_t)x;
}

#endif /* WSE_PREFIX_H */
