"""OpInfo coverage: run PyTorch's OpInfo samples on wse and on the CPU and compare.

    python -m lazydev.coverage [--ops a,b] [--samples N | --full] [--no-backward] [--json PATH]

For every OpInfo entry (torch.testing._internal op_db) that supports float32 on the CPU, each
sample input is run on the CPU and, moved with `.to("wse")`, on wse (tensors the sample keeps on
the CPU for any device, such as tensor_split's indices, stay there); outputs are compared (shape,
dtype, values with the tolerance table; integers and bools exactly, NaN equal to NaN), in-place
variants by their mutated input, and, for entries with supports_autograd, the gradients of the
sum of the float outputs with respect to the float inputs. An entry is

    native    every sample passed and nothing ran through the CPU fallback,
    fallback  every sample passed, but some aten ops ran on the CPU (listed),
    fail      some sample differs or raises (the first reason is kept),
    skip      the entry cannot be compared at all (SKIPS: the reason is printed).

The engine (`check_op`) is shared by tests/test_opinfo.py and the CLI. The CLI runs entries in
worker processes (`--jobs`), so a crash or a hang in one entry is reported as that entry's
failure instead of ending the run.
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import signal
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

# Per-dtype (atol, rtol), the same table as tests/conftest.py; other dtypes compare exactly.
# Per-dtype (atol, rtol) against CPU eager; integers and bools exact. Shared with tests/.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1.3e-6 * 10),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
}
DEFAULT_SAMPLES = 3
DEFAULT_TIMEOUT = 120.0     # seconds per entry

# Entries that cannot be compared at all, with the reason (printed by pytest and the report).
# Keep this short: an entry that merely fails belongs in the report as a failure, not here.
SKIPS: dict = {}

# Entries that still fail, with what is known about why. They stay "fail" in the report; the
# test marks them xfail with this reason (and the failure found) so CI shows them, not hides them.
KNOWN_FAILURES: dict = {}

# Entries whose output values are unspecified (uninitialised memory): only the shape and dtype
# of their outputs are compared.
UNSPECIFIED_VALUES = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
})


@dataclass
class Result:
    op: str                         # entry id: name, or name.variant
    status: str = "native"          # native | fallback | fail | skip
    reason: str = ""
    fallbacks: dict = field(default_factory=dict)
    samples: int = 0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status in ("native", "fallback")


class Mismatch(AssertionError):
    """wse and CPU disagree on one compared value."""


class OpTimeout(Exception):
    pass


# ---- the entries ------------------------------------------------------------------------------

def entry_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def entries() -> list:
    """The OpInfo entries that support float32 on the CPU, in op_db order."""
    from torch.testing._internal.common_methods_invocations import op_db
    return [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]


def select(ops, names):
    """Entries whose id or name is in `names` (None: all)."""
    if not names:
        return list(ops)
    wanted = set(names)
    return [op for op in ops if entry_id(op) in wanted or op.name in wanted]


# ---- moving and comparing values --------------------------------------------------------------

def _map(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _fresh(t: torch.Tensor, device: str, grad: bool) -> torch.Tensor:
    """A new leaf copy of `t` on `device`; it requires grad when `t` does and `grad`."""
    out = t.detach().to(device) if device != "cpu" else t.detach().clone()
    if grad and t.requires_grad:
        out.requires_grad_(True)
    return out


def _sample_args(sample, device: str, grad: bool):
    """The sample's input, args and kwargs as fresh copies on `device`, except the tensors the
    sample function keeps on the CPU whatever the device (see _mark_host_tensors)."""
    host = getattr(sample, "host_tensors", frozenset())
    seen = itertools.count()

    def fn(t):
        return _fresh(t, "cpu" if next(seen) in host else device, grad)
    return _map(sample.input, fn), _map(list(sample.args), fn), _map(dict(sample.kwargs), fn)


def _mark_host_tensors(op, samples: list, requires_grad: bool) -> None:
    """Find the tensors a sample function makes on the CPU whatever device it is asked for
    (tensor_split's indices, which PyTorch requires on the CPU, with CUDA too): it is asked for
    the same samples on the meta device, and tensors still on the CPU there stay on the CPU."""
    torch.manual_seed(0)
    try:
        twins = list(itertools.islice(
            op.sample_inputs("meta", torch.float32, requires_grad=requires_grad), len(samples)))
    except Exception:           # noqa: BLE001 - no meta samples: every tensor moves
        return
    for i, (sample, twin) in enumerate(zip(samples, twins)):
        devices = _devices(twin)
        host = frozenset(i for i, d in enumerate(devices) if d == "cpu")
        if host and len(devices) == len(_devices(sample)):
            samples[i] = _host_sample(sample, host)


@functools.cache
def _host_sample_class():
    from torch.testing._internal.opinfo.core import SampleInput

    class HostSample(SampleInput):
        """A sample that knows which of its tensors stay on the CPU (SampleInput has slots)."""
        __slots__ = ("host_tensors",)
    return HostSample


def _host_sample(sample, host: frozenset):
    """A copy of `sample` that knows which of its tensors stay on the CPU."""
    out = _host_sample_class()(sample.input, args=sample.args, kwargs=sample.kwargs,
                     output_process_fn_grad=sample.output_process_fn_grad,
                     broadcasts_input=sample.broadcasts_input, name=sample.name)
    out.host_tensors = host
    return out


def _devices(sample) -> list:
    """The device type of each tensor of a sample, in the order _sample_args visits them."""
    out = []
    for part in (sample.input, list(sample.args), dict(sample.kwargs)):
        _map(part, lambda t: out.append(t.device.type))
    return out


def _leaves(x) -> list:
    """The values of a (possibly nested) result, in order."""
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _leaves(item)]
    return [x]


def _tensors(x) -> list:
    return [t for t in _leaves(x) if isinstance(t, torch.Tensor)]


def compare(actual, expected, what: str, values: bool = True) -> None:
    """Raise Mismatch unless the wse result `actual` matches the CPU result `expected`."""
    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    if len(a_leaves) != len(e_leaves):
        raise Mismatch(f"{what}: {len(a_leaves)} results on wse, {len(e_leaves)} on CPU")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        where = what if len(e_leaves) == 1 else f"{what}[{i}]"
        if isinstance(e, torch.Tensor):
            _compare_tensor(a, e, where, values)
        elif isinstance(e, float) and isinstance(a, float):
            if not (a == e or (math.isnan(a) and math.isnan(e)) or abs(a - e) <= 1e-5 * (1 + abs(e))):
                raise Mismatch(f"{where}: {a} on wse, {e} on CPU")
        elif a != e and e is not None:
            raise Mismatch(f"{where}: {a!r} on wse, {e!r} on CPU")


def _compare_tensor(a, e: torch.Tensor, where: str, values: bool) -> None:
    if not isinstance(a, torch.Tensor):
        raise Mismatch(f"{where}: {type(a).__name__} on wse, a tensor on CPU")
    if tuple(a.shape) != tuple(e.shape):
        raise Mismatch(f"{where}: shape {list(a.shape)} on wse, {list(e.shape)} on CPU")
    if a.dtype != e.dtype:
        raise Mismatch(f"{where}: dtype {a.dtype} on wse, {e.dtype} on CPU")
    if a.layout != e.layout:
        raise Mismatch(f"{where}: layout {a.layout} on wse, {e.layout} on CPU")
    if not values:
        return
    a = a.detach().cpu()
    e = e.detach()
    atol, rtol = TOLERANCES.get(e.dtype, (0, 0))
    try:
        torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True,
                                   check_device=False, check_stride=False)
    except AssertionError as err:
        raise Mismatch(f"{where}: {_first_line(err)}") from None


def _first_line(err) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    detail = [ln for ln in lines if ln.startswith(("Greatest absolute", "Mismatched elements"))]
    return "; ".join(detail or lines[:1])[:300]


# ---- one sample -------------------------------------------------------------------------------

def _call(fn, inp, args, kwargs, seed: int):
    torch.manual_seed(seed)      # random ops draw from the CPU generator on both devices
    return fn(inp, *args, **kwargs)


def _grad_inputs(inp, args, kwargs) -> list:
    return [t for t in _tensors([inp, args, list(kwargs.values())])
            if t.requires_grad and t.is_leaf]


def _grads(out, sample, inputs):
    """Gradients of the sum of the float outputs (after the sample's output_process_fn_grad)."""
    outs = [t for t in _tensors(sample.output_process_fn_grad(out))
            if t.requires_grad and t.dtype.is_floating_point]
    if not outs or not inputs:
        return None
    total = sum(t.sum() for t in outs)
    return torch.autograd.grad(total, inputs, allow_unused=True)


def check_sample(op, sample, backward: bool, seed: int = 0) -> list:
    """Compare one sample on wse with the CPU; raises Mismatch (or the wse error). Returns notes
    (what was not compared, and why)."""
    notes = []
    values = op.name not in UNSPECIFIED_VALUES
    inp, args, kwargs = _sample_args(sample, "cpu", backward)
    try:
        expected = _call(op.op, inp, args, kwargs, seed)
    except Exception as e:
        return [f"CPU raises {type(e).__name__}: {_first_line(e)[:80]}"]
    if values and _is_random(op, sample, expected, seed):
        values = False
        notes.append("random values: shapes and dtypes compared")
    w_inp, w_args, w_kwargs = _sample_args(sample, "wse", backward)
    actual = _call(op.op, w_inp, w_args, w_kwargs, seed)
    notes += _compare_judged(actual, expected, "output", values, _output64(op.op, sample, seed))
    if backward and values:
        notes += _check_backward(op.op, sample, seed, (inp, args, kwargs), expected,
                                 (w_inp, w_args, w_kwargs), actual)
    if op.inplace_variant is not None and isinstance(sample.input, torch.Tensor):
        notes += _check_inplace(op, sample, seed, values)
    return notes


# Note [Float64 arbiter]
# The CPU's float32 result is itself rounded: where a sum's terms are hundreds of times larger
# than the sum (addbmm's samples, values up to 9, cancel to near zero), it is off from the exact
# value by more than the table's atol, and a wse result summed in another order (or in double)
# can be closer to the exact value and still fail the table. Such a mismatch is judged by the op
# run in float64 on the CPU: wse passes if, element by element, it is no further from the
# float64 result than the CPU's float32 result is, plus the table's tolerance. A wrong value is
# far beyond rounding and still fails; structure, shapes and dtypes are compared as before, and
# where the float32 results are not finite (NaN, an overflow) wse must equal the CPU.
# Gradients are judged the same way, by the gradients of the op run in float64: conv3d's weight
# gradient (values up to 193) is 1.5e-4 from float64 on the CPU and 1.6e-5 on wse.
def _compare_judged(actual, expected, what: str, values: bool, reference) -> list:
    """compare(), with a float32 mismatch judged by `reference()`, the same values computed in
    float64 (None when there are none); returns notes."""
    try:
        compare(actual, expected, what, values)
    except Mismatch:
        if not values:
            raise
        compare(actual, expected, what, values=False)   # structure, shapes, dtypes: as they are
        if not _float64_agrees(actual, expected, reference):
            raise
        return [f"{what} judged against float64 (Note [Float64 arbiter])"]
    return []


def _float64_agrees(actual, expected, reference) -> bool:
    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    if not any(isinstance(e, torch.Tensor) and e.dtype is torch.float32 for e in e_leaves):
        return False
    try:
        r_leaves = _leaves(reference())
    except Exception:           # noqa: BLE001 - no float64 result: the mismatch stands
        return False
    if len(r_leaves) != len(e_leaves):
        return False
    for a, e, r in zip(a_leaves, e_leaves, r_leaves):
        if isinstance(e, torch.Tensor) and not _no_worse(a, e, r):
            return False
    return True


def _widened(sample, grad: bool):
    """The sample's arguments on the CPU with float32 tensors in float64 (new leaves, which
    require grad where the sample's do and `grad`)."""
    def widen(t):
        if t.dtype is not torch.float32:
            return t
        return t.detach().double().requires_grad_(grad and t.requires_grad)
    return [_map(part, widen) for part in _sample_args(sample, "cpu", grad)]


def _output64(fn, sample, seed: int):
    """`reference` for an op's outputs: `fn` on the widened sample."""
    def reference():
        with torch.no_grad():
            return _call(fn, *_widened(sample, False), seed)
    return reference


def _no_worse(a, e: torch.Tensor, r) -> bool:
    """wse's `a` is as close to the float64 result `r` as the CPU's `e` (within the table).
    compare() has checked shapes and dtypes. Where `e` or `r` in float32 is not finite (NaN, an
    overflow float64 does not have), the float64 result says nothing: `a` must equal `e`."""
    if not isinstance(r, torch.Tensor) or e.dtype is not torch.float32 or r.shape != e.shape:
        try:
            _compare_tensor(a, e, "", True)         # no float64 judgement: the table, as before
        except Mismatch:
            return False
        return True
    a, e = a.detach().cpu(), e.detach()
    atol, rtol = TOLERANCES[torch.float32]
    a, e, r = a.double(), e.double(), r.detach().double()
    odd = ~(e.isfinite() & r.float().isfinite())
    same = (a == e) | (a.isnan() & e.isnan())
    if not bool(same[odd].all()):
        return False
    a, e, r = a[~odd], e[~odd], r[~odd]
    return bool(((a - r).abs() <= (e - r).abs() + atol + rtol * r.abs()).all())


def _is_random(op, sample, expected, seed: int) -> bool:
    """Whether the sample's values depend on the random seed (attention's dropout_p > 0, ...):
    wse draws from the CPU generator, but not always in the CPU kernel's order. (F.dropout and
    multi_head_attention_forward's dropout draw the CPU's masks: composites.native_dropout.)"""
    if sample.kwargs.get("dropout_p", 0):
        return True
    inp, args, kwargs = _sample_args(sample, "cpu", False)
    try:
        again = _call(op.op, inp, args, kwargs, seed + 1)
        compare(again, expected, "reseeded")
    except Exception:           # noqa: BLE001 - any difference means the values are random
        return True
    return False


def _check_backward(fn, sample, seed: int, cpu_in, expected, wse_in, actual) -> list:
    inputs = _grad_inputs(*cpu_in)
    try:
        g_cpu = _grads(expected, sample, inputs)
    except Exception as e:
        return [f"CPU backward raises {type(e).__name__}"]
    if g_cpu is None:
        return []
    g_wse = _grads(actual, sample, _grad_inputs(*wse_in))
    if g_wse is None:
        raise Mismatch("backward: no wse output requires grad")

    def reference():            # the gradients in float64
        wide = _widened(sample, True)
        return list(_grads(_call(fn, *wide, seed), sample, _grad_inputs(*wide)))
    return _compare_judged(list(g_wse), list(g_cpu), "grad", True, reference)


def _check_inplace(op, sample, seed: int, values: bool) -> list:
    inp, args, kwargs = _sample_args(sample, "cpu", False)
    try:
        expected = _call(op.inplace_variant, inp, args, kwargs, seed)
    except Exception as e:
        return [f"CPU in-place raises {type(e).__name__}"]
    w_inp, w_args, w_kwargs = _sample_args(sample, "wse", False)
    actual = _call(op.inplace_variant, w_inp, w_args, w_kwargs, seed)
    reference = _output64(op.inplace_variant, sample, seed)
    notes = _compare_judged(actual, expected, "in-place result", values, reference)
    # An in-place op returns its input, so the float64 result also judges the input.
    return notes + _compare_judged(w_inp, inp, "in-place input", values, reference)


# ---- one entry --------------------------------------------------------------------------------

@contextmanager
def time_limit(seconds: float):
    """Raise OpTimeout after `seconds` (main thread only; elsewhere no limit)."""
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise OpTimeout(f"took longer than {seconds:.0f} s")
    try:
        old = signal.signal(signal.SIGALRM, on_alarm)
    except ValueError:              # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def samples_of(op, n: int | None, requires_grad: bool) -> list:
    """The first `n` sample inputs of `op` (all with n=None), generated deterministically."""
    torch.manual_seed(0)
    it = op.sample_inputs("cpu", torch.float32, requires_grad=requires_grad)
    samples = list(it) if n is None else list(itertools.islice(it, n))
    _mark_host_tensors(op, samples, requires_grad)
    return samples


def check_op(op, samples: int | None = DEFAULT_SAMPLES, backward: bool = True,
             timeout: float = DEFAULT_TIMEOUT) -> Result:
    """Run `op`'s samples on wse and CPU; never raises (a failure is a Result)."""
    import lazydev
    res = Result(entry_id(op))
    if res.op in SKIPS:
        res.status, res.reason = "skip", SKIPS[res.op]
        return res
    backward = backward and op.supports_autograd
    t0 = time.perf_counter()
    _settle()
    lazydev.metrics.reset()
    try:
        with time_limit(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")     # performance hints are noise here
            res.reason = _run_samples(op, samples, backward, res)
            lazydev.mark_step()
    except Exception as e:      # noqa: BLE001 - every failure is reported, none ends the run
        res.status, res.reason = "fail", _describe(e, res.samples)
    res.fallbacks = dict(lazydev.metrics.counters()["fallbacks"])
    if res.status == "native" and res.fallbacks:
        res.status = "fallback"
    if res.status == "fail" and res.op in KNOWN_FAILURES:
        res.reason = f"known: {KNOWN_FAILURES[res.op]} ({res.reason})"
    if res.passed and res.fallbacks and not res.reason:
        res.reason = "CPU fallback: " + ", ".join(sorted(res.fallbacks))
    res.seconds = time.perf_counter() - t0
    _settle()
    return res


def _run_samples(op, n, backward: bool, res: Result) -> str:
    notes, compared = [], 0
    for sample in samples_of(op, n, backward):
        sample_notes = check_sample(op, sample, backward)
        compared += not any(note.startswith("CPU raises") for note in sample_notes)
        notes += sample_notes
        res.samples += 1
    if compared == 0:
        # Nothing could be compared: the CPU itself cannot run these samples.
        res.status = "skip"
        return "not comparable: " + ("; ".join(sorted(set(notes))) or "no samples")
    return "; ".join(sorted(set(notes)))


def _settle() -> None:
    """Run or drop whatever an earlier entry left pending, so entries do not affect each other."""
    import lazydev
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lazydev.mark_step()
    except Exception:           # noqa: BLE001 - the pending work belonged to a failed entry
        pass


def _describe(e: BaseException, done: int) -> str:
    msg = str(e).strip().splitlines()
    text = msg[0] if msg else ""
    if isinstance(e, Mismatch):
        return f"sample {done}: {text}"[:400]
    return f"sample {done}: {type(e).__name__}: {text}"[:400]


# ---- running many entries ---------------------------------------------------------------------

def run_inline(ops, samples, backward, timeout, progress=None) -> list:
    out = []
    for op in ops:
        out.append(check_op(op, samples, backward, timeout))
        if progress:
            progress(out[-1])
    return out


def _worker(conn, samples, backward, timeout) -> None:
    """Worker process: receives entry ids, sends back Result dicts."""
    import lazydev  # noqa: F401  (registers the device)
    by_id = {entry_id(op): op for op in entries()}
    conn.send("ready")
    while True:
        name = conn.recv()
        if name is None:
            return
        conn.send(asdict(check_op(by_id[name], samples, backward, timeout)))


class _Pool:
    """Worker processes (spawned: the parent's OpenMP threads do not survive a fork). A worker
    that dies or hangs is replaced, and its entry is reported as failed."""

    def __init__(self, jobs, samples, backward, timeout):
        import multiprocessing as mp
        self.ctx = mp.get_context("spawn")
        self.cfg = (samples, backward, timeout)
        self.hang = (timeout or DEFAULT_TIMEOUT) * 2 + 60
        self.workers = [self._start() for _ in range(jobs)]

    def _start(self):
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, *self.cfg), daemon=True)
        p.start()
        child.close()
        if parent.recv() != "ready":
            raise RuntimeError("coverage worker failed to start")
        return {"proc": p, "conn": parent, "job": None, "since": 0.0}

    def run(self, names, progress=None) -> list:
        from multiprocessing.connection import wait
        todo, results = list(names), {}
        while todo or any(w["job"] for w in self.workers):
            for w in self.workers:
                if w["job"] is None and todo:
                    w["job"], w["since"] = todo.pop(0), time.monotonic()
                    w["conn"].send(w["job"])
            busy = {w["conn"]: w for w in self.workers if w["job"]}
            for conn in wait(list(busy), timeout=5):
                self._collect(busy[conn], results, progress)
            for w in self.workers:
                if w["job"] and time.monotonic() - w["since"] > self.hang:
                    self._replace(w, results, f"hung for more than {self.hang:.0f} s", progress)
        self.close()
        return [results[n] for n in names]

    def _collect(self, w, results, progress) -> None:
        try:
            res = Result(**w["conn"].recv())
        except (EOFError, OSError):
            w["proc"].join(5)
            code = w["proc"].exitcode
            return self._replace(w, results, f"the process crashed (exit code {code})", progress)
        results[w["job"]] = res
        w["job"] = None
        if progress:
            progress(res)

    def _replace(self, w, results, why, progress) -> None:
        res = Result(w["job"], status="fail", reason=why)
        results[w["job"]] = res
        if progress:
            progress(res)
        if w["proc"].is_alive():
            w["proc"].kill()
        w["proc"].join(5)
        w.update(self._start())

    def close(self) -> None:
        for w in self.workers:
            try:
                w["conn"].send(None)
            except (OSError, BrokenPipeError):
                pass
            w["proc"].join(5)
            if w["proc"].is_alive():
                w["proc"].kill()


# ---- the report -------------------------------------------------------------------------------

def summary(results) -> dict:
    n = len(results)
    counts = {s: sum(r.status == s for r in results) for s in ("native", "fallback", "fail", "skip")}

    def share(k):
        return round(100.0 * k / n, 1) if n else 0.0
    fb: dict = {}
    for r in results:
        for name, c in r.fallbacks.items():
            fb[name] = fb.get(name, 0) + 1
    return {
        "entries": n, **counts,
        "pass_pct": share(counts["native"] + counts["fallback"]),
        "native_pct": share(counts["native"]), "fallback_pct": share(counts["fallback"]),
        "fail_pct": share(counts["fail"]), "skip_pct": share(counts["skip"]),
        "top_fallbacks": dict(sorted(fb.items(), key=lambda kv: -kv[1])[:30]),
    }


_STYLE = {"native": "green", "fallback": "yellow", "fail": "bold red", "skip": "magenta"}


def print_report(results, console, show_all: bool = False) -> None:
    from rich.table import Table
    table = Table(title="OpInfo float32 coverage on wse")
    for col, kw in (("op", {}), ("result", {}), ("samples", {"justify": "right"}),
                    ("reason", {"overflow": "fold"})):
        table.add_column(col, **kw)
    for r in results:
        if show_all or r.status != "native":
            table.add_row(r.op, f"[{_STYLE[r.status]}]{r.status}[/]", str(r.samples), r.reason)
    console.print(table)
    s = summary(results)
    console.print(
        f"[bold]{s['entries']} entries[/]: pass {s['pass_pct']}% "
        f"([green]native {s['native']} = {s['native_pct']}%[/], "
        f"[yellow]via CPU fallback {s['fallback']} = {s['fallback_pct']}%[/]), "
        f"[red]fail {s['fail']}[/], [magenta]skipped {s['skip']}[/]")


def _number(kind, low, inclusive: bool = True):
    """An argparse type: a `kind` number at least (or above) `low`."""
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or v != v or v < low or (v == low and not inclusive):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an int' if kind is int else 'a number'} "
                f"{'of at least' if inclusive else 'above'} {low}")
        return v
    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", help="comma-separated entry ids or op names (default: all)")
    p.add_argument("--samples", type=_number(int, 1), default=DEFAULT_SAMPLES,
                   help=f"samples per entry (default {DEFAULT_SAMPLES})")
    p.add_argument("--full", action="store_true", help="every sample of every entry")
    p.add_argument("--no-backward", action="store_true", help="forward only")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON ('-': stdout)")
    p.add_argument("--jobs", type=_number(int, 0), default=min(4, os.cpu_count() or 1),
                   help="worker processes (0: run in this process)")
    p.add_argument("--timeout", type=_number(float, 0, inclusive=False), default=DEFAULT_TIMEOUT,
                   help="seconds per entry")
    p.add_argument("--all", action="store_true", help="list native entries in the table too")


