"""The system C compiler: identity (for cache keys) and one build of a shared object."""
from __future__ import annotations

import functools
import os
import subprocess
import tempfile

CC = os.environ.get("CC", "gcc")
FLAGS = ("-O2", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno",
         "-std=gnu11", "-w")


class CompileError(RuntimeError):
    pass


@functools.lru_cache(maxsize=None)
def compiler_identity() -> str:
    """Compiler path and version line: part of every cache key."""
    try:
        out = subprocess.run([CC, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"the C compiler {CC!r} is not usable ({e}); install gcc or set CC") from e
    return f"{CC}|{out.stdout.splitlines()[0]}"


@functools.lru_cache(maxsize=None)
def cpu_features() -> str:
    """What -march=native means here: the code is only valid on CPUs with these features."""
    try:
        out = subprocess.run([CC, "-march=native", "-Q", "--help=target"], capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    enabled = [ln.split()[0] for ln in out.splitlines() if "[enabled]" in ln]
    march = [ln.split()[-1] for ln in out.splitlines() if ln.strip().startswith("-march=")]
    return ",".join(march[:1] + enabled)


def command(src: str, out: str) -> list[str]:
    return [CC, *FLAGS, src, "-o", out, "-lm"]


def build(source: str, out_path: str) -> None:
    """Compile `source` into the shared object `out_path` (written atomically)."""
    directory = os.path.dirname(out_path)
    os.makedirs(directory, exist_ok=True)
    fd, c_path = tempfile.mkstemp(suffix=".c", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_so = c_path[:-2] + ".so"
    try:
        proc = subprocess.run(command(c_path, tmp_so), capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"C compilation failed ({' '.join(command(c_path, tmp_so))}):\n"
                               f"{proc.stderr[-4000:]}")
        os.replace(tmp_so, out_path)       # atomic: readers see the old file or the whole new one
    finally:
        for p in (c_path, tmp_so):
            if os.path.exists(p) and not os.environ.get("LAZYDEV_KEEP_C"):
                os.unlink(p)
