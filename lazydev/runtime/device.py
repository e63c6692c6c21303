"""The only Python module that touches cffi / the `_lazydev_wse` C runtime.

Everything above this layer deals in `Buffer` and `Program` objects; nothing
else should import `_lazydev_wse` so that the C boundary stays in one place.
"""

from __future__ import annotations

import functools
import gc
import os
import threading
import warnings

import numpy as np
import torch

try:
    import _lazydev_wse
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "the lazydev C runtime is not built: run `pip install .` in the repository"
    ) from exc

ffi = _lazydev_wse.ffi
lib = _lazydev_wse.lib

__all__ = [
    "DeviceOutOfMemoryError", "Buffer", "Program", "empty_cache", "memory_stats", "on_pressure",
    "set_capacity", "reset_peak", "prefix_source", "special_source", "blas_library_path",
    "gemm_library_path", "hooks_source", "install_hooks",
]

_ERRBUF_LEN = 4096


def _find_blas() -> str:
    try:
        import scipy_openblas32
    except ImportError as exc:
        raise ImportError(
            "lazydev needs OpenBLAS for the wse device: `pip install scipy-openblas32`"
        ) from exc
    return os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")


def _load_blas() -> str:
    # Loaded at import (not at build) time: see lazydev/runtime/_build.py.
    path = _find_blas()
    rc = lib.wse_blas_load(os.fsencode(path))
    if rc != 0:
        why = "cannot be loaded" if rc == 1 else "lacks scipy_cblas_sgemm/dgemm"
        raise ImportError(
            f"OpenBLAS library {path} {why}; reinstall it with `pip install scipy-openblas32`"
        )
    return path


