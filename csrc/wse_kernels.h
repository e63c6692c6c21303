/* wse_kernels.h -- private to the library kernels: what the convolutions (wse_conv.c) share
 * with the batched GEMM and the team policy (wse_kernels.c). Not an ABI: generated programs
 * reach both through wse_lib_t (wse_prefix.h). */
#ifndef WSE_KERNELS_H
#define WSE_KERNELS_H

#include "wse_runtime.h"

/* Work (multiply-adds or elements copied) below which forking a team costs
   more than it saves (a libgomp fork/join is a few microseconds). */
#define WSE_OMP_MIN_WORK (1LL << 15)

/* The host's team size (Note [Fixed tiles] in wse_kernels.c). */
extern int wse_team;
/* Set inside a loop that spreads its iterations (images) over the team: each GEMM there is one
   tile, wherever the loop runs (for_each_image in wse_conv.c). */
extern __thread int wse_whole_gemms;

/* Fork a team only for enough work and never from inside another team. */
int wse_can_fork(int64_t work);
/* One row-major float product C = alpha op(A) op(B) + beta C, as the batched GEMM runs it. */
void wse_sgemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/* wse_gemm_bf16.c (Note [BF16 GEMM]): one thread's C = op(A) op(B) of float operands holding
   bfloat16 values; 0 when it declines (wse_bf16_gemm_ready, wse_runtime.h, says whether it can). */
int wse_gemm_bf16_one(int ta, int tb, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc);

/* wse_conv.c: the wse_lib_t entries (their contract is in wse_prefix.h). */
int wse_conv2d_f32(const float* x, const float* w, float* y, const int64_t* p,
                   int64_t* errinfo);
int wse_conv2d_bwd_input_f32(const float* gy, const float* w, float* gx, const int64_t* p,
                             int64_t* errinfo);
int wse_conv2d_bwd_weight_f32(const float* gy, const float* x, float* gw, const int64_t* p,
                              int64_t* errinfo);

#endif
