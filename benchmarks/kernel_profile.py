"""Where a workload's step program spends its time: every kernel call timed inside the program.

Runs a few steps of a benchmark workload on wse, dumps the step's program (lazydev.debug.dump),
rebuilds it with a clock around each kernel call in `wse_entry`, runs it on the dumped inputs and
prints per-call times, the GEMMs' share and their GFLOP/s. With --thread it also runs the
uninstrumented program on a second thread while the main thread sleeps or runs Python: what a
program queued behind a tracing host gets (Note [Who runs a program] in runtime/queue.py). With
--again it also runs every GEMM call a second time at once and times that too: the same product
with its operands in the caches, so the difference is what the step's data flow costs the GEMMs
(inputs made by earlier kernels, evicted since), apart from the library's own rate.

    python benchmarks/kernel_profile.py --workload mlp [--reps 20] [--top 15] [--thread] [--again]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from cffi import FFI  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import lazydev  # noqa: E402
from lazydev.runtime import Buffer, Program  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

CALL = "    int rc = kernel_fns[call_kernel[c]](lib, P, S, errinfo);"
ENTRY = "int wse_entry("
GEMM = re.compile(r"lib->gemm_(?:f32|f64|bf16)(?:_sliced)?\((\d+), \d, \d, (\d+), (\d+), (\d+),")
KERNEL = re.compile(r"/\* (.*?) \*/\nWSE_KERNEL int k(\d+)\(")
HEAD = re.compile(r"Node\((\w+), (\w+\[[^\]]*\])[^)]*\)( and \d+ more)?")


def dump_step(workload: str, steps: int, directory: str) -> None:
    step = WORKLOADS[workload]("wse", lambda m: m)
    for i in range(steps):
        out = step(i)
        lazydev.mark_step()
        out.reshape(-1)[:1].item()
    lazydev.debug.dump(directory)


def instrument(src: str, n_calls: int, again=()) -> str:
    """The program with wse_prof[c] += the seconds call c took (summed over runs), and for each
    call in `again`, run once more at once, wse_again[c] += the seconds the second run took.
    (Only for timing: a second run of a call that reads what it writes changes the values.)"""
    if src.count(CALL) != 1 or src.count(ENTRY) != 1:
        raise SystemExit("the generated entry point changed shape: update CALL in this script")
    n = max(n_calls, 1)
    rerun_flags = ", ".join("1" if c in again else "0" for c in range(n))
    timer = ("#include <time.h>\n"
             f"double wse_prof[{n}];\ndouble wse_again[{n}];\n"
             f"static const char wse_rerun[{n}] = {{{rerun_flags}}};\n"
             "static double wse_now(void) { struct timespec t; "
             "clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }\n")
    src = src.replace(ENTRY, timer + ENTRY)
    rerun = ("\n    if (!rc && wse_rerun[c]) {\n      t0_ = wse_now();\n  " + CALL +
             "\n      wse_again[c] += wse_now() - t0_;\n    }") if again else ""
    return src.replace(CALL, "    double t0_ = wse_now();\n" + CALL +
                       "\n    wse_prof[c] += wse_now() - t0_;" + rerun)


def build(directory: str, command: list, name: str) -> str:
    """Compile `name`.c as lazydev built the program (its command ends `program.c -o
    program.so -lm`, as lazydev.debug's repro.py also assumes)."""
    so = os.path.join(directory, name + ".so")
    subprocess.run(command[:-4] + [os.path.join(directory, name + ".c"), "-o", so, "-lm"],
                   check=True)
    return so


def bind(directory: str, layout: dict) -> list:
    inputs = [Buffer.from_tensor(t) for t in torch.load(os.path.join(directory, "inputs.pt"))]
    outs = [Buffer(n) for n in layout["out_nbytes"]]
    return inputs + outs + [Buffer(max(layout["arena_bytes"], 1))]


def timed_runs(program: Program, bufs: list, scalars: list, reps: int) -> list:
    for _ in range(3):
        program.run(bufs, scalars)
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        program.run(bufs, scalars)
        walls.append(time.perf_counter() - t0)
    return walls


def calls_of(src: str) -> tuple[list, dict, dict]:
    """Kernel id per call, a kernel's header comment, and a kernel's GEMM FLOPs per call."""
    ids = [int(x) for x in re.search(r"call_kernel\[\] = \{([^}]*)\}", src).group(1).split(",")]
    heads, flops = {}, {}
    for m in KERNEL.finditer(src):
        kid = int(m.group(2))
        h = HEAD.match(m.group(1))
        heads[kid] = f"{h.group(1)} {h.group(2)}{h.group(3) or ''}" if h else m.group(1)
        body = src[m.end():src.find("\n}\n", m.end())]
        flops[kid] = sum(2 * int(b) * int(mm) * int(n) * int(k)
                         for b, mm, n, k in GEMM.findall(body))
    return ids, heads, flops


def report(console, calls: tuple, per_call: list, walls: list, top: int) -> None:
    """`calls`: calls_of(program source)."""
    ids, heads, flops = calls
    total = sum(per_call)
    table = Table(title=f"kernel calls (top {top} of {len(ids)})")
    for col in ("call", "kernel", "µs", "share", "GFLOP/s", "node"):
        table.add_column(col, justify="left" if col == "node" else "right")
    for t, c in sorted(((t, c) for c, t in enumerate(per_call)), reverse=True)[:top]:
        k = ids[c]
        rate = f"{flops[k] / t / 1e9:.0f}" if flops[k] and t else ""
        table.add_row(str(c), f"k{k}", f"{t * 1e6:.1f}", f"{t / total:.0%}", rate,
                      heads.get(k, ""))
    console.print(table)
    console.print(by_op(ids, heads, per_call))
    gemm_t = sum(t for c, t in enumerate(per_call) if flops[ids[c]])
    gemm_f = sum(flops[ids[c]] for c in range(len(ids)))
    console.print(f"program wall: median {statistics.median(walls) * 1e3:.2f} ms, min "
                  f"{min(walls) * 1e3:.2f} ms; kernel calls {total * 1e3:.2f} ms, of which GEMMs "
                  f"{gemm_t * 1e3:.2f} ms for {gemm_f / 1e9:.2f} GFLOP"
                  + (f" ({gemm_f / gemm_t / 1e9:.0f} GFLOP/s)" if gemm_t else ""))


def report_again(console, calls: tuple, per_call: list, hot: list, again: set) -> None:
    """The GEMM calls' time in the program against their time run again at once (--again)."""
    ids, _, flops = calls
    gemm_f = sum(flops[ids[c]] for c in again)
    first, second = sum(per_call[c] for c in again), sum(hot[c] for c in again)
    console.print(f"GEMM calls in the program {first * 1e3:.2f} ms "
                  f"({gemm_f / first / 1e9:.0f} GFLOP/s); each run again at once, its operands "
                  f"in the caches, {second * 1e3:.2f} ms ({gemm_f / second / 1e9:.0f} GFLOP/s); "
                  "the program wall above includes the second runs")


def by_op(ids: list, heads: dict, per_call: list) -> Table:
    """Time per op of the kernels' nodes (MATMUL, SUM, ...), summed over calls."""
    total, count = {}, {}
    for c, t in enumerate(per_call):
        op = heads.get(ids[c], "?").split(" ")[0]
        total[op] = total.get(op, 0.0) + t
        count[op] = count.get(op, 0) + 1
    table = Table(title="time per op")
    for col in ("op", "calls", "ms", "share"):
        table.add_column(col, justify="left" if col == "op" else "right")
    whole = sum(per_call) or 1.0
    for op, t in sorted(total.items(), key=lambda kv: -kv[1]):
        table.add_row(op, str(count[op]), f"{t * 1e3:.2f}", f"{t / whole:.0%}")
    return table


def on_thread(program: Program, bufs: list, scalars: list, reps: int, busy: bool) -> list:
    """Run times of the program on a second thread while this one sleeps or runs Python."""
    walls: list = []
    worker = threading.Thread(target=lambda: walls.extend(
        timed_runs(program, bufs, scalars, reps)))
    worker.start()
    x = 0
    while worker.is_alive():
        if busy:
            for i in range(1000):
                x += i
        else:
            time.sleep(0.001)
    worker.join()
    return walls


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="mlp", choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=4, help="steps run before the dump")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--thread", action="store_true",
                   help="also time the program on a second thread (main thread idle / busy)")
    p.add_argument("--again", action="store_true",
                   help="also time every GEMM call run a second time at once (operands hot)")
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    console = Console()
    directory = tempfile.mkdtemp(prefix=f"lazydev-profile-{a.workload}-")
    dump_step(a.workload, a.steps, directory)
    layout = json.load(open(os.path.join(directory, "layout.json")))
    src = open(os.path.join(directory, "program.c")).read()
    calls = calls_of(src)
    n_calls = len(calls[0])
    again = {c for c, k in enumerate(calls[0]) if calls[2][k]} if a.again else set()
    open(os.path.join(directory, "timed.c"), "w").write(instrument(src, n_calls, again))
    timed = build(directory, layout["command"], "timed")
    bufs, scalars = bind(directory, layout), layout["scalars"]
    program = Program(timed)
    program.run(bufs, scalars)          # the first run pays page faults and cold caches
    prof = FFI()
    prof.cdef(f"extern double wse_prof[{max(n_calls, 1)}];\n"
              f"extern double wse_again[{max(n_calls, 1)}];")
    lib = prof.dlopen(timed)
    for c in range(n_calls):
        lib.wse_prof[c] = lib.wse_again[c] = 0.0
    walls = timed_runs(program, bufs, scalars, a.reps)
    per_call = [lib.wse_prof[c] / (a.reps + 3) for c in range(n_calls)]   # 3 warm-up runs
    console.print(f"[bold]{a.workload}[/]: step program in {directory}")
    report(console, calls, per_call, walls, a.top)
    if again:
        report_again(console, calls, per_call, [lib.wse_again[c] / (a.reps + 3)
                                                for c in range(n_calls)], again)
    if a.thread:
        plain = Program(build(directory, layout["command"], "program"))     # no timers
        for where, runs in (("main thread", timed_runs(plain, bufs, scalars, a.reps)),
                            ("second thread, main idle", on_thread(plain, bufs, scalars, a.reps,
                                                                   False)),
                            ("second thread, main running Python",
                             on_thread(plain, bufs, scalars, a.reps, True))):
            console.print(f"uninstrumented program on the {where}: median "
                          f"{statistics.median(runs) * 1e3:.2f} ms, min {min(runs) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