@functools.lru_cache(maxsize=None)
def cpu_fields() -> dict:
    """The first processor's fields in /proc/cpuinfo (vendor_id, model name, flags, ...); empty
    where there is no such file."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, v in
            (line.split(":", 1) for line in first.splitlines() if ":" in line)}


def _load_gemm() -> str:
    """Which library runs GEMMs: on Intel CPUs, torch's own MKL when this torch build has one
    (its threads are the generated kernels' OpenMP team, csrc/wse_kernels.c); elsewhere, and
    when torch has no MKL, OpenBLAS split into tiles. MKL takes slower paths on other vendors'
    CPUs: on an AVX2 AMD EPYC it ran the MLP step's GEMMs at 131 GFLOP/s against OpenBLAS's 157,
    the transformer's at 152 against 162 (benchmarks/kernel_profile.py). `LAZYDEV_BLAS=openblas`
    or `=mkl` picks one, to compare the two."""
    asked = os.environ.get("LAZYDEV_BLAS", "").lower()
    if asked not in ("", "mkl", "openblas"):
        warnings.warn(f"LAZYDEV_BLAS={asked!r} is not 'mkl' or 'openblas'; ignoring it")
    choice = asked if asked in ("mkl", "openblas") else (
        "mkl" if cpu_fields().get("vendor_id") == "GenuineIntel" else "openblas")
    if choice == "mkl":
        torch_cpu = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        if lib.wse_team_blas_load(os.fsencode(torch_cpu)) == 0:
            return torch_cpu
        if asked == "mkl":
            warnings.warn("LAZYDEV_BLAS=mkl: this torch build has no MKL to lend; GEMMs run "
                          "on OpenBLAS")
    return blas_library_path


blas_library_path = _load_blas()
gemm_library_path = _load_gemm()
lib.wse_warmup()    # device initialisation: thread pool and BLAS buffers, before any step
# The thread that owns the OpenMP team wse_warmup started (torch's team too): the only one
# whose programs fork (Note [One OpenMP team] in csrc/wse_runtime.c). Others, such as the
# queue's worker or autograd's device thread syncing inside a backward hook, run programs on
# one thread.
TEAM_THREAD = threading.get_ident()


def owns_team() -> bool:
    """Whether the calling thread's programs fork the OpenMP team of two or more threads."""
    return threading.get_ident() == TEAM_THREAD and torch.get_num_threads() > 1


def release_team() -> None:
    """On the host, end its idle OpenMP team, whose spinning thread would keep the queue's
    worker off the other core (Note [Releasing the team] in csrc/wse_runtime.c)."""
    if threading.get_ident() == TEAM_THREAD:
        lib.wse_release_team()


class DeviceOutOfMemoryError(RuntimeError):
    """Raised when a wse allocation would exceed the device capacity."""


def _fmt_bytes(n: int) -> str:
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    # Exact count too: users compare it against LAZYDEV_DEVICE_MEMORY (bytes).
    return f"{n} bytes" if unit == "B" else f"{value:.2f} {unit} ({n} bytes)"


def _oom_error(nbytes: int) -> DeviceOutOfMemoryError:
    in_use, cap = lib.wse_bytes_in_use(), lib.wse_capacity()
    if in_use + nbytes <= cap:
        what = "the host allocator failed (the machine itself is out of memory)"
    else:
        what = (f"{_fmt_bytes(in_use)} already in use in {lib.wse_num_buffers()} buffers, "
                f"capacity {_fmt_bytes(cap)}")
    return DeviceOutOfMemoryError(
        f"wse device out of memory: tried to allocate {_fmt_bytes(nbytes)}; {what}. "
        "Free wse tensors or raise the capacity with lazydev.runtime.set_capacity(...) "
        "/ LAZYDEV_DEVICE_MEMORY."
    )


# Callbacks that drop buffers kept only for convenience (lazydev.debug's copy of the last
# compiled graph's inputs), run before an allocation is refused.
_ON_PRESSURE: list = []


def on_pressure(release) -> None:
    """Call `release()` when an allocation would fail, before it is retried."""
    _ON_PRESSURE.append(release)


def relieve() -> None:
    """Drop what the on_pressure callbacks hold."""
    for release in _ON_PRESSURE:
        release()


def _malloc(nbytes: int):
    p = lib.wse_malloc(nbytes)
    if p == ffi.NULL:
        relieve()
        # Dead tensors caught in reference cycles may still pin buffers; one
        # full collection is cheap next to failing the user's computation.
        gc.collect()
        p = lib.wse_malloc(nbytes)
        if p == ffi.NULL:
            raise _oom_error(nbytes)
    # size= tells Python's GC about the memory pressure of large buffers.
    return ffi.gc(p, lib.wse_free, size=nbytes)


def _host_ptr(t: torch.Tensor):
    if not t.is_cpu:        # a wse tensor's data_ptr is 0: a copy through it faults
        raise ValueError(f"lazydev runtime: host memory expected, got a tensor on {t.device}")
    return ffi.cast("void*", t.data_ptr())


def _as_cpu_contiguous(t: torch.Tensor) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_cpu:
        raise ValueError(f"expected a CPU tensor, got one on {t.device}")
    if t.is_contiguous() and not t.is_conj() and not t.is_neg():
        return t        # the common upload: its bytes are copied as they are (0.3 us, not 1)
    # resolve_conj/neg: lazy conj/neg bits would otherwise be copied unapplied.
    return t.detach().resolve_conj().resolve_neg().contiguous()


def _tensor_nbytes(t: torch.Tensor) -> int:
    return t.nbytes


# C element types Buffer.element reads in place; the rest (half precision, complex) are copied.
_ELEMENT_CTYPES = {
    torch.float32: "float*", torch.float64: "double*", torch.int64: "int64_t*",
    torch.int32: "int32_t*", torch.int16: "int16_t*", torch.int8: "int8_t*",
    torch.uint8: "uint8_t*", torch.bool: "uint8_t*",
}


class Buffer:
    """One device allocation, freed when garbage-collected (or by `free()`)."""

    # `ticket`: the queued execution that writes this buffer (runtime/queue.py), or None when
    # its contents are final; readers on the host wait for it, up to its `ready`-th kernel call
    # (Note [Early reads] in compile/passes.py).
    __slots__ = ("nbytes", "ptr", "ticket", "ready", "__weakref__")

    def __init__(self, nbytes: int):
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"Buffer size must be >= 0, got {nbytes}")
        self.nbytes = nbytes
        self.ticket = None
        self.ready = None
        self.ptr = _malloc(nbytes)  # wse_malloc(0) returns a unique valid pointer

    @property
    def addr(self) -> int:
        return int(ffi.cast("uintptr_t", self.ptr))

    def __repr__(self) -> str:
        return f"Buffer(nbytes={self.nbytes}, addr=0x{self.addr:x})"

    def free(self) -> None:
        """Release the allocation now instead of at garbage collection.
        Any numpy_view of this buffer dangles afterwards."""
        if self.ptr is not None:
            ffi.release(self.ptr)
            self.ptr = None

    def _live_ptr(self):
        if self.ptr is None:
            raise RuntimeError("use of a freed wse Buffer")
        return self.ptr

    @staticmethod
    def from_tensor(t: torch.Tensor) -> "Buffer":
        """Copy a CPU tensor (any strides/dtype) into a new buffer, contiguous."""
        src = _as_cpu_contiguous(t)
        buf = Buffer(_tensor_nbytes(src))
        if buf.nbytes:
            lib.wse_memcpy(buf.ptr, _host_ptr(src), buf.nbytes)
        return buf

    def write(self, t: torch.Tensor) -> None:
        """Copy a CPU tensor's bytes in; its byte size must equal `nbytes`."""
        src = _as_cpu_contiguous(t)
        n = _tensor_nbytes(src)
        if n != self.nbytes:
            raise ValueError(f"Buffer.write: tensor has {n} bytes, buffer has {self.nbytes}")
        if n:
            lib.wse_memcpy(self._live_ptr(), _host_ptr(src), n)

    def to_tensor(self, dtype: torch.dtype, shape, start: int = 0) -> torch.Tensor:
        """A new CPU tensor holding a copy of numel elements from element `start` on."""
        out = torch.empty(tuple(shape), dtype=dtype, device="cpu")
        n = _tensor_nbytes(out)
        skip = start * out.element_size()
        if n == 0:          # (an empty view's offset may lie past an empty buffer's end)
            return out
        if start < 0 or skip + n > self.nbytes:
            raise ValueError(f"Buffer.to_tensor: {tuple(shape)} {dtype} from element {start} "
                             f"needs {skip + n} bytes, buffer has {self.nbytes}")
        if n:
            lib.wse_memcpy(_host_ptr(out), ffi.cast("char*", self._live_ptr()) + skip, n)
        return out

    def element(self, dtype: torch.dtype, index: int):
        """Element `index` as a Python number, read in place (`.item()`: no CPU tensor, so
        none of its allocation, whose code the step's program has just evicted from the
        caches); None for a dtype without a C type here (the caller then copies)."""
        ctype = _ELEMENT_CTYPES.get(dtype)
        if ctype is None:
            return None
        if index < 0 or (index + 1) * dtype.itemsize > self.nbytes:
            raise ValueError(f"Buffer.element: element {index} of {dtype} lies past the "
                             f"buffer's {self.nbytes} bytes")
        value = ffi.cast(ctype, self._live_ptr())[index]
        return bool(value) if dtype is torch.bool else value

    def numpy_view(self, dtype, count: int) -> np.ndarray:
        """Zero-copy numpy view of the first `count` elements (tests/debug)."""
        dtype = np.dtype(dtype)
        if count * dtype.itemsize > self.nbytes:
            raise ValueError(f"numpy_view: {count} x {dtype} exceeds {self.nbytes} bytes")
        # The cffi buffer keeps self.ptr (and so the allocation) alive.
        raw = ffi.buffer(self._live_ptr(), max(self.nbytes, 0))
        return np.frombuffer(raw, dtype=dtype, count=count)


