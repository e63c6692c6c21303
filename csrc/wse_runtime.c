/* wse_runtime.c -- device memory accounting, program loading, BLAS loading.
 *
 * The "device" is host memory: what makes it a device is that every byte is
 * accounted against a capacity, so the Python layer can raise a clean OOM
 * error (and tests can exercise it) instead of the process being killed.
 */
#define _GNU_SOURCE
#include "wse_runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define WSE_ALIGN 64
#define WSE_HEADER 64 /* a full alignment unit, so the user pointer stays aligned */
#define WSE_DEFAULT_CAPACITY (16LL << 30)
#define WSE_MAGIC 0x7773656275660a01LL /* catches double / foreign frees early */

static _Atomic int64_t g_in_use = 0;
static _Atomic int64_t g_peak = 0;
static _Atomic int64_t g_nbuf = 0;
static _Atomic int64_t g_capacity = -1; /* -1: not yet read from the environment */

/* Header stored just before each user pointer: the size is needed by
   wse_free to keep the accounting exact without a side table. */
typedef struct { int64_t cls; int64_t nbytes; int64_t magic; } wse_header_t;

static int64_t capacity_from_env(void) {
  const char* s = getenv("LAZYDEV_DEVICE_MEMORY");
  if (!s || !*s) return WSE_DEFAULT_CAPACITY;
  char* end = NULL;
  long long v = strtoll(s, &end, 10);
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  /* A malformed value silently meaning "unlimited" or "0" would be worse
     than the default; the Python layer validates and reports it. */
  if (end == s || *end != '\0' || v < 0) return WSE_DEFAULT_CAPACITY;
  return (int64_t)v;
}

int64_t wse_capacity(void) {
  int64_t c = atomic_load(&g_capacity);
  if (c < 0) {
    int64_t expected = -1;
    atomic_compare_exchange_strong(&g_capacity, &expected, capacity_from_env());
    c = atomic_load(&g_capacity);
  }
  return c;
}

void wse_set_capacity(int64_t nbytes) { atomic_store(&g_capacity, nbytes < 0 ? 0 : nbytes); }
int64_t wse_bytes_in_use(void) { return atomic_load(&g_in_use); }
int64_t wse_peak_bytes(void) { return atomic_load(&g_peak); }
int64_t wse_num_buffers(void) { return atomic_load(&g_nbuf); }
void wse_reset_peak(void) { atomic_store(&g_peak, atomic_load(&g_in_use)); }

static void bump_peak(int64_t now) {
  int64_t old = atomic_load(&g_peak);
  while (now > old && !atomic_compare_exchange_weak(&g_peak, &old, now)) {
  }
}

/* ---- block cache ----------------------------------------------------------
 * A training step frees and re-allocates the same large buffers every step
 * (outputs, the program's arena). From glibc those come back as fresh mmap
 * pages, and the kernel zero-fills every page on first touch: about a tenth of
 * an MLP step went to page faults. Freed blocks of at least WSE_CACHE_MIN bytes
 * are kept on per-size-class free lists instead (eight classes per octave, so
 * at most 12.5% slack) and handed out again, as PyTorch's CUDA caching
 * allocator does. Accounting (in use, peak, capacity) counts requested bytes
 * of live buffers only; cached blocks are host memory, released by
 * wse_empty_cache() and whenever the cache would exceed its bound. */
#define WSE_CACHE_MIN (64 << 10)
#define WSE_CACHE_CLASSES (8 * 48)
#define WSE_CACHE_LIMIT (4LL << 30)

typedef struct block { struct block* next; } block_t;
static block_t* g_free[WSE_CACHE_CLASSES];
static int64_t g_cached = 0; /* bytes on the free lists; guarded by g_lock */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Size class of a block of `total` bytes (>= WSE_CACHE_MIN): the smallest class holding it. */
static int size_class(size_t total) {
  int oct = 63 - __builtin_clzll((unsigned long long)total);
  size_t base = (size_t)1 << oct, step = base >> 3;
  size_t sub = (total - base + step - 1) / step; /* 0..8 */
  return oct * 8 + (int)sub; /* sub == 8 is the next octave's class 0: same bytes */
}

/* Block size of class `cls`: octave cls / 8, eighth cls % 8 of the way to the next. */
static size_t class_bytes(int cls) {
  size_t base = (size_t)1 << (cls / 8);
  return base + (size_t)(cls % 8) * (base >> 3);
}

