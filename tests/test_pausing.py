"""Programs that stop and go on: a run paused between kernel calls or inside a sliced GEMM
(Note [Sliced GEMM] in csrc/wse_kernels.c), its limits and budget, and the bits of a step
whoever runs it (Note [Fixed tiles])."""

import threading

import pytest
import torch

import lazydev
from conftest import assert_same, build_program, padded_operand
from lazydev.runtime import Buffer


def _generated(cdir, name, kernels, calls, n_kernels, sliced=()):
    """Hand-written kernels behind the entry compile/program.py generates for `calls`."""
    from lazydev.compile.program import _entry
    # Generated programs build with -w; gcc -Wall doubts the entry's argument table P.
    body = ('#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"\n'
            '#define WSE_KERNEL __attribute__((visibility("hidden")))\n' + kernels
            + _entry(1, calls, n_kernels, sliced))
    return build_program(cdir, name, body)


def test_a_generated_program_pauses_between_kernel_calls_and_resumes_there(cdir):
    """The entry compile/program.py generates stops before the next call once asked, and a
    later resume (from any thread) runs on from there, not from the start."""
    from lazydev.compile.kernels import KERNEL_ARGS
    kernel = ("WSE_KERNEL int k0(" + KERNEL_ARGS + ") {\n  float* x = (float*)P[0];\n"
              "  x[0] = x[0] * 2.0f + 1.0f;\n  return 0;\n}\n")
    calls = [(0, [0], []), (0, [0], []), (0, [0], [])]           # x -> ((2x+1)*2+1)*2+1
    prog = _generated(cdir, "pausable", kernel, calls, 1)
    x = Buffer.from_tensor(torch.tensor([1.0]))
    run = prog.start([x, Buffer(64)], [])
    run.pause()
    assert run.resume() is False and x.to_tensor(torch.float32, (1,)).item() == 1.0
    assert run.resume() is False                       # still paused: nothing ran
    assert run.resume(unpause=True) is True
    assert x.to_tensor(torch.float32, (1,)).item() == 15.0
    assert run.resume() is True                        # finished: nothing runs twice
    assert x.to_tensor(torch.float32, (1,)).item() == 15.0


def _long_call_program(cdir, name, sliced=()):
    """x -> (x + 1) * 10 + 1 in three calls, the middle one 3 ms long; `sliced`: the kernels
    flagged as able to pause inside themselves (program._entry)."""
    from lazydev.compile.kernels import KERNEL_ARGS
    kernels = ("WSE_KERNEL int k0(" + KERNEL_ARGS + ") {\n  float* x = (float*)P[0];\n"
               "  x[0] += 1.0f;\n  return 0;\n}\n"
               "WSE_KERNEL int k1(" + KERNEL_ARGS + ") {\n  float* x = (float*)P[0];\n"
               "  const int64_t t0 = wse_clock_ns();\n"
               "  while (wse_clock_ns() - t0 < 3000000) {}\n  x[0] *= 10.0f;\n  return 0;\n}\n")
    calls = [(0, [0], []), (1, [0], []), (0, [0], [])]
    return _generated(cdir, name, kernels, calls, 2, sliced)


def test_a_run_stops_before_the_call_it_is_told_to_and_goes_on_from_there(cdir):
    """stop[3] (csrc/wse_prefix.h): `until` pauses before that call; the position says how
    many calls ran; a later resume runs the rest."""
    prog = _long_call_program(cdir, "until")
    x = Buffer.from_tensor(torch.tensor([0.0]))
    run = prog.start([x, Buffer(64)], [])
    assert run.resume(until=2) is False and run.position() == (2, 0)
    assert x.to_tensor(torch.float32, (1,)).item() == 10.0
    assert run.resume() is True and run.position() == (3, 0)
    assert x.to_tensor(torch.float32, (1,)).item() == 11.0


def test_a_run_interrupted_before_it_started_is_not_taken_for_finished(cdir):
    """A Ctrl-C as the first resume was entered (before it marked the run as going) made
    interrupted() read the zeroed return code: the run counted as finished, outputs unwritten."""
    prog = _long_call_program(cdir, "never")
    x = Buffer.from_tensor(torch.tensor([0.0]))
    run = prog.start([x, Buffer(64)], [])
    assert run.interrupted() is False and run.position() == (0, 0)
    assert run.resume() is True and x.to_tensor(torch.float32, (1,)).item() == 11.0


def test_a_worker_limit_stops_before_a_call_whose_last_run_was_long(cdir):
    """stop[1] (csrc/wse_prefix.h): a run with a limit pauses before any call whose last run
    took longer, and one without runs on from there."""
    prog = _long_call_program(cdir, "limited")
    x = Buffer.from_tensor(torch.tensor([0.0]))
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # no times yet: 11
    run = prog.start([x, Buffer(64)], [])
    assert run.resume(limit_us=500) is False                          # stops before the 3 ms
    assert x.to_tensor(torch.float32, (1,)).item() == 12.0
    assert run.resume(limit_us=10**6) is True                         # under this limit
    assert x.to_tensor(torch.float32, (1,)).item() == 121.0


