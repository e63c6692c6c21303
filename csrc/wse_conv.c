/* wse_conv.c -- conv2d forward / backward-input / backward-weight for wse_lib_t: im2col /
 * col2im + the batched GEMM of wse_kernels.c, depthwise loops, and direct loops for few
 * channels (Note [Direct convolution]). Split from wse_kernels.c, whose team and GEMM it
 * shares through wse_kernels.h. */
#include "wse_kernels.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G, OH, OW;
  int64_t Cg, Og; /* channels per group */
  int64_t K, L;   /* GEMM sizes: K = Cg*KH*KW (col rows), L = OH*OW (col columns) */
  int identity;   /* 1x1, stride 1, no padding: the input already is its col matrix */
  int depthwise;  /* one input and one output channel per group */
} conv_t;

static conv_t conv_unpack(const int64_t* p) {
  conv_t c = {p[0], p[1],  p[2],  p[3],  p[4],  p[5],  p[6],  p[7],  p[8],
              p[9], p[10], p[11], p[12], p[13], p[14], p[15], 0,     0,     0,
              0,    0,     0};
  c.Cg = c.C / c.G;
  c.Og = c.O / c.G;
  c.K = c.Cg * c.KH * c.KW;
  c.L = c.OH * c.OW;
  c.identity = c.KH == 1 && c.KW == 1 && c.sh == 1 && c.sw == 1 && c.ph == 0 && c.pw == 0 &&
               c.OH == c.H && c.OW == c.W;
  c.depthwise = c.Cg == 1 && c.Og == 1;
  return c;
}

/* Output columns [lo, hi) whose input column ow*sw + off lies inside [0, W). */
static void ow_range(const conv_t* c, int64_t off, int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + c->sw - 1) / c->sw;
  int64_t top = c->W - 1 - off;
  int64_t h = top < 0 ? 0 : top / c->sw + 1;
  if (h > c->OW) h = c->OW;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* col[(ch*KH+kh)*KW+kw][oh*OW+ow] = x[ch][oh*sh-ph+kh*dh][ow*sw-pw+kw*dw] (0 outside).
   Parallel over channels: the same loop shape is race-free for col2im. */
static void im2col(const conv_t* c, const float* x, float* col) {
  _Pragma("omp parallel for schedule(static) if (wse_can_fork(c->K * c->L))")
  for (int64_t ch = 0; ch < c->Cg; ch++)
    for (int64_t kh = 0; kh < c->KH; kh++)
      for (int64_t kw = 0; kw < c->KW; kw++) {
        float* row = col + ((ch * c->KH + kh) * c->KW + kw) * c->L;
        int64_t off = kw * c->dw - c->pw, lo, hi;
        ow_range(c, off, &lo, &hi);
        for (int64_t oh = 0; oh < c->OH; oh++) {
          float* o = row + oh * c->OW;
          int64_t ih = oh * c->sh - c->ph + kh * c->dh;
          if (ih < 0 || ih >= c->H) {
            memset(o, 0, (size_t)c->OW * sizeof(float));
            continue;
          }
          const float* xr = x + (ch * c->H + ih) * c->W;
          for (int64_t ow = 0; ow < lo; ow++) o[ow] = 0;
          if (c->sw == 1)
            memcpy(o + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(float));
          else
            for (int64_t ow = lo; ow < hi; ow++) o[ow] = xr[ow * c->sw + off];
          for (int64_t ow = hi; ow < c->OW; ow++) o[ow] = 0;
        }
      }
}

/* Adjoint of im2col: gx[ch][ih][iw] += col[...]; gx must be zeroed first. */
static void col2im(const conv_t* c, const float* col, float* gx) {
  _Pragma("omp parallel for schedule(static) if (wse_can_fork(c->K * c->L))")
  for (int64_t ch = 0; ch < c->Cg; ch++)
    for (int64_t kh = 0; kh < c->KH; kh++)
      for (int64_t kw = 0; kw < c->KW; kw++) {
        const float* row = col + ((ch * c->KH + kh) * c->KW + kw) * c->L;
        int64_t off = kw * c->dw - c->pw, lo, hi;
        ow_range(c, off, &lo, &hi);
        for (int64_t oh = 0; oh < c->OH; oh++) {
          int64_t ih = oh * c->sh - c->ph + kh * c->dh;
          if (ih < 0 || ih >= c->H) continue;
          float* gr = gx + (ch * c->H + ih) * c->W;
          const float* o = row + oh * c->OW;
          for (int64_t ow = lo; ow < hi; ow++) gr[ow * c->sw + off] += o[ow];
        }
      }
}

