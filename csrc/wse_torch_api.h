/* wse_torch_api.h -- what torch's side of the device (csrc/wse_hooks.cpp, C++) calls in the
 * runtime. Its own header because the .cpp cannot include wse_runtime.h (whose prefix is C
 * only); the embedded .cpp text gets this file inlined (lazydev/runtime/_build.py).
 */
#ifndef WSE_TORCH_API_H
#define WSE_TORCH_API_H

#include <stdint.h>

/* The runtime's memory accounting (wse_runtime.h), and `synchronize`, which waits for every
   queued program (Python's, lazydev/runtime/device.py): 0, or 1 with the failure's message in
   errbuf. */
typedef struct {
  int64_t (*bytes_in_use)(void);
  int64_t (*peak_bytes)(void);
  int64_t (*cached_bytes)(void);
  int64_t (*capacity)(void);
  void (*reset_peak)(void);
  void (*empty_cache)(void);
  int (*synchronize)(char* errbuf, int errlen);
} wse_torch_api;

#endif
