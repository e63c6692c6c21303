"""The device's C++ side: built against the installed torch at first import, then installed.

Note [The device's C++ side]
Some of what torch asks of a device it asks in C++, and a device registered from Python alone
(torch.utils.backend_registration) cannot answer:
* A storage torch makes itself is allocated through the allocator registered for its device
  type (`c10::GetAllocator`). There was none, and torch dereferenced the null pointer:
  `torch.UntypedStorage(8, device="wse")` or `wse_tensor.untyped_storage().clone()` killed the
  process with SIGSEGV. Ours refuses any non-empty allocation with a message that says what to
  do instead (lazydev's own tensors never allocate through it).
* The PrivateUse1 hooks. torch pins host memory for the current accelerator, wse once lazydev
  is imported, and the Python hooks raise NotImplementedError for a pinned-memory allocator:
  `DataLoader(..., pin_memory=True)` and `t.pin_memory()` failed even for CPU-only code. Ours
  count all host memory as pinned (the device is host memory). `torch.Generator(device="wse")`
  raised the same way; ours hands out the CPU's generators, which wse's random ops draw from.
* The device-generic API, torch.accelerator: `synchronize()` raised (the Python device guard
  cannot synchronize) and the memory functions (`memory_allocated`, `max_memory_allocated`,
  `reset_peak_memory_stats`, `empty_cache`, `get_memory_info`) failed an internal assert (the
  allocator was not a DeviceAllocator). Ours wait for the runtime's queue through a callback
  into Python (lazydev.wait, whose error comes back as a RuntimeError with its text) and report
  the runtime's accounting: allocated is the bytes of live device buffers, reserved adds the
  freed blocks kept for reuse.
It also makes the wse tensor objects, faster than torch.Tensor._make_wrapper_subclass from
Python can (Note [Native tensor objects] in csrc/wse_hooks.cpp).
So csrc/wse_hooks.cpp is compiled against torch's headers and libraries (3-7 s with g++ 12 on
this 2-core VM), kept in the cache directory under a key of its source, torch's version, the
compiler and the command, beside its checksum (dlopen of a copy cut short dies of SIGBUS; a
bad one is built again), and loaded by every later import in milliseconds. It is installed
before the Python side registers the device, whose own hooks and guard then stand aside. It is
not built at install time: that would put torch in pip's isolated build environment, a 760 MB
install for every `pip install`.

Without a C++ compiler or torch's headers lazydev still works, with the behaviour above as it
was; the import warns once so that a crash in a storage call is not a mystery.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
import warnings

import torch

from .. import log
from ..config import config
from ..runtime import autocast_source, hooks_source, install_hooks, load_torch_library
# The loaded side's wse_make_tensor, for lazydev/__init__.py (Note [Native tensor objects]).
from ..runtime import tensor_maker  # noqa: F401
from . import build, cache

CXX = os.environ.get("CXX", "g++")


def _command(src: str, out: str) -> list[str]:
    root = os.path.dirname(os.path.abspath(torch.__file__))
    libdir = os.path.join(root, "lib")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    # Python's headers and torch's Python library: wse_make_tensor makes Python tensor objects
    # (Note [Native tensor objects] in csrc/wse_hooks.cpp).
    return [*build.words(CXX), "-std=c++20", "-O1", "-fPIC", "-shared",
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I", os.path.join(root, "include"),
            "-I", sysconfig.get_paths()["include"], src,
            "-o", out, "-L", libdir, "-lc10", "-ltorch_cpu", "-ltorch_python",
            f"-Wl,-rpath,{libdir}"]


# The libraries built here: name -> the text of its source.
_SOURCES = {"wse_hooks": hooks_source, "wse_autocast": autocast_source}
_autocast_loaded: list = []     # [the dtypes autocast casts to] once decided, for this process


def _path(name: str) -> str:
    key = cache.digest([
        ("source", _SOURCES[name]()),
        ("torch_version", torch.__version__),
        ("compiler", build.compiler_identity(CXX)),
        ("command", " ".join(_command("<src>", "<out>"))),
    ])
    return os.path.join(config.cache_dir, "hooks", f"{name}-{key[:32]}.so")


def _built(name: str, announce: str = "") -> str:
    """The path of library `name`, built first (saying `announce` in the compile-cache log)
    unless the cache holds it whole."""
    path = _path(name)
    if not _intact(path):
        if announce:
            log.emit("cache", announce)
        try:
            _build(name, path)
        except OSError:     # an unusable cache directory (Note [An unusable cache directory]
            # in compile/cache.py): built for this process only; a missing g++ fails again
            path = os.path.join(build.scratch_dir(), os.path.basename(path))
            _build(name, path)
    return path


def _build(name: str, path: str) -> None:
    """Compile into `path`, which appears whole or not at all (two processes may race)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    work = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=".build-")
    try:
        src, out = os.path.join(work, f"{name}.cpp"), os.path.join(work, "out.so")
        with open(src, "w") as f:
            f.write(_SOURCES[name]())
        cmd = _command(src, out)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        build.check(proc.returncode, proc.stderr, cmd)
        # The checksum first: a reader that finds the new file with the old sum builds again.
        cache.write_atomic(path + ".sha256", cache.file_sha(out).encode())
        os.replace(out, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _intact(path: str) -> bool:
    """The library is there and whole: dlopen of a file cut short (a full disk, a copy
    interrupted) kills the process with SIGBUS instead of failing."""
    try:
        with open(path + ".sha256") as f:
            return f.read() == cache.file_sha(path)
    except OSError:
        return False


def install(synchronize) -> bool:
    """Give torch the wse allocator, device guard and hooks (building them on the first
    import); `synchronize()` waits for the device's queued work. True when torch took all of
    them."""
    try:
        return install_hooks(_built("wse_hooks"), synchronize)
    except (build.CompileError, OSError) as e:
        _autocast_loaded.append([])     # not tried again (Note [Autocast on wse])
        warnings.warn("lazydev: could not build the wse device's C++ side, so storage-level "
                      "calls such as torch.UntypedStorage(n, device='wse') crash the process, "
                      "pin_memory(), torch.Generator(device='wse') and torch.accelerator's "
                      "synchronize and memory functions raise, and torch.autocast('wse') stays "
                      f"off (install g++ and torch's headers to fix this): {e}", RuntimeWarning,
                      stacklevel=2)
        return False


# Note [Autocast on wse]
# torch.autocast("wse", dtype=...) casts by the kernels registered for AutocastPrivateUse1, and
# PyTorch registers none for it: autocast warned "the target dtype is not supported" and ran
# the block in float32. csrc/wse_autocast.cpp registers PyTorch's own policies, CUDA's op
# lists, which autocast_mode.h shares with other backends: matmuls and convolutions in the
# lower precision, softmax, norms and losses in float32, mixed inputs promoted; casts of
# float32 weights are cached for the block, as on CUDA. (The CPU's lists differ: a model
# autocast on wse computes what it would compute autocast on a GPU.) wse's kernels take
# float16 and bfloat16 alike. Built at the first torch.autocast("wse"), not at import: its
# ATen headers take 15-25 s to compile on this 2-core VM, against 5-7 s for the device's
# hooks, and most programs never autocast (torch.autocast asks even with enabled=False, so
# such a block builds it too, once per cache directory). Without a C++ compiler autocast
# stays off, with PyTorch's warning when a block asks for it; the import's warning says so,
# and it is not tried again.


def autocast_dtypes() -> list:
    """The dtypes torch.autocast("wse") casts to: float16 and bfloat16 once the policies are
    loaded (built on the first call, Note [Autocast on wse]), none if they cannot be."""
    if not _autocast_loaded:
        _autocast_loaded.append(_load_autocast())
    return _autocast_loaded[0]


def _load_autocast() -> list:
    try:
        load_torch_library(_built("wse_autocast", "building torch.autocast's policies for "
                                  "wse, once per cache directory (15-25 s)"))
    except (build.CompileError, OSError) as e:
        warnings.warn("lazydev: could not build torch.autocast's policies for wse, so autocast "
                      "stays off and the block runs in float32 (install g++ and torch's "
                      f"headers to fix this): {e}", RuntimeWarning, stacklevel=3)
        return []
    return [torch.float16, torch.bfloat16]