/* y[n] (O x L) = W_g (Og x K) @ col(x[n]_g) (K x L), per group. */
static void fwd_image(const conv_t* c, const float* x, const float* w, float* y, float* col) {
  for (int64_t g = 0; g < c->G; g++) {
    const float* xg = x + g * c->Cg * c->H * c->W;
    const float* b = xg;
    if (!c->identity) {
      im2col(c, xg, col);
      b = col;
    }
    wse_sgemm(0, 0, c->Og, c->L, c->K, 1.0f, w + g * c->Og * c->K, c->K, b, c->L, 0.0f,
          y + g * c->Og * c->L, c->L);
  }
}

/* gx[n]_g = col2im(W_g^T (K x Og) @ gy[n]_g (Og x L)). */
static void bwd_input_image(const conv_t* c, const float* gy, const float* w, float* gx,
                            float* col) {
  for (int64_t g = 0; g < c->G; g++) {
    float* gxg = gx + g * c->Cg * c->H * c->W;
    float* dst = c->identity ? gxg : col;
    wse_sgemm(1, 0, c->K, c->L, c->Og, 1.0f, w + g * c->Og * c->K, c->K, gy + g * c->Og * c->L,
          c->L, 0.0f, dst, c->L);
    if (!c->identity) {
      memset(gxg, 0, (size_t)(c->Cg * c->H * c->W) * sizeof(float));
      col2im(c, col, gxg);
    }
  }
}

/* gw_g (Og x K) (+)= gy[n]_g (Og x L) @ col(x[n]_g)^T (L x K). */
static void bwd_weight_image(const conv_t* c, const float* gy, const float* x, float* gw,
                             float* col, float beta) {
  for (int64_t g = 0; g < c->G; g++) {
    const float* xg = x + g * c->Cg * c->H * c->W;
    const float* b = xg;
    if (!c->identity) {
      im2col(c, xg, col);
      b = col;
    }
    wse_sgemm(0, 1, c->Og, c->K, c->L, 1.0f, gy + g * c->Og * c->L, c->L, b, c->L, beta,
          gw + g * c->Og * c->K, c->K);
  }
}

/* Parts to spread images over: the host's team size (Note [Fixed tiles] in wse_kernels.c),
   whoever runs the conv.  1 means images run one after another and each GEMM / im2col inside
   forks its own team instead (few, big images).  The parts fork only where the running
   thread can. */
static int64_t conv_work(const conv_t* c) {
  return c->N * c->G * c->Og * c->L * (c->K > 0 ? c->K : 1);
}

static int image_threads(const conv_t* c) {
  if (c->N < wse_team || conv_work(c) < WSE_OMP_MIN_WORK) return 1;
  return wse_team;
}

typedef void (*image_fn)(const conv_t*, const float*, const float*, float*, float*);

/* Runs fn for every image n on in + n*in_stride -> out + n*out_stride, each
   thread with its own im2col scratch (Note [Scratch failures] in wse_runtime.c). */
static void for_each_image(const conv_t* c, image_fn fn, const float* in, int64_t in_stride,
                           const float* w, float* out, int64_t out_stride, int64_t* failed) {
  int nt = image_threads(c), fork = nt > 1 && wse_can_fork(conv_work(c));
  size_t col_bytes = c->identity ? 0 : (size_t)(c->K * c->L) * sizeof(float);
  _Pragma("omp parallel num_threads(nt) if (fork)")
  {
    float* col = wse_scratch(col_bytes, failed);
    wse_whole_gemms = nt > 1;
    _Pragma("omp for schedule(static)")
    for (int64_t n = 0; n < c->N; n++)
      if (col) fn(c, in + n * in_stride, w, out + n * out_stride, col);
    wse_whole_gemms = 0;
    free(col);
  }
}

/* ---- depthwise: direct loops ---------------------------------------------
   With one input and one output channel per group, im2col + GEMM becomes a
   1 x K x L matrix-vector product dominated by im2col traffic (measured ~7x
   slower than these loops).  Planes are independent, so parallel over them. */

