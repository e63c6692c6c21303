"""cffi builder for the `_lazydev_wse` extension (run by setup.py's cffi_modules).

The extension is a top-level module, not `lazydev._lazydev_wse`: when tests run
from the source tree, `lazydev` resolves to the (extension-less) source package,
while a top-level name is still found in site-packages.

OpenBLAS is deliberately not linked here: pip builds in an isolated env, so a
link-time path/rpath into it would dangle after install.  The runtime dlopen()s
it instead (`wse_blas_load`), with the path found by lazydev.runtime.device, and takes GEMM from
torch's MKL when torch already loaded one (`wse_team_blas_load`).
"""

import os

import cffi

# cffi exec()s this file with a __file__ relative to setup.py's directory;
# setuptools wants relative source paths, so keep everything relative to cwd.
_ROOT = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
_CSRC = os.path.join(_ROOT, "csrc")

CDEF = """
void*   wse_malloc(int64_t nbytes);
void    wse_free(void* p);
void    wse_memcpy(void* dst, const void* src, int64_t n);
int64_t wse_bytes_in_use(void);
int64_t wse_peak_bytes(void);
void    wse_reset_peak(void);
int64_t wse_capacity(void);
void    wse_set_capacity(int64_t nbytes);
void    wse_set_scratch_limit(int64_t nbytes);
int64_t wse_num_buffers(void);
int64_t wse_cached_bytes(void);
void    wse_empty_cache(void);
void*   wse_program_load(const char* so_path, char* errbuf, int errlen, void** handle);
void    wse_program_unload(void* handle);
int     wse_program_run(void* entry, void* const* bufs, const double* scalars, int64_t* errinfo,
                        int32_t* next, int32_t* stop);
int     wse_blas_load(const char* path);
int     wse_hooks_load(const char* path, int (*synchronize)(char*, int), char* errbuf,
                       int errlen);
void*   wse_hooks_symbol(const char* name);
extern "Python" int wse_py_synchronize(char* errbuf, int errlen);
int     wse_team_blas_load(const char* path);
const char* wse_prefix_source(void);
const char* wse_special_source(void);
const char* wse_hooks_source(void);
const char* wse_autocast_source(void);
void    wse_warmup(void);
void    wse_serial_thread(void);
int     wse_release_team(void);
int     wse_bf16_gemm_ready(void);
"""


def c_string_literal(text: str) -> str:
    """Encode text as a C string literal, one source line per text line so the
    generated wrapper stays readable and no single literal line is huge."""
    out = []
    for line in text.splitlines(keepends=True):
        esc = line.replace("\\", "\\\\").replace('"', '\\"')
        esc = esc.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        # Break "??x" trigraph sequences, harmless under gnu C but cheap to avoid.
        esc = esc.replace("??", '?""?')
        out.append('"' + esc + '"')
    return "\n".join(out) if out else '""'


def _read(name: str) -> str:
    with open(os.path.join(_CSRC, name), encoding="utf-8") as f:
        return f.read()


def _inline_includes(text: str) -> str:
    """Replace each `#include "wse_*.h"` line by that file's text (recursively): the embedded
    header must be self-contained, generated code has no include path into csrc/."""
    out = []
    for line in text.splitlines(keepends=True):
        head = line.strip()
        if head.startswith('#include "wse_') and head.endswith('.h"'):
            out.append(_inline_includes(_read(head[len('#include "'):-1])))
        else:
            out.append(line)
    return "".join(out)


SOURCE = """
#include "wse_runtime.h"

static const char wse_prefix_text[] =
%s;

const char* wse_prefix_source(void) { return wse_prefix_text; }

static const char wse_special_text[] =
%s;

const char* wse_special_source(void) { return wse_special_text; }

static const char wse_hooks_text[] =
%s;

const char* wse_hooks_source(void) { return wse_hooks_text; }

static const char wse_autocast_text[] =
%s;

const char* wse_autocast_source(void) { return wse_autocast_text; }
""" % (c_string_literal(_read("wse_prefix.h")),
       c_string_literal(_inline_includes(_read("wse_special.h"))),
       c_string_literal(_inline_includes(_read("wse_hooks.cpp"))),
       c_string_literal(_read("wse_autocast.cpp")))

ffibuilder = cffi.FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "_lazydev_wse",
    SOURCE,
    sources=[os.path.join(_CSRC, n) for n in ("wse_runtime.c", "wse_kernels.c", "wse_conv.c",
                                              "wse_gemm_bf16.c", "wse_linalg.c", "wse_sort.c")],
    include_dirs=[_CSRC],
    depends=[os.path.join(_CSRC, n) for n in ("wse_runtime.h", "wse_kernels.h", "wse_prefix.h",
                                              "wse_special.h", "wse_special_t.h", "wse_hooks.cpp",
                                              "wse_torch_api.h", "wse_autocast.cpp")],
    extra_compile_args=["-O3", "-march=native", "-fopenmp", "-std=gnu11"],
    extra_link_args=["-fopenmp", "-ldl"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