static char* cache_take(int cls, size_t bytes) {
  pthread_mutex_lock(&g_lock);
  block_t* b = g_free[cls];
  if (b) {
    g_free[cls] = b->next;
    g_cached -= (int64_t)bytes;
  }
  pthread_mutex_unlock(&g_lock);
  return (char*)b;
}

/* Keep `raw` (a block of `bytes` in class `cls`) for reuse; 0 if the cache is full. */
static int cache_put(char* raw, int cls, size_t bytes) {
  int kept = 0;
  pthread_mutex_lock(&g_lock);
  if (g_cached + (int64_t)bytes <= WSE_CACHE_LIMIT) {
    ((block_t*)raw)->next = g_free[cls];
    g_free[cls] = (block_t*)raw;
    g_cached += (int64_t)bytes;
    kept = 1;
  }
  pthread_mutex_unlock(&g_lock);
  return kept;
}

int64_t wse_cached_bytes(void) {
  pthread_mutex_lock(&g_lock);
  int64_t n = g_cached;
  pthread_mutex_unlock(&g_lock);
  return n;
}

void wse_empty_cache(void) {
  pthread_mutex_lock(&g_lock);
  for (int c = 0; c < WSE_CACHE_CLASSES; c++) {
    while (g_free[c]) {
      block_t* b = g_free[c];
      g_free[c] = b->next;
      free(b);
    }
  }
  g_cached = 0;
  pthread_mutex_unlock(&g_lock);
}

/* A raw block of at least `total` bytes: from the cache when its class has one. */
static char* raw_alloc(size_t total, int* cls) {
  *cls = -1;
  if (total < WSE_CACHE_MIN) return aligned_alloc(WSE_ALIGN, total);
  *cls = size_class(total);
  if (*cls >= WSE_CACHE_CLASSES) {
    *cls = -1;
    return aligned_alloc(WSE_ALIGN, total);
  }
  size_t bytes = class_bytes(*cls);
  char* raw = cache_take(*cls, bytes);
  if (raw) return raw;
  raw = aligned_alloc(WSE_ALIGN, bytes);
  if (!raw) { /* host memory is short: give the cache back and try once more */
    wse_empty_cache();
    raw = aligned_alloc(WSE_ALIGN, bytes);
  }
  return raw;
}

/* Note [Scratch failures]
   Convolution, sorting and the LAPACK routines take host scratch while they run (an im2col
   matrix, a padded image, per-thread partial sums, sort keys, a matrix copy and LAPACK's
   workspace): O(one image, row or matrix), so malloc fails only for huge inputs, or under a
   memory limit.  Then the routine skips its work and returns
   WSE_ERR_NO_MEMORY, with the size in errinfo[0]: its kernel fails the program like an index
   check does (lazydev/compile/program.py: kernels that can fail run before any in-place
   update), and Python raises DeviceOutOfMemoryError with every tensor as it was.  A thread
   whose scratch failed still takes part in its team's worksharing loops, doing nothing, so no
   barrier waits for it. */
static _Atomic int64_t g_scratch_limit = 0;

void wse_set_scratch_limit(int64_t nbytes) { atomic_store(&g_scratch_limit, nbytes); }

void* wse_scratch(size_t n, int64_t* failed) {
  int64_t lim = atomic_load(&g_scratch_limit);
  void* p = lim > 0 && (int64_t)n > lim ? NULL : malloc(n ? n : 1);
  if (!p) __atomic_store_n(failed, (int64_t)(n ? n : 1), __ATOMIC_RELAXED);   /* never 0 */
  return p;
}

int wse_scratch_status(int64_t failed, int64_t* errinfo) {
  if (!failed) return 0;
  errinfo[0] = failed;
  return WSE_ERR_NO_MEMORY;
}

void* wse_malloc(int64_t nbytes) {
  if (nbytes < 0) return NULL;
  int64_t cap = wse_capacity();
  /* Reserve first, then check: two threads can never both squeeze in. */
  int64_t now = atomic_fetch_add(&g_in_use, nbytes) + nbytes;
  if (now > cap) {
    atomic_fetch_sub(&g_in_use, nbytes);
    return NULL;
  }
  size_t total = ((size_t)nbytes + WSE_HEADER + WSE_ALIGN - 1) & ~(size_t)(WSE_ALIGN - 1);
  int cls;
  char* raw = raw_alloc(total, &cls);
  if (!raw) {
    atomic_fetch_sub(&g_in_use, nbytes);
    return NULL;
  }
  wse_header_t* h = (wse_header_t*)(raw + WSE_HEADER - sizeof(wse_header_t));
  h->nbytes = nbytes;
  h->magic = WSE_MAGIC;
  h->cls = cls;
  atomic_fetch_add(&g_nbuf, 1);
  bump_peak(now);
  return raw + WSE_HEADER;
}