/* y (OH x OW) = depthwise conv of one input plane x (H x W) with taps w. */
static void dw_fwd_plane(const conv_t* c, const float* x, const float* w, float* y) {
  memset(y, 0, (size_t)c->L * sizeof(float));
  for (int64_t kh = 0; kh < c->KH; kh++)
    for (int64_t kw = 0; kw < c->KW; kw++) {
      float wv = w[kh * c->KW + kw];
      int64_t off = kw * c->dw - c->pw, lo, hi;
      ow_range(c, off, &lo, &hi);
      for (int64_t oh = 0; oh < c->OH; oh++) {
        int64_t ih = oh * c->sh - c->ph + kh * c->dh;
        if (ih < 0 || ih >= c->H) continue;
        const float* restrict xr = x + ih * c->W;
        float* restrict yr = y + oh * c->OW;
        if (c->sw == 1) /* contiguous: lets the compiler vectorise */
          for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow + off];
        else
          for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * c->sw + off];
      }
    }
}

/* gx (H x W) = adjoint of dw_fwd_plane applied to gy (OH x OW). */
static void dw_bwd_input_plane(const conv_t* c, const float* gy, const float* w, float* gx) {
  memset(gx, 0, (size_t)(c->H * c->W) * sizeof(float));
  for (int64_t kh = 0; kh < c->KH; kh++)
    for (int64_t kw = 0; kw < c->KW; kw++) {
      float wv = w[kh * c->KW + kw];
      int64_t off = kw * c->dw - c->pw, lo, hi;
      ow_range(c, off, &lo, &hi);
      for (int64_t oh = 0; oh < c->OH; oh++) {
        int64_t ih = oh * c->sh - c->ph + kh * c->dh;
        if (ih < 0 || ih >= c->H) continue;
        float* restrict gr = gx + ih * c->W;
        const float* restrict gyr = gy + oh * c->OW;
        if (c->sw == 1)
          for (int64_t ow = lo; ow < hi; ow++) gr[ow + off] += wv * gyr[ow];
        else
          for (int64_t ow = lo; ow < hi; ow++) gr[ow * c->sw + off] += wv * gyr[ow];
      }
    }
}

/* gw taps of channel ch, summed over all images.  Partial sums go through a
   per-column buffer so the inner loop vectorises without -ffast-math. */
static void dw_bwd_weight_channel(const conv_t* c, const float* gy, const float* x, float* gw,
                                  int64_t ch, float* restrict acc) {
  for (int64_t kh = 0; kh < c->KH; kh++)
    for (int64_t kw = 0; kw < c->KW; kw++) {
      int64_t off = kw * c->dw - c->pw, lo, hi;
      ow_range(c, off, &lo, &hi);
      memset(acc, 0, (size_t)c->OW * sizeof(float));
      for (int64_t n = 0; n < c->N; n++)
        for (int64_t oh = 0; oh < c->OH; oh++) {
          int64_t ih = oh * c->sh - c->ph + kh * c->dh;
          if (ih < 0 || ih >= c->H) continue;
          const float* restrict xr = x + ((n * c->C + ch) * c->H + ih) * c->W;
          const float* restrict gyr = gy + (n * c->O + ch) * c->L + oh * c->OW;
          if (c->sw == 1)
            for (int64_t ow = lo; ow < hi; ow++) acc[ow] += gyr[ow] * xr[ow + off];
          else
            for (int64_t ow = lo; ow < hi; ow++) acc[ow] += gyr[ow] * xr[ow * c->sw + off];
        }
      float sum = 0;
      for (int64_t ow = lo; ow < hi; ow++) sum += acc[ow];
      gw[ch * c->KH * c->KW + kh * c->KW + kw] = sum;
    }
}

static void dw_fwd(const conv_t* c, const float* x, const float* w, float* y) {
  int64_t planes = c->N * c->C, taps = c->KH * c->KW;
  _Pragma("omp parallel for schedule(static) if (wse_can_fork(planes * c->L * taps))")
  for (int64_t i = 0; i < planes; i++)
    dw_fwd_plane(c, x + i * c->H * c->W, w + (i % c->C) * taps, y + i * c->L);
}

