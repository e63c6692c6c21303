"""`lazydev.debug.dump(dir)`: everything needed to rerun the last compiled graph without the
model's Python code: its IR as text, the generated C, the compile command, the input tensors,
and a repro script that compiles and runs it on the C runtime alone."""
from __future__ import annotations

import json
import os
import warnings

import torch

from .compile import build, last_compiled
from .trace.ir import Node, Op, toposort

_MLIR_DTYPE = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
               torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32", torch.int16: "i16",
               torch.int8: "i8", torch.uint8: "ui8", torch.bool: "i1"}


def _type(n: Node) -> str:
    dims = "x".join(str(d) for d in n.shape)
    dt = _MLIR_DTYPE.get(n.dtype, str(n.dtype))
    return f"tensor<{dims + 'x' if dims else ''}{dt}>"


def ir_text(outputs: list[Node]) -> str:
    """The graph in an MLIR-like text form: one SSA value per node, in execution order."""
    order = toposort(outputs)
    names = {}
    params = sorted({n.arg: n for n in order if n.op is Op.DATA}.items())
    lines = ["func.func @graph(" + ", ".join(f"%in{slot}: {_type(n)}" for slot, n in params)
             + ") {"]
    for n in order:
        if n.op is Op.DATA:
            names[id(n)] = f"%in{n.arg}"
            if n.shape != dict(params)[n.arg].shape:
                names[id(n)] = f"%v{len(names)}"
                lines.append(f"  {names[id(n)]} = wse.view %in{n.arg} : {_type(n)}")
            continue
        names[id(n)] = f"%v{len(names)}"
        operands = ", ".join(names[id(s)] for s in n.src)
        attr = f" {{arg = {n.arg!r}}}" if n.arg is not None else ""
        lines.append(f"  {names[id(n)]} = wse.{n.op.name.lower()} {operands}{attr} : {_type(n)}")
    lines.append("  return " + ", ".join(names[id(o)] for o in outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"


_REPRO = '''"""Rerun a dumped lazydev graph on the C runtime, with no model code:
    python repro.py        (compiles program.c, runs it on inputs.pt, writes outputs.pt)"""
import json, os, subprocess, torch
from lazydev.runtime import Buffer, Program
here = os.path.dirname(os.path.abspath(__file__))
meta = json.load(open(os.path.join(here, "layout.json")))
so = os.path.join(here, "program.so")
subprocess.run(meta["command"][:-4] + [os.path.join(here, "program.c"), "-o", so, "-lm"], check=True)
inputs = [Buffer.from_tensor(t) for t in torch.load(os.path.join(here, "inputs.pt"))]
outs = [Buffer(n) for n in meta["out_nbytes"]]
arena = Buffer(meta["arena_bytes"])
Program(so).run(inputs + outs + [arena], meta["scalars"])
torch.save([o.to_tensor(torch.uint8, (o.nbytes,)) for o in outs], os.path.join(here, "outputs.pt"))
print("ran", os.path.join(here, "program.c"), "->", len(outs), "outputs (raw bytes) in outputs.pt")
'''


def dump(directory: str) -> str:
    """Write the last compiled graph to `directory`; returns the directory."""
    from . import wait
    wait()
    if "units" not in last_compiled:
        raise RuntimeError("nothing has been compiled yet in this process: run a step first")
    os.makedirs(directory, exist_ok=True)
    lay = last_compiled["layout"]
    write = lambda name, text: open(os.path.join(directory, name), "w").write(text)  # noqa: E731
    write("graph.mlir", ir_text(last_compiled["outputs"]))
    # The translation units, one after another, are one valid C file (the prefix is guarded).
    write("program.c", "\n".join(last_compiled["units"]))
    command = build.command("program.c", "program.so")
    write("compile_command.txt", " ".join(command) + "\n")
    if "inputs" not in last_compiled:   # dropped when the device ran short of memory
        warnings.warn("lazydev.debug.dump: the last compiled graph's inputs were freed when the "
                      "device needed their memory; inputs.pt holds none", stacklevel=2)
    inputs = last_compiled.get("inputs", [])
    specs = {n.arg: n for n in toposort(last_compiled["outputs"]) if n.op is Op.DATA}
    tensors = [buf.to_tensor(specs[slot].dtype, (buf.nbytes // specs[slot].dtype.itemsize,))
               for slot, buf in zip(lay.input_slots, inputs)]
    torch.save(tensors, os.path.join(directory, "inputs.pt"))
    write("layout.json", json.dumps({"input_slots": lay.input_slots, "out_nbytes": lay.out_nbytes,
                                     "arena_bytes": lay.arena_bytes, "command": command,
                                     "scalars": last_compiled.get("scalars", [])}, indent=1))
    write("repro.py", _REPRO)
    return directory
