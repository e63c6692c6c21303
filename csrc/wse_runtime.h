/* wse_runtime.h -- public C API of the lazydev "wse" device runtime.
 *
 * wse_lib_t / wse_entry_fn live in wse_prefix.h because generated programs
 * only ever see the prefix text; including it here keeps one definition.
 */
#ifndef WSE_RUNTIME_H
#define WSE_RUNTIME_H

#include "wse_prefix.h"
#include "wse_torch_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device memory ------------------------------------------------------ */
/* All accounting is atomic: an async queue thread may alloc/free concurrently. */
void*   wse_malloc(int64_t nbytes);   /* 64-byte aligned; NULL if over capacity or malloc fails */
void    wse_free(void* p);            /* NULL is a no-op */
void    wse_memcpy(void* dst, const void* src, int64_t n);
int64_t wse_bytes_in_use(void);
int64_t wse_peak_bytes(void);
void    wse_reset_peak(void);         /* peak := current bytes in use */
int64_t wse_capacity(void);           /* default: $LAZYDEV_DEVICE_MEMORY or 16 GiB */
void    wse_set_capacity(int64_t nbytes);
int64_t wse_num_buffers(void);
int64_t wse_cached_bytes(void);      /* freed blocks kept for reuse (host memory) */
void    wse_empty_cache(void);        /* release them */

/* ---- programs ------------------------------------------------------------- */
/* dlopen + dlsym("wse_entry").  Returns the entry point, and the library's handle in
   *handle, or NULL with the dlerror() text copied into errbuf. */
void* wse_program_load(const char* so_path, char* errbuf, int errlen, void** handle);
/* dlclose: once no run of the program can start or resume (Program in runtime/device.py). */
void wse_program_unload(void* handle);
/* Calls entry(&lib, bufs, scalars, errinfo, next, stop) and returns its code (WSE_PAUSED
   when stop[0] was set before the call at *next, or inside a sliced GEMM there). stop has
   five slots: pause flag, long-call limit, sliced GEMM progress, call to stop before, budget
   for long calls (csrc/wse_prefix.h). */
int   wse_program_run(void* entry, void* const* bufs, const double* scalars,
                      int64_t* errinfo, int32_t* next, int32_t* stop);

/* Installs torch's PrivateUse1 allocator, device guard and hooks from the shared object at
   path: 0 ok, 1 only the allocator (torch had a guard or hooks already), -1 dlopen failed, -2
   symbol missing (the reason in errbuf). */
int   wse_hooks_load(const char* path, int (*synchronize)(char*, int), char* errbuf, int errlen);
void* wse_hooks_symbol(const char* name);

/* ---- BLAS ----------------------------------------------------------------- */
/* dlopen the scipy-openblas32 library; 0 ok, 1 dlopen failed, 2 symbol
   missing.  Without it the GEMM kernels fall back to a slow reference loop. */
int   wse_blas_load(const char* path);
/* Use the Fortran sgemm_/dgemm_ of a library already loaded in the process (torch's MKL)
   for GEMM: 0 ok, 1 not loaded, 2 symbol missing.  LAPACK stays with OpenBLAS. */
int   wse_team_blas_load(const char* path);
void  wse_warmup(void);                 /* start the OpenMP pool and OpenBLAS buffers */
void  wse_serial_thread(void);          /* kernels this thread runs fork no team of its own */
int   wse_release_team(void);           /* end the calling thread's idle OpenMP team: 0 if so */
int   wse_bf16_gemm_ready(void);        /* the CPU's bfloat16 dot products serve GEMMs: 1 if so */
const char* wse_prefix_source(void);  /* defined by the cffi build (_build.py) */

/* ---- internal: shared between wse_runtime.c and the kernels (wse_kernels.h) --- */
typedef void (*wse_sgemm_fn)(int order, int ta, int tb, int M, int N, int K,
                             float alpha, const float* A, int lda,
                             const float* B, int ldb, float beta, float* C, int ldc);
typedef void (*wse_dgemm_fn)(int order, int ta, int tb, int M, int N, int K,
                             double alpha, const double* A, int lda,
                             const double* B, int ldb, double beta, double* C, int ldc);
void wse_kernels_set_blas(wse_sgemm_fn sgemm, wse_dgemm_fn dgemm);
/* Fortran-interface (column-major) GEMMs of a BLAS threaded by this process's OpenMP runtime. */
typedef void (*wse_fsgemm_fn)(const char* ta, const char* tb, const int* m, const int* n,
                              const int* k, const float* alpha, const float* a, const int* lda,
                              const float* b, const int* ldb, const float* beta, float* c,
                              const int* ldc);
typedef void (*wse_fdgemm_fn)(const char* ta, const char* tb, const int* m, const int* n,
                              const int* k, const double* alpha, const double* a,
                              const int* lda, const double* b, const int* ldb,
                              const double* beta, double* c, const int* ldc);
void wse_kernels_set_team_blas(wse_fsgemm_fn sgemm, wse_fdgemm_fn dgemm);
void wse_kernels_set_team(void);   /* GEMM tiles follow the calling (host) thread's team */
/* The stop array of the program run on this thread, or NULL (Note [Sliced GEMM]). */
void wse_kernels_set_run(volatile int32_t* stop);
int wse_linalg_load(void* handle);   /* wse_linalg.c: 0 ok, 1 a LAPACK symbol is missing */
int wse_linalg(const int64_t* p, const void* const* in, void* out, int64_t* errinfo);
extern const wse_lib_t wse_kernels_lib;
int wse_argsort(const void* x, int dt, int64_t outer, int64_t n, int64_t inner,
                int descending, int64_t* idx, int64_t* errinfo);   /* wse_sort.c */
/* Scratch of the library routines (Note [Scratch failures] in wse_runtime.c): malloc(n), or
   NULL with *failed = n; then wse_scratch_status gives the routine's return code. */
void* wse_scratch(size_t n, int64_t* failed);
int wse_scratch_status(int64_t failed, int64_t* errinfo);
void wse_set_scratch_limit(int64_t nbytes);   /* tests: larger requests fail; 0: no limit */

#ifdef __cplusplus
}
#endif
#endif /* WSE_RUNTIME_H */