static void dw_bwd_input(const conv_t* c, const float* gy, const float* w, float* gx) {
  int64_t planes = c->N * c->C, taps = c->KH * c->KW;
  _Pragma("omp parallel for schedule(static) if (wse_can_fork(planes * c->L * taps))")
  for (int64_t i = 0; i < planes; i++)
    dw_bwd_input_plane(c, gy + i * c->L, w + (i % c->C) * taps, gx + i * c->H * c->W);
}

static void dw_bwd_weight(const conv_t* c, const float* gy, const float* x, float* gw,
                          int64_t* failed) {
  _Pragma("omp parallel if (wse_can_fork(c->N * c->C * c->L * c->KH * c->KW))")
  {
    float* acc = wse_scratch((size_t)c->OW * sizeof(float), failed);
    _Pragma("omp for schedule(static)")
    for (int64_t ch = 0; ch < c->C; ch++)
      if (acc) dw_bwd_weight_channel(c, gy, x, gw, ch, acc);
    free(acc);
  }
}

/* ---- direct: few channels ------------------------------------------------
   Note [Direct convolution]
   With few channels, im2col + GEMM runs one small GEMM per image (for the
   CNN's 8 -> 16 channel 3x3 conv: 16 x 196 x 72), where call and packing
   overheads dominate: 70-85 GFLOP/s.  The direct loops below keep a tile of
   16 output columns of 8 output channels in vector registers and stream each
   input row tap past them (one load, 8 broadcast FMAs), on a zero-padded copy
   of the input so no tap needs a bounds check: 140-170 GFLOP/s on that conv,
   as fast as torch's oneDNN.  Stride 1, no dilation, one group.  The backward
   input is the same loop on flipped, channel-swapped weights.  The backward
   weight holds, per output channel pair and input channel, the 2 x 9 sums of a
   3x3 kernel's taps in registers over each image's rows (18 independent FMA
   chains), and adds them into lane sums per block of images: 265-300 against
   430-510 us for the GEMM.  Each output is summed in a fixed order (weights:
   blocks in order, then lanes), so results do not depend on the thread count.
   A tile is one vector register wide: 16 floats with AVX-512 (the figures
   above), 8 with AVX2.  The forward tile holds 8 accumulators either way; the
   backward weight's 2 x 9 sums and their operands fit in AVX-512's 32
   registers, not in AVX2's 16, which sums one output channel a pass (two ran
   no faster).  On an AVX2 EPYC the CNN's program went from 3.9 to 2.9 ms:
   forward convs 0.84 -> 0.47 ms, backward input 0.51 -> 0.28, backward
   weights 0.84 -> 0.64 (the 8 -> 16 channel one as fast as its GEMM, the
   1 -> 8 one twice as fast). */
#ifdef __AVX512F__
#define DC_VL 16
#define DC_WOB 2
#else
#define DC_VL 8
#define DC_WOB 1
#endif
#define DC_OB 8 /* output channels per forward tile */
#define DC_TAPS 9 /* most taps of the direct backward weight */
typedef float dc_vec __attribute__((vector_size(DC_VL * sizeof(float)), aligned(4)));
/* Keeps a loaded vector in a register: gcc otherwise folds the load into each FMA that uses
   it, and the backward weight's loop, bound by loads (most of them split across two cache
   lines), ran 1.45x slower with AVX-512. */
#if defined(__AVX512F__)
#define DC_IN_REGISTER(v) __asm__("" : "+v"(v))
#elif defined(__AVX__)
#define DC_IN_REGISTER(v) __asm__("" : "+x"(v))
#else
#define DC_IN_REGISTER(v) ((void)0)
#endif

/* The direct loops run when their reduction (channels x taps, either way) is at most
   DIRECT_MAX_K and they make at least DIRECT_MIN_OUT channels: beyond the first, the GEMM
   caught up (32 -> 32 channels 3x3 ran as fast either way); below the second, each input load
   feeds too few FMAs (3 channels out: 1.3x slower than the GEMM). */
#define DIRECT_MAX_K 288
#define DIRECT_MIN_OUT 4

/* Without AVX2 (SSE only, other ISAs) a tile's 8 accumulators take every register and
   spill, so there the GEMM does it all. */