class BufferWindow(Buffer):
    """Bytes [offset, offset + nbytes) of a buffer, as a program input (Note [Windows] in
    tensor/wse_tensor.py). It holds its buffer, so the buffer outlives it, and it reads as
    ready when its buffer is (a host read of it waits for the run writing the buffer)."""

    __slots__ = ("base", "offset")

    def __init__(self, base: Buffer, offset: int, nbytes: int):
        if offset < 0 or offset + nbytes > base.nbytes:
            raise ValueError(f"BufferWindow: bytes [{offset}, {offset + nbytes}) of a "
                             f"{base.nbytes}-byte buffer")
        if type(base) is BufferWindow:
            # A window of a clone's window (x = x[1:].clone() step after step) is one of the
            # first buffer: windows do not chain, one per step, back to it.
            base, offset = base.base, base.offset + offset
        self.base, self.offset, self.nbytes = base, offset, int(nbytes)
        self.ptr = ffi.cast("char*", base._live_ptr()) + offset

    @property
    def ticket(self):
        return self.base.ticket

    @ticket.setter
    def ticket(self, ticket) -> None:
        # A program whose output is one of its input windows (a clone of a slice) returns the
        # window itself as that output's buffer (Program.execute's "in" outputs); a read that
        # finds the run writing the base finished then marks the base final.
        self.base.ticket = ticket

    @property
    def ready(self):
        return self.base.ready

    @ready.setter
    def ready(self, ready) -> None:
        self.base.ready = ready

    def free(self) -> None:
        self.ptr = None             # the memory is the base buffer's

    def _live_ptr(self):
        if self.ptr is None or self.base.ptr is None:
            raise RuntimeError("use of a freed wse Buffer")
        return self.ptr