def run(args) -> int:
    from rich.console import Console
    console = Console(stderr=args.json == "-")
    import lazydev  # noqa: F401
    names = [n for n in args.ops.split(",") if n] if args.ops else None
    ops = select(entries(), names)
    problem = _bad_arguments(args, names, ops)
    if problem:
        console.print(f"[red]{problem}[/]")
        return 2
    samples = None if args.full else args.samples
    backward = not args.no_backward
    done = [0]

    def progress(r):
        done[0] += 1
        console.print(f"[dim]{done[0]}/{len(ops)}[/] {r.op}: [{_STYLE[r.status]}]{r.status}[/]"
                      f" {r.reason[:120]}", highlight=False)
    if args.jobs and len(ops) > 1:
        pool = _Pool(min(args.jobs, len(ops)), samples, backward, args.timeout)
        results = pool.run([entry_id(op) for op in ops], progress)
    else:
        results = run_inline(ops, samples, backward, args.timeout, progress)
    print_report(results, console, args.all)
    _write_json(results, args)
    return 0 if all(r.status != "fail" for r in results) else 1


def _bad_arguments(args, names, ops) -> str | None:
    """What is wrong with the arguments, found before any entry runs (an unknown op name was
    skipped without a word, and a --json path that cannot be written failed after the run)."""
    if names is not None:
        known = {entry_id(op) for op in ops} | {op.name for op in ops}
        unknown = [n for n in names if n not in known]
        if unknown:
            return (f"--ops: no OpInfo entry is named {', '.join(map(repr, unknown))} (entry ids "
                    "look like 'add' or 'nn.functional.gelu'; names as in OpInfo's op_db)")
    if args.json and args.json != "-":
        where = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(where) or not os.access(where, os.W_OK):
            return f"--json: cannot write {args.json!r} (no writable directory {where!r})"
    return None


def _write_json(results, args) -> None:
    if not args.json:
        return
    doc = {"samples_per_entry": None if args.full else args.samples,
           "backward": not args.no_backward, "summary": summary(results),
           "ops": [asdict(r) for r in results]}
    text = json.dumps(doc, indent=1)
    if args.json == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(args.json, "w") as f:
            f.write(text + "\n")


def main(argv=None) -> int:
    """CLI entry: `argv` is a list of arguments, or an argparse Namespace already parsed."""
    if isinstance(argv, argparse.Namespace):
        return run(argv)
    p = argparse.ArgumentParser(prog="python -m lazydev.coverage",
                                description="OpInfo float32 coverage of the wse device")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