static int direct_ok(const conv_t* c, int64_t out_channels) {
#if defined(__AVX2__) || defined(__AVX512F__)
  return c->G == 1 && c->sh == 1 && c->sw == 1 && c->dh == 1 && c->dw == 1 &&
         c->ph < c->KH && c->pw < c->KW && c->OH > 0 && c->OW > 0 &&
         (c->C > c->O ? c->C : c->O) * c->KH * c->KW <= DIRECT_MAX_K &&
         out_channels >= DIRECT_MIN_OUT &&
         (c->N >= wse_team || c->N * c->O * c->L * c->K < WSE_OMP_MIN_WORK);
#else
  (void)c;
  (void)out_channels;
  return 0;
#endif
}

typedef struct {
  int64_t C, H, W, ph, pw; /* input planes and their padding */
  int64_t Hp, Wp, tiles;   /* padded plane: every DC_VL-wide tile's taps are in bounds */
} dc_pad_t;

static dc_pad_t dc_pad(int64_t C, int64_t H, int64_t W, int64_t ph, int64_t pw, int64_t KW,
                       int64_t OW) {
  dc_pad_t p = {C, H, W, ph, pw, H + 2 * ph, 0, (OW + DC_VL - 1) / DC_VL};
  p.Wp = p.tiles * DC_VL + KW - 1;
  return p;
}

/* The interior of `planes` padded planes from x; their borders stay as they are (zero). */
static void dc_fill(const dc_pad_t* p, const float* x, int64_t planes, float* xp) {
  for (int64_t i = 0; i < planes; i++)
    for (int64_t h = 0; h < p->H; h++)
      memcpy(xp + (i * p->Hp + h + p->ph) * p->Wp + p->pw, x + (i * p->H + h) * p->W,
             (size_t)p->W * sizeof(float));
}

/* y[oc0 + j][oh][ow0 ..] for j < OB: one tile, accumulated over every input channel and tap
   (constant OB, KH, KW after inlining: the accumulators stay in registers). */
static inline __attribute__((always_inline)) void dc_tile(
    int OB, int64_t KH, int64_t KW, const dc_pad_t* p, const float* xp, const float* w,
    int64_t oc0, int64_t oh, int64_t ow0, float* y, int64_t OH, int64_t OW) {
  dc_vec acc[DC_OB];
  for (int j = 0; j < OB; j++) acc[j] = (dc_vec){0};
  const int64_t taps = KH * KW, wstride = p->C * taps;
  for (int64_t ic = 0; ic < p->C; ic++)
    for (int64_t kh = 0; kh < KH; kh++) {
      const float* xr = xp + (ic * p->Hp + oh + kh) * p->Wp + ow0;
      const float* wr = w + (oc0 * p->C + ic) * taps + kh * KW;
      for (int64_t kw = 0; kw < KW; kw++) {
        const dc_vec xv = *(const dc_vec*)(xr + kw);
        for (int j = 0; j < OB; j++) acc[j] += wr[j * wstride + kw] * xv;
      }
    }
  const int64_t n = OW - ow0 < DC_VL ? OW - ow0 : DC_VL;
  for (int j = 0; j < OB; j++) memcpy(y + ((oc0 + j) * OH + oh) * OW + ow0, &acc[j],
                                      (size_t)n * sizeof(float));
}

static void dc_row(const dc_pad_t* p, int64_t KH, int64_t KW, const float* xp, const float* w,
                   int64_t O, int64_t oh, float* y, int64_t OH, int64_t OW) {
  for (int64_t t = 0; t < p->tiles; t++) {
    int64_t oc = 0, ow0 = t * DC_VL;
    if (KH == 3 && KW == 3)
      for (; oc + DC_OB <= O; oc += DC_OB) dc_tile(DC_OB, 3, 3, p, xp, w, oc, oh, ow0, y, OH, OW);
    for (; oc + DC_OB <= O; oc += DC_OB) dc_tile(DC_OB, KH, KW, p, xp, w, oc, oh, ow0, y, OH, OW);
    for (; oc + 4 <= O; oc += 4) dc_tile(4, KH, KW, p, xp, w, oc, oh, ow0, y, OH, OW);
    for (; oc + 2 <= O; oc += 2) dc_tile(2, KH, KW, p, xp, w, oc, oh, ow0, y, OH, OW);
    for (; oc < O; oc++) dc_tile(1, KH, KW, p, xp, w, oc, oh, ow0, y, OH, OW);
  }
}

