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
So csrc/wse_hooks.cpp is compiled against torch's headers and libraries (2-5 s with g++ 12 on
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
import tempfile
import warnings

import torch

from ..config import config
from ..runtime import hooks_source, install_hooks
from . import build, cache

CXX = os.environ.get("CXX", "g++")


def _command(src: str, out: str) -> list[str]:
    root = os.path.dirname(os.path.abspath(torch.__file__))
    libdir = os.path.join(root, "lib")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [CXX, "-std=c++20", "-O1", "-fPIC", "-shared", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            "-I", os.path.join(root, "include"), src, "-o", out, "-L", libdir, "-lc10",
            "-ltorch_cpu", f"-Wl,-rpath,{libdir}"]


def _path() -> str:
    key = cache.digest([
        ("source", hooks_source()),
        ("torch_version", torch.__version__),
        ("compiler", build.compiler_identity(CXX)),
        ("command", " ".join(_command("<src>", "<out>"))),
    ])
    return os.path.join(config.cache_dir, "hooks", f"wse_hooks-{key[:32]}.so")


def _build(path: str) -> None:
    """Compile into `path`, which appears whole or not at all (two processes may race)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    work = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=".build-")
    try:
        src, out = os.path.join(work, "wse_hooks.cpp"), os.path.join(work, "out.so")
        with open(src, "w") as f:
            f.write(hooks_source())
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
        path = _path()
        if not _intact(path):
            _build(path)
        return install_hooks(path, synchronize)
    except (build.CompileError, OSError) as e:
        warnings.warn("lazydev: could not build the wse device's C++ side, so storage-level "
                      "calls such as torch.UntypedStorage(n, device='wse') crash the process, "
                      "and pin_memory(), torch.Generator(device='wse') and torch.accelerator's "
                      "synchronize and memory functions raise (install g++ and torch's headers "
                      f"to fix this): {e}", RuntimeWarning, stacklevel=2)
        return False