def test_a_long_call_that_fits_in_the_budget_starts_under_the_limit(cdir):
    """stop[4] (WSE_IN_BUDGET, csrc/wse_prefix.h): a run with a limit starts a long call if
    twice its last run ends within the budget (Note [Worker's budget]), and stops before it
    if not."""
    prog = _long_call_program(cdir, "budget")
    x = Buffer.from_tensor(torch.tensor([0.0]))
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # 3 ms: 11
    run = prog.start([x, Buffer(64)], [])
    assert run.resume(limit_us=500, budget_us=5000) is False          # 2 x 3 ms > 5 ms
    assert x.to_tensor(torch.float32, (1,)).item() == 12.0
    assert run.resume(limit_us=500, budget_us=10**6) is True          # 6 ms fit in 1 s
    assert x.to_tensor(torch.float32, (1,)).item() == 121.0


def test_a_sliced_kernel_starts_under_the_limit_however_long_its_last_run(cdir):
    """Note [Sliced GEMM]: a kernel that can pause inside itself is started by a run with a
    limit even after a long run, where any other kernel would be left for the host."""
    prog = _long_call_program(cdir, "sliced_limit", sliced={1})
    x = Buffer.from_tensor(torch.tensor([0.0]))
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # 11
    assert prog.start([x, Buffer(64)], []).resume(limit_us=500) is True   # the 3 ms call too
    assert x.to_tensor(torch.float32, (1,)).item() == 121.0


SLICED_GEMM_C = r"""
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  (void)errinfo; (void)stop;
  if (*next) return 0;
  int64_t b = s[1], ta = s[2], tb = s[3], M = s[4], N = s[5], K = s[6];
  int64_t lda = s[8], sa = s[9], ldb = s[10], sb = s[11], ldc = s[13], sc = s[14];
  int rc = s[0] == 32
      ? lib->gemm_f32_sliced(b, ta, tb, M, N, K, (float)s[7], bufs[0], lda, sa, bufs[1], ldb,
                             sb, (float)s[12], bufs[2], ldc, sc, (int64_t)s[15], NULL)
      : lib->gemm_f64_sliced(b, ta, tb, M, N, K, s[7], bufs[0], lda, sa, bufs[1], ldb, sb,
                             s[12], bufs[2], ldc, sc, (int64_t)s[15], NULL);
  if (rc) return rc;
  *next = 1;
  return 0;
}
"""