/* y (N x O x OH x OW) = x (N x C x H x W) correlated with w (O x C x KH x KW), stride 1. */
static void dc_forward(const float* x, const float* w, float* y, int64_t N, const dc_pad_t* p,
                       int64_t O, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                       int64_t* failed) {
  const size_t bytes = (size_t)(p->C * p->Hp * p->Wp) * sizeof(float);
  _Pragma("omp parallel if (wse_can_fork(N * O * OH * OW * p->C * KH * KW))")
  {
    float* xp = wse_scratch(bytes, failed);
    if (xp) memset(xp, 0, bytes);
    _Pragma("omp for schedule(static)")
    for (int64_t n = 0; n < N; n++) {
      if (!xp) continue;
      dc_fill(p, x + n * p->C * p->H * p->W, p->C, xp);
      for (int64_t oh = 0; oh < OH; oh++)
        dc_row(p, KH, KW, xp, w, O, oh, y + n * O * OH * OW, OH, OW);
    }
    free(xp);
  }
}

static void direct_fwd(const conv_t* c, const float* x, const float* w, float* y,
                       int64_t* failed) {
  dc_pad_t p = dc_pad(c->C, c->H, c->W, c->ph, c->pw, c->KW, c->OW);
  dc_forward(x, w, y, c->N, &p, c->O, c->KH, c->KW, c->OH, c->OW, failed);
}

/* gx = gy correlated with w flipped in both taps and swapped in channels, padded by K - 1 - p:
   gx[c][ih][iw] = sum over o, kh, kw of gy[o][ih + ph - kh][iw + pw - kw] * w[o][c][kh][kw]. */
static void direct_bwd_input(const conv_t* c, const float* gy, const float* w, float* gx,
                             int64_t* failed) {
  const int64_t taps = c->KH * c->KW;
  float* wf = wse_scratch((size_t)(c->O * c->C * taps) * sizeof(float), failed);
  if (!wf) return;
  for (int64_t o = 0; o < c->O; o++)
    for (int64_t ch = 0; ch < c->C; ch++)
      for (int64_t k = 0; k < taps; k++)
        wf[(ch * c->O + o) * taps + taps - 1 - k] = w[(o * c->C + ch) * taps + k];
  dc_pad_t p = dc_pad(c->O, c->OH, c->OW, c->KH - 1 - c->ph, c->KW - 1 - c->pw, c->KW, c->W);
  dc_forward(gy, wf, gx, c->N, &p, c->C, c->KH, c->KW, c->H, c->W, failed);
  free(wf);
}

#define DC_BLOCKS 8 /* image blocks of the backward weight: its partial sums */

/* The lanes of v added in order. */
static inline float dc_hsum(dc_vec v) {
  float s = 0;
  for (int l = 0; l < DC_VL; l++) s += v[l];
  return s;
}

/* part[(o0 + j) * C + ch][tap] += the sum over rows and tiles of gy[o0 + j] times x[ch]
   shifted by the tap, for j < OB and every tap of one image's padded planes xp and gp (rows of
   gp zero past OW). Constant OB, KH and KW after inlining keep the sums in registers, and the
   OB x KH x KW independent sums hide the FMA latency. */
static inline __attribute__((always_inline)) void dc_weight_taps(
    int OB, int64_t KH, int64_t KW, const conv_t* c, const dc_pad_t* p, const float* xp,
    const float* gp, int64_t o0, int64_t ch, dc_vec* part) {
  dc_vec acc[DC_WOB][DC_TAPS];
  const int64_t taps = KH * KW, grow = p->tiles * DC_VL;
  dc_vec* out = part + (o0 * c->C + ch) * taps;
  for (int j = 0; j < OB; j++)
    for (int64_t k = 0; k < taps; k++) acc[j][k] = out[j * c->C * taps + k];
  for (int64_t oh = 0; oh < c->OH; oh++)
    for (int64_t t = 0; t < p->tiles; t++) {
      dc_vec g[DC_WOB];
      for (int j = 0; j < OB; j++)
        g[j] = *(const dc_vec*)(gp + ((o0 + j) * c->OH + oh) * grow + t * DC_VL);
      _Pragma("GCC unroll 3") for (int64_t kh = 0; kh < KH; kh++) {
        const float* xr = xp + (ch * p->Hp + oh + kh) * p->Wp + t * DC_VL;
        _Pragma("GCC unroll 3") for (int64_t kw = 0; kw < KW; kw++) {
          dc_vec xv = *(const dc_vec*)(xr + kw);
          DC_IN_REGISTER(xv);
          for (int j = 0; j < OB; j++) acc[j][kh * KW + kw] += g[j] * xv;
        }
      }
    }
  for (int j = 0; j < OB; j++)
    for (int64_t k = 0; k < taps; k++) out[j * c->C * taps + k] = acc[j][k];
}

