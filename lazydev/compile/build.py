"""The system C compiler: identity (for cache keys) and one build of a shared object."""
from __future__ import annotations

import atexit
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile

from ..runtime.device import cpu_fields

CC = os.environ.get("CC", "gcc")
# -D__FAST_MATH__ only makes glibc declare its vector math (libmvec: exp, sin, tanh... on 8
# floats at once, ~1 ulp) so loops calling them vectorise: 13x on an exp/sin/tanh chain here.
# The compiler's own -ffast-math is not used: NaN, infinity and evaluation order stay IEEE.
# -ffp-contract=off: GNU C otherwise fuses a*b+c into an fma (rounding once, not twice), even
# through a float->double->float round trip, so the C would not round as the IR says.
# -fno-trapping-math: without it gcc may not evaluate a floating-point operation that the C
# evaluates only on one arm of a select (it could raise a flag the C never raises), so it keeps
# the branch. With AVX-512 it still vectorises such a loop, with masked lanes; with AVX2 only it
# cannot, and wse_erff's loop (every GELU) ran scalar: the LayerNorm+GELU+softmax program took
# 19.2 ms on an AVX2 EPYC, 4.8 ms with the flag. lazydev never reads the FP exception flags.
# -fno-tree-pre: partial redundancy elimination moved a load used by one arm of a select
# (`i == label[o] ? -scale[0] : 0`, cross-entropy's backward) into a branch, and the branch kept
# gcc 12 from vectorising the loop: that kernel took 580 us for 1024 x 256, 128 without PRE. The
# loop-invariant motion pass still hoists invariant loads; the step programs of the benchmarks
# ran as fast or faster without PRE (transformer 110 -> 108 ms, others within noise).
FLAGS = ("-O2", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno",
         "-fno-trapping-math", "-ffp-contract=off", "-D__FAST_MATH__", "-fvect-cost-model=dynamic",
         "-fno-tree-pre", "-std=gnu11", "-w")


class CompileError(RuntimeError):
    pass


def scratch_dir() -> str:
    """A directory for this process only (an unusable cache directory, a library replaced at a
    path already opened), removed at exit: each process left one in /tmp. What was loaded
    from it stays mapped."""
    path = tempfile.mkdtemp(prefix="lazydev-")
    atexit.register(shutil.rmtree, path, True)
    return path


def words(cc: str) -> list:
    """A compiler command's words: CC (CXX) may hold a launcher or flags ("ccache gcc")."""
    return shlex.split(cc)


@functools.lru_cache(maxsize=None)
def compiler_identity(cc: str = CC) -> str:
    """Compiler path, version line and binary identity: part of every cache key. The version
    is asked once per compiler binary and remembered next to the cache (starting gcc costs
    milliseconds that a warm start should not pay)."""
    argv = words(cc)
    path = shutil.which(argv[0]) if argv else None
    if path is None:
        raise CompileError(f"the compiler {cc!r} was not found; install gcc (g++ for C++) or "
                           "set CC (CXX)")
    st = os.stat(os.path.realpath(path))
    stamp = f"{os.path.realpath(path)}|{st.st_size}|{int(st.st_mtime)}|{' '.join(argv[1:])}"
    memo = os.path.join(tempfile.gettempdir(), "lazydev-cc-" + hashlib.sha256(
        stamp.encode()).hexdigest()[:16])
    try:
        with open(memo) as f:
            return f.read()
    except OSError:
        pass
    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"the compiler {cc!r} is not usable ({e}); install gcc (g++ for "
                           "C++) or set CC (CXX)") from e
    ident = f"{stamp}|{out.stdout.splitlines()[0]}"
    with open(memo, "w") as f:
        f.write(ident)
    return ident


@functools.lru_cache(maxsize=None)
def cpu_features() -> str:
    """What -march=native can use here: the model name and flags of this CPU."""
    fields = cpu_fields()
    if not fields:
        return platform.machine()
    picked = [fields.get(k, "") for k in ("vendor_id", "model name", "flags")]
    return platform.machine() + "|" + "|".join(picked)


def command(src: str, out: str) -> list[str]:
    return [*words(CC), *FLAGS, src, "-o", out, "-lm"]


def build(units: list, out_path: str) -> None:
    """Compile the translation units (in parallel, one gcc each) into the shared object
    `out_path`, which appears whole or not at all."""
    directory = os.path.dirname(out_path)
    os.makedirs(directory, exist_ok=True)
    work = tempfile.mkdtemp(dir=directory, prefix=".build-")
    try:
        if len(units) == 1:
            _run([_write(work, "u0.c", units[0])], out_path, work)
            return
        objs, procs = [], []
        for i, text in enumerate(units):
            src = _write(work, f"u{i}.c", text)
            obj = os.path.join(work, f"u{i}.o")
            cmd = [*words(CC), *[f for f in FLAGS if f != "-shared"], "-c", src, "-o", obj]
            procs.append((subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True), cmd))
            objs.append(obj)
        for proc, cmd in procs:
            _, err = proc.communicate()     # closes the pipe (else a ResourceWarning each unit)
            check(proc.returncode, err, cmd)
        _run(objs, out_path, work)
    finally:
        if not os.environ.get("LAZYDEV_KEEP_C"):
            shutil.rmtree(work, ignore_errors=True)


def _write(work: str, name: str, text: str) -> str:
    path = os.path.join(work, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _run(inputs: list, out_path: str, work: str) -> None:
    tmp_so = os.path.join(work, "out.so")
    cmd = [*words(CC), *FLAGS, *inputs, "-o", tmp_so, "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    check(proc.returncode, proc.stderr, cmd)
    os.replace(tmp_so, out_path)       # atomic: readers see the old file or the whole new one


def check(returncode: int, stderr: str, cmd: list) -> None:
    if returncode != 0:
        raise CompileError(f"compilation failed ({' '.join(cmd)}):\n{stderr[-4000:]}")