def memory_stats() -> dict:
    return {
        "bytes_in_use": lib.wse_bytes_in_use(),
        "peak_bytes": lib.wse_peak_bytes(),
        "capacity": lib.wse_capacity(),
        "num_buffers": lib.wse_num_buffers(),
        "cached_bytes": lib.wse_cached_bytes(),
    }


def empty_cache() -> None:
    """Release freed device blocks kept for reuse back to the host (they are not counted as
    in use, but they are resident memory), as torch.cuda.empty_cache() does."""
    lib.wse_empty_cache()


def set_capacity(nbytes: int) -> None:
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"capacity must be >= 0, got {nbytes}")
    lib.wse_set_capacity(nbytes)


def reset_peak() -> None:
    lib.wse_reset_peak()


@functools.lru_cache(maxsize=None)
def prefix_source() -> str:
    """Text of csrc/wse_prefix.h as embedded at build time."""
    return ffi.string(lib.wse_prefix_source()).decode("utf-8")


@functools.lru_cache(maxsize=None)
def special_source() -> str:
    """Text of csrc/wse_special.h (template body inlined) as embedded at build time: pasted
    after the prefix only into translation units that call a `wsesp_` function."""
    return ffi.string(lib.wse_special_source()).decode("utf-8")


@functools.lru_cache(maxsize=None)
def hooks_source() -> str:
    """Text of csrc/wse_hooks.cpp as embedded at build time (built against torch by
    lazydev/compile/hooks.py)."""
    return ffi.string(lib.wse_hooks_source()).decode("utf-8")


def autocast_source() -> str:
    """Text of csrc/wse_autocast.cpp as embedded at build time (built against torch by
    lazydev/compile/hooks.py)."""
    return ffi.string(lib.wse_autocast_source()).decode("utf-8")


def load_torch_library(so_path: str) -> None:
    """Load a library of kernels registered with torch (its static initialisers register them);
    never unloaded, since torch's dispatcher keeps pointers into it. Raises OSError."""
    torch.ops.load_library(so_path)


_synchronize = []      # the device's wait (lazydev.wait), given to install_hooks


@ffi.def_extern()
def wse_py_synchronize(errbuf, errlen):
    """torch.accelerator.synchronize() and the like, from csrc/wse_hooks.cpp: the error of a
    failed program goes back as text, for the C++ side to raise (an exception cannot cross)."""
    try:
        _synchronize[0]()
        return 0
    except Exception as e:  # noqa: BLE001 - every failure is reported, none lost
        text = f"{type(e).__name__}: {e}".encode("utf-8", "replace")[:errlen - 1]
        ffi.memmove(errbuf, text + b"\0", len(text) + 1)
        return 1