/* One block's images added into its lane sums `part` (O x C x KH x KW vectors). */
static void dc_weight_block(const conv_t* c, const dc_pad_t* p, const float* gy, const float* x,
                            int64_t n0, int64_t n1, float* xp, float* gp, dc_vec* part) {
  const int64_t grow = p->tiles * DC_VL;
  for (int64_t n = n0; n < n1; n++) {
    dc_fill(p, x + n * c->C * c->H * c->W, c->C, xp);
    for (int64_t r = 0; r < c->O * c->OH; r++)
      memcpy(gp + r * grow, gy + (n * c->O * c->OH + r) * c->OW, (size_t)c->OW * sizeof(float));
    for (int64_t o0 = 0; o0 < c->O; o0 += DC_WOB)
      for (int64_t ch = 0; ch < c->C; ch++) {
        if (o0 + DC_WOB > c->O)
          dc_weight_taps(1, c->KH, c->KW, c, p, xp, gp, o0, ch, part);
        else if (c->KH == 3 && c->KW == 3)
          dc_weight_taps(DC_WOB, 3, 3, c, p, xp, gp, o0, ch, part);
        else
          dc_weight_taps(DC_WOB, c->KH, c->KW, c, p, xp, gp, o0, ch, part);
      }
  }
}

/* 1 when no element of x[0, n) is inf or NaN. */
static int all_finite(const float* x, int64_t n) {
  int bad = 0;
  _Pragma("omp simd reduction(|:bad)")
  for (int64_t i = 0; i < n; i++) bad |= !(x[i] - x[i] == 0.0f);
  return !bad;
}

/* The direct backward weight also multiplies the zero gradient of a tile's lanes past OW by
   the inputs those lanes would read: an inf input there made a NaN weight gradient where
   torch's is finite (0 * inf). Inputs with an inf or NaN take the im2col path, which reads
   only what the convolution uses; the check is one vectorised pass over x. */
static int direct_weight_ok(const conv_t* c, const float* x) {
  return direct_ok(c, c->O) && c->KH * c->KW <= DC_TAPS &&
         all_finite(x, c->N * c->C * c->H * c->W);
}

/* gw = the sum over images of gy correlated with x: per block of images, lane sums of every
   weight; then each weight's blocks and lanes added in a fixed order (independent of the
   thread count). */
static void direct_bwd_weight(const conv_t* c, const float* gy, const float* x, float* gw,
                              int64_t* failed) {
  dc_pad_t p = dc_pad(c->C, c->H, c->W, c->ph, c->pw, c->KW, c->OW);
  const int64_t nw = c->O * c->C * c->KH * c->KW, grow = p.tiles * DC_VL;
  const int64_t blocks = c->N < DC_BLOCKS ? c->N : DC_BLOCKS;
  const size_t xp_bytes = (size_t)(c->C * p.Hp * p.Wp) * sizeof(float);
  const size_t gp_bytes = (size_t)(c->O * c->OH * grow) * sizeof(float);
  dc_vec* part = wse_scratch((size_t)(blocks * nw) * sizeof(dc_vec), failed);
  if (!part) return;
  _Pragma("omp parallel if (wse_can_fork(c->N * c->O * c->L * c->K))")
  {
    float* xp = wse_scratch(xp_bytes, failed);
    float* gp = wse_scratch(gp_bytes, failed);
    if (xp) memset(xp, 0, xp_bytes);
    if (gp) memset(gp, 0, gp_bytes);
    _Pragma("omp for schedule(static)")
    for (int64_t b = 0; b < blocks; b++) {
      if (!xp || !gp) continue;
      memset(part + b * nw, 0, (size_t)nw * sizeof(dc_vec));
      dc_weight_block(c, &p, gy, x, b * c->N / blocks, (b + 1) * c->N / blocks, xp, gp,
                      part + b * nw);
    }
    free(xp);
    free(gp);
  }
  for (int64_t i = 0; i < nw && !*failed; i++) {
    dc_vec v = part[i];
    for (int64_t b = 1; b < blocks; b++) v += part[b * nw + i];
    gw[i] = dc_hsum(v);
  }
  free(part);
}

