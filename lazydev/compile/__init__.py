"""compile/: graph -> program. Cache lookup by key; on a miss canonicalise, schedule (fuse),
plan memory, generate C, build; then run on the device runtime."""
from __future__ import annotations

import os
import time

from .. import log, metrics
from ..runtime import Buffer, Program, prefix_source
from ..trace.ir import Node
from . import cache, passes
from .cexpr import CodegenUnsupported
from .program import Layout, generate

__all__ = ["run_graph", "upload", "download", "CodegenUnsupported", "Compiled"]


class Compiled:
    """A loaded program and its run-time binding."""

    def __init__(self, program: Program, layout: Layout, source: str):
        self.program, self.layout, self.source = program, layout, source
        self.arena = None

    def execute(self, inputs: list, scalars: list) -> list:
        lay = self.layout
        outs = [Buffer(nb) for nb in lay.out_nbytes]
        if self.arena is None or self.arena.nbytes < lay.arena_bytes:
            self.arena = Buffer(lay.arena_bytes)
        bufs = [inputs[s] for s in lay.input_slots] + outs + [self.arena]
        self.program.run(bufs, scalars)
        ins = bufs[:len(lay.input_slots)]
        return [outs[k] if kind == "new" else ins[k] for kind, k in lay.out_map]


_programs: dict = {}       # graph key -> Compiled
_by_structure: dict = {}   # structure hash (ops and dtypes, no shapes) -> last Layout
last_compiled: dict = {}   # for debugging: the last graph compiled (source, layout)


def compile_graph(outputs: list[Node]) -> tuple[Compiled, bool]:
    """Pipeline on a miss. Returns the compiled program and whether gcc ran."""
    outs = passes.canonicalise(outputs)        # fold movement, CSE
    order, realized = passes.schedule(outs)    # choose buffers; the rest fuses inline
    passes.check(order, "schedule")
    source, layout = generate(outs, order, realized, prefix_source())   # memory plan + C
    if os.environ.get("LAZYDEV_DUMP_C"):
        with open(os.environ["LAZYDEV_DUMP_C"], "a") as f:
            f.write(source + "\n/* ---- */\n")
    program, built = cache.load_or_build(source, Program)              # disk cache or gcc
    layout.structure = hash(tuple((n.op, n.dtype) for n in order))
    last_compiled.update(source=source, layout=layout, outputs=outs)
    return Compiled(program, layout, source), built


def run_graph(outputs: list[Node], inputs: list, scalars: list, info: dict) -> list:
    """Compute `outputs` (cached by graph key); returns one device buffer per output."""
    key = hash(tuple([n.key for n in outputs]))
    info["graph_key"] = f"{key & 0xFFFFFFFFFFFF:012x}"
    compiled = _programs.get(key)
    if compiled is None:
        metrics.count("cache_misses")
        t0 = time.perf_counter()
        compiled, built = compile_graph(outputs)
        dt = time.perf_counter() - t0
        metrics.add_time("compile", dt)
        metrics.count("compilations" if built else "disk_cache_hits")
        info.update(cache="miss" if built else "disk hit", compile_s=dt)
        info["changed"] = _changed_inputs(compiled.layout)
        _programs[key] = compiled
    else:
        metrics.count("cache_hits")
        info["cache"] = "hit"
    info["nodes"], info["kernels"] = compiled.layout.nodes, compiled.layout.kernels
    t0 = time.perf_counter()
    result = compiled.execute(inputs, scalars)
    info["execute_s"] = time.perf_counter() - t0
    metrics.add_time("execute", info["execute_s"])
    metrics.count("executions")
    info["layout"] = compiled.layout
    return result


def _changed_inputs(layout: Layout) -> list:
    """(slot, dtype, old shape, new shape) for the inputs that differ from the last program
    compiled for the same structure: why this graph recompiled."""
    prev = _by_structure.get(layout.structure)
    _by_structure[layout.structure] = layout
    if prev is None:
        return []
    old = {slot: (shape, dt) for slot, shape, dt in prev.input_specs}
    return [(slot, dt, old[slot][0], shape) for slot, shape, dt in layout.input_specs
            if slot in old and old[slot][0] != shape]


def upload(cpu_tensor) -> Buffer:
    t0 = time.perf_counter()
    buf = Buffer.from_tensor(cpu_tensor)
    metrics.add_time("transfer", time.perf_counter() - t0)
    metrics.count("bytes_to_device", buf.nbytes)
    return buf


def download(buf: Buffer, dtype, numel: int):
    t0 = time.perf_counter()
    t = buf.to_tensor(dtype, (numel,))
    metrics.add_time("transfer", time.perf_counter() - t0)
    metrics.count("bytes_to_host", buf.nbytes)
    return t


def clear_memory_cache() -> None:
    _programs.clear()