def install_hooks(so_path: str, synchronize) -> bool:
    """Load the built C++ side of the device and give it to torch, with `synchronize()` to
    call for torch.accelerator.synchronize(): True when torch takes all of it, False when it
    had PrivateUse1 hooks or a device guard already. Raises OSError."""
    _synchronize[:] = [synchronize]
    err = ffi.new("char[]", _ERRBUF_LEN)
    rc = lib.wse_hooks_load(os.fsencode(so_path), lib.wse_py_synchronize, err, _ERRBUF_LEN)
    if rc < 0:
        raise OSError(ffi.string(err).decode("utf-8", "replace"))
    return rc == 0


def tensor_maker() -> int:
    """The address of the loaded C++ side's wse_make_tensor (Note [Native tensor objects] in
    csrc/wse_hooks.cpp), or 0 when it is not loaded."""
    return int(ffi.cast("uintptr_t", lib.wse_hooks_symbol(b"wse_make_tensor")))


def _check_env_capacity() -> None:
    # The C side falls back to 16 GiB on a malformed value; say so here.
    raw = os.environ.get("LAZYDEV_DEVICE_MEMORY")
    if not raw:
        return
    try:
        ok = int(raw) == lib.wse_capacity()
    except ValueError:
        ok = False
    if not ok:
        import warnings
        warnings.warn(f"LAZYDEV_DEVICE_MEMORY={raw!r} is not a byte count; "
                      f"using a capacity of {lib.wse_capacity()} bytes", RuntimeWarning)


_check_env_capacity()


class Program:
    """A compiled generated program (.so exporting `wse_entry`), unloaded when garbage: each
    Run of it holds it, so no thread can be in its code then."""

    def __init__(self, so_path: str):
        self.path = os.fspath(so_path)
        errbuf = ffi.new("char[]", _ERRBUF_LEN)
        handle = ffi.new("void**")
        entry = lib.wse_program_load(os.fsencode(self.path), errbuf, _ERRBUF_LEN, handle)
        if entry == ffi.NULL:
            msg = ffi.string(errbuf).decode("utf-8", "replace")
            raise RuntimeError(f"could not load wse program: {msg}")
        self._entry = entry
        self._handle = ffi.gc(handle[0], lib.wse_program_unload)

    def __repr__(self) -> str:
        return f"Program({self.path!r})"

    def run(self, buffers, scalars=()) -> None:
        """Run with the given Buffers (as bufs[i]) and scalars (as doubles).
        cffi releases the GIL for the duration of the C call."""
        self.start(buffers, scalars).resume()

    def start(self, buffers, scalars=()) -> "Run":
        """A run of this program, not started: `Run.resume` runs it."""
        return Run(self, buffers, scalars)


PAUSED = -1         # WSE_PAUSED (csrc/wse_prefix.h)