/* ---- entry points: 0, or WSE_ERR_NO_MEMORY (Note [Scratch failures] in wse_runtime.c) */

int wse_conv2d_f32(const float* x, const float* w, float* y, const int64_t* p,
                   int64_t* errinfo) {
  conv_t c = conv_unpack(p);
  int64_t failed = 0;
  if (c.depthwise)
    dw_fwd(&c, x, w, y);
  else if (direct_ok(&c, c.O))
    direct_fwd(&c, x, w, y, &failed);
  else
    for_each_image(&c, fwd_image, x, c.C * c.H * c.W, w, y, c.O * c.L, &failed);
  return wse_scratch_status(failed, errinfo);
}

int wse_conv2d_bwd_input_f32(const float* gy, const float* w, float* gx, const int64_t* p,
                             int64_t* errinfo) {
  conv_t c = conv_unpack(p);
  int64_t failed = 0;
  if (c.depthwise)
    dw_bwd_input(&c, gy, w, gx);
  else if (direct_ok(&c, c.C))
    direct_bwd_input(&c, gy, w, gx, &failed);
  else
    for_each_image(&c, bwd_input_image, gy, c.O * c.L, w, gx, c.C * c.H * c.W, &failed);
  return wse_scratch_status(failed, errinfo);
}

/* Images are summed into gw: the images are split into image_threads() fixed blocks, each
   summed into its own copy, and the copies added in block order, so the result does not
   depend on how many threads ran the blocks (Note [Fixed tiles] in wse_kernels.c).
   image_threads() is at most N, so every block has an image and writes its whole copy. */
static void im2col_bwd_weight(const conv_t* c, const float* gy, const float* x, float* gw,
                              int64_t* failed) {
  int64_t wsize = c->O * c->K;
  int nt = image_threads(c), fork = nt > 1 && wse_can_fork(conv_work(c));
  size_t col_bytes = c->identity ? 0 : (size_t)(c->K * c->L) * sizeof(float);
  float* part = nt > 1 ? wse_scratch((size_t)(nt * wsize) * sizeof(float), failed) : gw;
  if (!part) return;
  _Pragma("omp parallel num_threads(nt) if (fork)")
  {
    float* col = wse_scratch(col_bytes, failed);
    wse_whole_gemms = nt > 1;
    _Pragma("omp for schedule(static)")
    for (int b = 0; b < nt; b++) {
      float* acc = part + b * wsize;
      const int64_t n0 = c->N * b / nt, n1 = c->N * (b + 1) / nt;
      if (!col) continue;
      for (int64_t n = n0; n < n1; n++)
        bwd_weight_image(c, gy + n * c->O * c->L, x + n * c->C * c->H * c->W, acc, col,
                         n > n0 ? 1.0f : 0.0f);
    }
    wse_whole_gemms = 0;
    free(col);
  }
  if (nt > 1) {
    for (int64_t i = 0; i < wsize; i++) {
      float s = 0;
      for (int b = 0; b < nt; b++) s += part[b * wsize + i];
      gw[i] = s;
    }
    free(part);
  }
}

int wse_conv2d_bwd_weight_f32(const float* gy, const float* x, float* gw, const int64_t* p,
                              int64_t* errinfo) {
  conv_t c = conv_unpack(p);
  int64_t failed = 0;
  if (c.depthwise)
    dw_bwd_weight(&c, gy, x, gw, &failed);
  else if (c.N <= 0)
    memset(gw, 0, (size_t)(c.O * c.K) * sizeof(float));
  else if (direct_weight_ok(&c, x))
    direct_bwd_weight(&c, gy, x, gw, &failed);
  else
    im2col_bwd_weight(&c, gy, x, gw, &failed);
  return wse_scratch_status(failed, errinfo);
}