void wse_free(void* p) {
  if (!p) return;
  char* raw = (char*)p - WSE_HEADER;
  wse_header_t* h = (wse_header_t*)((char*)p - sizeof(wse_header_t));
  if (h->magic != WSE_MAGIC) {
    /* Freeing garbage would corrupt the heap silently; die loudly instead. */
    fprintf(stderr, "wse_free: %p is not a live wse allocation\n", p);
    abort();
  }
  h->magic = 0;
  atomic_fetch_sub(&g_in_use, h->nbytes);
  atomic_fetch_sub(&g_nbuf, 1);
  int cls = (int)h->cls;
  if (cls >= 0 && cache_put(raw, cls, class_bytes(cls))) return;
  free(raw);
}

void wse_memcpy(void* dst, const void* src, int64_t n) {
  if (n > 0) memcpy(dst, src, (size_t)n);
}

/* ---- programs ------------------------------------------------------------- */

static void copy_err(char* errbuf, int errlen, const char* what, const char* path) {
  if (!errbuf || errlen <= 0) return;
  const char* e = dlerror();
  snprintf(errbuf, (size_t)errlen, "%s %s: %s", what, path, e ? e : "unknown error");
}

void* wse_program_load(const char* so_path, char* errbuf, int errlen, void** handle) {
  dlerror(); /* clear stale state so the message we report is ours */
  /* RTLD_LOCAL: every program defines the same `wse_entry` symbol. */
  void* h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    copy_err(errbuf, errlen, "dlopen", so_path);
    return NULL;
  }
  void* entry = dlsym(h, "wse_entry");
  if (!entry) {
    copy_err(errbuf, errlen, "dlsym(wse_entry) in", so_path);
    dlclose(h);
    return NULL;
  }
  *handle = h;
  return entry;
}

void wse_program_unload(void* handle) {
  dlclose(handle);
}

int wse_program_run(void* entry, void* const* bufs, const double* scalars, int64_t* errinfo,
                    int32_t* next, int32_t* stop) {
  wse_entry_fn fn = (wse_entry_fn)entry;
  wse_kernels_set_run(stop);    /* for sliced GEMMs (Note [Sliced GEMM] in wse_kernels.c) */
  int rc = fn(&wse_kernels_lib, bufs, scalars, errinfo, next, stop);
  wse_kernels_set_run(NULL);
  /* Also kept in stop[5]: a Ctrl-C raised in Python as this call returns loses the return
     value, and the caller still needs to know whether the run finished (Run.interrupted). */
  stop[5] = rc;
  return rc;
}

/* ---- the device's C++ side for torch ----------------------------------------- */

static void* g_hooks;   /* the loaded library, for wse_hooks_symbol */

int wse_hooks_load(const char* path, int (*synchronize)(char*, int), char* errbuf, int errlen) {
  /* csrc/wse_hooks.cpp, built by lazydev/compile/hooks.py against this torch. Never closed:
     torch keeps pointers to the allocator, the guard and the hooks in it (which copy api). */
  const wse_torch_api api = {wse_bytes_in_use, wse_peak_bytes, wse_cached_bytes, wse_capacity,
                             wse_reset_peak, wse_empty_cache, synchronize};
  dlerror();
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    copy_err(errbuf, errlen, "dlopen", path);
    return -1;
  }
  int (*install)(const wse_torch_api*) =
      (int (*)(const wse_torch_api*))dlsym(h, "wse_install_hooks");
  if (!install) {
    copy_err(errbuf, errlen, "dlsym(wse_install_hooks) in", path);
    dlclose(h);
    return -2;
  }
  g_hooks = h;
  return install(&api);
}

/* A function of the loaded C++ side (wse_make_tensor, Note [Native tensor objects] in
   csrc/wse_hooks.cpp), or NULL when none is loaded or it has no such symbol. */
void* wse_hooks_symbol(const char* name) { return g_hooks ? dlsym(g_hooks, name) : NULL; }

/* ---- BLAS ----------------------------------------------------------------- */