class Run:
    """One run of a program, which can stop between two kernel calls and go on later, on any
    thread (Note [Who runs a program] in runtime/queue.py). Holds its C arguments."""

    __slots__ = ("_program", "_entry", "_bufs", "_sc", "_err", "_next", "_stop", "_keep")

    def __init__(self, program: Program, buffers, scalars):
        self._keep = buffers
        ptrs = [b._live_ptr() for b in buffers]
        vals = [float(s) for s in scalars]
        self._program = program         # loaded while this run may start or resume
        self._entry = program._entry
        # Never pass NULL arrays: a program may read bufs[0] unconditionally.
        self._bufs = ffi.new("void*[]", ptrs or [ffi.NULL])
        self._sc = ffi.new("double[]", vals or [0.0])
        self._err = ffi.new("int64_t[4]")
        self._next = ffi.new("int32_t*", 0)
        # pause flag, long-call limit, sliced GEMM progress, call to stop before, budget for
        # long calls (wse_prefix.h), and the last wse_program_run's return code
        self._stop = ffi.new("int32_t[6]")
        # Never started counts as paused: a Ctrl-C as the first resume was entered, before it
        # set this, made interrupted() read 0 and take the run for finished (outputs unwritten)
        self._stop[5] = PAUSED

    def pause(self) -> None:
        """Ask the thread running it to stop before its next kernel call, or its GEMM's next
        slice (any thread)."""
        self._stop[0] = 1

    def position(self) -> tuple:
        """(the first kernel call not finished, blocks of that call's sliced GEMM computed
        when it paused there): how far the run is, read live while another thread runs it
        (Note [Sliced GEMM] in csrc/wse_kernels.c)."""
        return self._next[0], self._stop[2]

    def resume(self, unpause: bool = False, limit_us: int = 0, until: int = 0,
               budget_us: int = 0) -> bool:
        """Run on from where it stopped; True when finished, False when paused (a pause asked
        before this call counts, unless `unpause`). With `limit_us` it also pauses before a
        call whose last run took longer, unless twice that still ends within `budget_us` of
        this resume's start; with `until` before call `until`. Raises the program's error."""
        if unpause:
            self._stop[0] = 0
        self._stop[1] = limit_us
        self._stop[3] = until
        self._stop[4] = min(max(int(budget_us), 0), 2**31 - 1)
        self._stop[5] = PAUSED          # until the run returns (interrupted)
        if threading.get_ident() != TEAM_THREAD:
            lib.wse_serial_thread()
        rc = lib.wse_program_run(self._entry, self._bufs, self._sc, self._err, self._next,
                                 self._stop)
        return self._returned(rc)

    def _returned(self, rc: int) -> bool:
        if rc == PAUSED:
            return False
        # Never resumed after this: let the buffers go (the queue's ticket holds them until
        # it lets go, counted, ExecQueue.references). Its position stays, to say which
        # outputs it had written (Note [Early reads] in compile/passes.py).
        self._keep = None
        if rc != 0:
            raise _program_error(rc, self._err)
        return True

    def interrupted(self) -> bool:
        """What resume would have returned, after a KeyboardInterrupt took its place (a signal
        is raised once the C call returns, before its result is kept): True when the run
        finished, False when it paused or never started. Raises the program's error."""
        return self._returned(self._stop[5])


# Error code -> errinfo list -> the exception to raise, for codes defined by upper layers
# (WSE_ERR_LINALG: trace/lower_linalg.py).
ERROR_DECODERS: dict = {}
ERR_INDEX_DIM = 64      # csrc/wse_prefix.h WSE_ERR_INDEX_DIM: plus the axis an index is into


def _program_error(rc: int, err) -> Exception:
    decode = ERROR_DECODERS.get(rc)
    if decode is not None:
        return decode([err[i] for i in range(4)])
    if rc == 1:
        return IndexError(f"index {err[0]} is out of bounds for dimension with size {err[1]}")
    if ERR_INDEX_DIM <= rc < ERR_INDEX_DIM + 64:    # the CPU's messages, with the axis
        if err[1] == 0:
            return IndexError("index is out of bounds for dimension with size 0")
        return IndexError(f"index {err[0]} is out of bounds for dimension {rc - ERR_INDEX_DIM} "
                          f"with size {err[1]}")
    if rc == 2:
        return RuntimeError("ZeroDivisionError")     # the CPU's message, word for word
    if rc == 5:                 # WSE_ERR_NO_MEMORY: Note [Scratch failures] in csrc/wse_runtime.c
        return DeviceOutOfMemoryError(
            f"a wse kernel (convolution, sort or linear algebra) could not allocate "
            f"{_fmt_bytes(err[0])} of host memory for its scratch; nothing was changed. Free "
            "memory, or use smaller inputs (fewer or smaller images, shorter rows to sort, "
            "smaller matrices).")
    return RuntimeError(
        f"wse program failed with error code {rc} (errinfo={[err[i] for i in range(4)]})")
