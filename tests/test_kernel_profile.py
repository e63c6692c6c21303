"""benchmarks/kernel_profile.py rewrites generated programs: its timers must see every kernel call
and change no result (and it must notice when the generated entry point changes shape)."""
import importlib.util
import json
import pathlib

import pytest
import torch
from cffi import FFI

import lazydev
from lazydev.runtime import Program

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _profiler():
    spec = importlib.util.spec_from_file_location("kernel_profile",
                                                  ROOT / "benchmarks" / "kernel_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dumped(tmp_path, rows: int):
    """relu(x @ w).sum(0) for x of `rows` x 32 run on wse and its program dumped in tmp_path:
    (y on wse, y on the CPU, the dump's layout, its program source). The dump holds the inputs
    of the run that compiled the graph, so each test uses its own `rows`."""
    x, w = torch.randn(rows, 32), torch.randn(32, 16)
    y = torch.relu(x.to("wse") @ w.to("wse")).sum(0)
    lazydev.mark_step()
    lazydev.debug.dump(str(tmp_path))
    layout = json.loads((tmp_path / "layout.json").read_text())
    return y, torch.relu(x @ w).sum(0), layout, (tmp_path / "program.c").read_text()


def test_the_kernel_profiler_times_every_call_and_changes_no_result(tmp_path):
    kp = _profiler()
    y, expected, layout, src = _dumped(tmp_path, 64)
    torch.testing.assert_close(y.cpu(), expected)
    ids, heads, flops = kp.calls_of(src)
    assert len(ids) >= 2 and sum(flops.values()) == 2 * 64 * 32 * 16
    assert any(h.startswith("MATMUL float32[64, 16]") for h in heads.values())
    (tmp_path / "timed.c").write_text(kp.instrument(src, len(ids)))
    timed = kp.build(str(tmp_path), layout["command"], "timed")
    bufs = kp.bind(str(tmp_path), layout)
    program = Program(timed)    # kept: its timers go with the library when it is unloaded
    program.run(bufs, layout["scalars"])
    out = bufs[len(layout["input_slots"])].to_tensor(torch.float32, (16,))
    assert torch.equal(out, y.cpu())        # the same C code on the same inputs: bit for bit
    ffi = FFI()
    ffi.cdef(f"extern double wse_prof[{len(ids)}];")
    timers = ffi.dlopen(timed).wse_prof
    assert all(timers[c] > 0 for c in range(len(ids)))


def test_again_times_each_gemm_call_a_second_time_and_changes_no_result(tmp_path):
    """--again: a GEMM call runs twice, the second run timed apart; a product that overwrites its
    output (beta 0) gives the same bits the second time, so the program's result is unchanged."""
    kp = _profiler()
    y, _, layout, src = _dumped(tmp_path, 48)
    ids, _, flops = kp.calls_of(src)
    again = {c for c, k in enumerate(ids) if flops[k]}
    assert len(again) == 1 and len(ids) > 1
    (tmp_path / "timed.c").write_text(kp.instrument(src, len(ids), again))
    outs, programs = [], []     # kept: the timers go with the library when it is unloaded
    for name in ("program", "timed"):
        bufs = kp.bind(str(tmp_path), layout)
        programs.append(Program(kp.build(str(tmp_path), layout["command"], name)))
        programs[-1].run(bufs, layout["scalars"])
        outs.append(bufs[len(layout["input_slots"])].to_tensor(torch.float32, (16,)))
    assert torch.equal(outs[1], outs[0]) and outs[0].shape == y.shape
    timed = str(tmp_path / "timed.so")
    ffi = FFI()
    ffi.cdef(f"extern double wse_again[{len(ids)}];")
    seconds = ffi.dlopen(timed).wse_again
    assert [seconds[c] > 0 for c in range(len(ids))] == [c in again for c in range(len(ids))]


def test_the_kernel_profiler_refuses_an_entry_point_it_does_not_know():
    with pytest.raises(SystemExit, match="entry point changed shape"):
        _profiler().instrument("int wse_entry(void) { return 0; }", 1)