@pytest.mark.parametrize("dtype,batch,ta,tb,M,N,K,pad", [
    (torch.float32, 1, 0, 0, 512, 256, 512, 0),     # taller than wide: tiles of rows
    (torch.float32, 1, 1, 1, 128, 1024, 512, 3),    # wider than tall: tiles of columns
    (torch.float64, 1, 1, 0, 96, 4096, 256, 1),
    (torch.float32, 6, 0, 1, 256, 256, 256, 2),     # a batch: whole products
])
def test_a_sliced_gemm_pauses_between_tiles_and_its_bits_follow_no_thread(
        cdir, dtype, batch, ta, tb, M, N, K, pad):
    """Note [Sliced GEMM], Note [Fixed tiles]: under a long-call limit a paused run computes
    whole tiles and stops with the tiles done in its position; a run without a limit computes
    the rest at once. The product is bit-identical whoever runs it: the host's team unpaused,
    one thread (the queue's worker) unpaused, or the worker paused and the host finishing."""
    prog = build_program(cdir, "sliced_gemm", SLICED_GEMM_C)
    a_store, a = padded_operand(batch, K if ta else M, M if ta else K, pad, dtype)
    b_store, bm = padded_operand(batch, N if tb else K, K if tb else N, pad, dtype)
    c_store, _ = padded_operand(batch, M, N, pad, dtype)
    c_store.fill_(float("nan"))
    args = [32 if dtype == torch.float32 else 64, batch, ta, tb, M, N, K, 1.0,
            a_store.shape[-1], a_store[0].numel(), b_store.shape[-1], b_store[0].numel(), 0.0,
            c_store.shape[-1], c_store[0].numel(), 0]

    def start():
        bufs = [Buffer.from_tensor(x) for x in (a_store, b_store, c_store)]
        return prog.start(bufs, args), bufs[2]

    def on_thread(fn):
        out = []
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start()
        t.join()
        return out[0]

    def product(c):
        return c.to_tensor(dtype, c_store.shape)[..., :N]
    host, c_host = start()
    assert host.resume() is True
    serial, c_serial = start()
    assert on_thread(serial.resume) is True
    paused, c_paused = start()
    paused.pause()
    assert on_thread(lambda: paused.resume(limit_us=10**6)) is False
    calls, tiles = paused.position()
    assert calls == 0 and tiles > 0
    assert paused.resume(unpause=True) is True and paused.position() == (1, 0)
    want = product(c_host)
    assert torch.equal(product(c_serial), want) and torch.equal(product(c_paused), want)
    opa = a.double().transpose(-1, -2) if ta else a.double()
    opb = bm.double().transpose(-1, -2) if tb else bm.double()
    torch.testing.assert_close(want.double(), opa @ opb, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("share,per_thread", [(None, 4), (2, 2), (1, 1), (1000, 4)])
def test_a_paused_worker_stops_after_one_tile_of_as_many_as_the_program_allows(
        cdir, share, per_thread):
    """Note [Tiles for the worker] (csrc/wse_kernels.c): a large product is cut into four
    tiles per thread of the host's team, so a host asking the worker to pause waits for an
    eighth of it on two threads, not half: the paused run has written one tile of columns.
    Note [Program-sized tiles]: a program that lets a tile hold 1/`share` of a thread's part
    of the product gets `share` tiles per thread, never more than four."""
    prog = build_program(cdir, "sliced_gemm_quarters", SLICED_GEMM_C)
    M, N, K = 128, 1024, 2048
    team = torch.get_num_threads()
    max_tile = 0 if share is None else M * N * K // (team * share)
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = torch.full((M, N), float("nan"))
    bufs = [Buffer.from_tensor(x) for x in (a, b, c)]
    run = prog.start(bufs, [32, 1, 0, 0, M, N, K, 1.0, K, 0, N, 0, 0.0, N, 0, max_tile])
    run.pause()
    done = []
    t = threading.Thread(target=lambda: done.append(run.resume(limit_us=10**6)))
    t.start()
    t.join()
    tiles = per_thread * team if team > 1 else 1
    written = ~bufs[2].to_tensor(torch.float32, (M, N)).isnan()
    assert done == [tiles == 1] and run.position() == ((1, 0) if tiles == 1 else (0, 1))
    assert written.sum().item() == M * N // tiles and written[:, :N // tiles].all()
    assert run.resume(unpause=True) is True
    torch.testing.assert_close(bufs[2].to_tensor(torch.float32, (M, N)), a @ b,
                               rtol=1e-4, atol=1e-3)


def _bits_whoever_runs(monkeypatch, step, inputs):
    """`step(*inputs)` on wse twice, the host taking the step's program, then the queue's
    one-thread worker running it before anyone asks; both results, on the CPU."""
    from lazydev.runtime import queue as Q
    dev = [x.detach().to("wse").requires_grad_(x.requires_grad) for x in inputs]
    lazydev.mark_step()
    got = []
    for grace in (60.0, 0.0):                   # the host takes the step; the worker runs it
        monkeypatch.setattr(Q, "HOST_GRACE", grace)
        out = step(*dev)
        lazydev.mark_step()
        if grace == 0.0:
            assert Q.EXEC._last.done.wait(30)   # finished before anyone asked for it
        got.append([o.cpu() for o in out])
    return got


def _sum_step(x):
    return [(x * 1.0001).sum()]


def _conv_step(x, w):
    w.grad = None
    y = torch.nn.functional.conv2d(x, w, padding=1)
    y.square().sum().backward()
    return [y, w.grad]


def _gemm_step(a, b):
    return [a @ b]


@pytest.mark.parametrize("step,shapes,dtype", [
    (_sum_step, [(1 << 20,)], torch.float64),           # float32 sums accumulate in double
    (_conv_step, [(8, 64, 14, 14), (32, 64, 3, 3)], torch.float32),   # im2col + GEMM path
    (_gemm_step, [(128, 784), (784, 1024)], torch.float32),    # two tiles on two threads
    (_gemm_step, [(128, 784), (784, 1024)], torch.bfloat16),   # Note [BF16 GEMM]
])
def test_a_step_has_the_same_bits_whoever_runs_it(monkeypatch, step, shapes, dtype):
    """Note [Fixed sums] (compile/kernels.py), Note [Fixed tiles] (csrc/wse_kernels.c): how a
    sum, a conv's weight gradient and a GEMM split their work follows the host's team, not
    the thread running the step, so the host and the queue's worker agree to the bit."""
    g = torch.Generator().manual_seed(3)
    # Scaled so that sums of hundreds of products stay near 1, where the CPU's own rounding
    # is well inside the tolerance table.
    inputs = [torch.randn(s, generator=g, dtype=dtype) / 16 for s in shapes]
    if step is _conv_step:
        inputs[1].requires_grad_()
    host, worker = _bits_whoever_runs(monkeypatch, step, inputs)
    for h, w in zip(host, worker):
        assert torch.equal(h, w)
    cpu = step(*[x.detach().requires_grad_(x.requires_grad) for x in inputs])
    for h, c in zip(host, cpu):
        assert_same(h, c.detach())