int wse_blas_load(const char* path) {
  /* Loaded at run time rather than linked: the wheel is built in an isolated
     env whose OpenBLAS path would not exist after install. */
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return 1;
  void* s = dlsym(h, "scipy_cblas_sgemm");
  void* d = dlsym(h, "scipy_cblas_dgemm");
  if (!s || !d) {
    dlclose(h);
    return 2;
  }
  /* Single-threaded BLAS: the kernels parallelise with OpenMP themselves, and
     two busy-waiting thread pools on the same cores fight (see wse_kernels.c).
     This private copy of the library is not shared with numpy/scipy. */
  void (*set_threads)(int) = (void (*)(int))dlsym(h, "scipy_openblas_set_num_threads");
  if (set_threads) set_threads(1);
  wse_kernels_set_blas((wse_sgemm_fn)s, (wse_dgemm_fn)d);
  /* Without LAPACK symbols only the linalg routines fail (WSE_ERR_NO_LAPACK), not GEMM. */
  wse_linalg_load(h);
  return 0;
}

int wse_team_blas_load(const char* path) {
  /* Only a library already in the process (RTLD_NOLOAD): torch's MKL, whose threads are
     the same libgomp team as the generated kernels' (see wse_kernels.c). */
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (!h) return 1;
  void* s = dlsym(h, "sgemm_");
  void* d = dlsym(h, "dgemm_");
  if (!s || !d) {
    dlclose(h);   /* drops only the reference RTLD_NOLOAD took */
    return 2;
  }
  wse_kernels_set_team_blas((wse_fsgemm_fn)s, (wse_fdgemm_fn)d);
  return 0;
}

/* ---- start-up --------------------------------------------------------------- */

/* Note [One OpenMP team]
   libgomp spins only briefly (100 rounds, against 300000) in every team once the process has
   more of its threads than CPUs; a team thread then sleeps between parallel regions and each
   region pays a futex wake-up, 25-60 us on this machine's VM.  A second thread that forks a
   team of its own (the execution queue's worker) throttles every team for the rest of the
   process: the MLP step's small kernels took 4x longer, and torch's own eager ops on the host
   slowed by a quarter (MLP 6.2 -> 8.2 ms, transformer 115 -> 150 ms).  So only the host, the
   thread torch's eager ops also run on, forks; the worker runs what it runs on one thread,
   and the host takes the rest over (Note [Who runs a program] in runtime/queue.py). */
void wse_serial_thread(void) {
#ifdef _OPENMP
  omp_set_num_threads(1);   /* this thread's own setting: generated loops and MKL follow it */
#endif
}

/* Note [Releasing the team]
   After a parallel region libgomp's team thread spins on the other core for about 5 ms
   before it sleeps (GOMP_SPINCOUNT, read once when torch loads libgomp).  When the host has
   run its part of a program and goes back to tracing the next step, the queue's worker
   (nice 19) is to run the rest on that core, but the spinning thread holds it: the overlap of
   tracing and execution was lost (Note [Who runs a program] in lazydev/runtime/queue.py).
   So the host then ends its team (omp_pause_resource_all: the pool's threads exit, about
   17 us) and the next parallel region starts a new one (about 45 us more than a warm fork).
   Looked up at start-up, not linked: a libgomp older than OpenMP 5.0 lacks it, and the host
   then keeps its spinning team.  Returns 0 when released. */
typedef int (*wse_pause_fn)(int kind);
static wse_pause_fn g_pause_all;

int wse_release_team(void) { return g_pause_all ? g_pause_all(1 /* omp_pause_soft */) : -1; }

/* Device initialisation: start the OpenMP thread pool and let OpenBLAS allocate its buffers
   now (tens of milliseconds on first use), not inside the first step's program. */
void wse_warmup(void) {
  wse_kernels_set_team();   /* Note [Fixed tiles] in wse_kernels.c */
  g_pause_all = (wse_pause_fn)dlsym(RTLD_DEFAULT, "omp_pause_resource_all");
  float a[64 * 64], c[64 * 64];
  for (int i = 0; i < 64 * 64; i++) a[i] = 0.0f;
  wse_kernels_lib.gemm_f32(1, 0, 0, 64, 64, 64, 1.0f, a, 64, 0, a, 64, 0, 0.0f, c, 64, 0);
  volatile int sink = 0;
  #pragma omp parallel
  { sink += 0; }
  (void)sink;
}
