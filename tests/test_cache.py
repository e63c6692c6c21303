"""The compile cache users can trust: persistence across processes, corruption, limits, syncs."""
import gc
import json
import os
import subprocess
import sys
import textwrap
from unittest import mock
import warnings
import weakref

import pytest
import torch
import torch.nn.functional as F

import lazydev
from lazydev.compile import RecompileLimitError, cache
from lazydev.trace.sync import StrictSyncError
from conftest import assert_same, needs_cpp_side, script_env

SCRIPT = textwrap.dedent("""
    import json, time, torch, lazydev
    from lazydev.examples import MLP
    torch.manual_seed(0)
    model = MLP().to("wse")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    times, losses = [], []
    for i in range(4):
        t0 = time.perf_counter()
        x = torch.randn(32, 64).to("wse")
        loss = model(x).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        lazydev.mark_step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    print(json.dumps({"times": times, "losses": losses, "counters": lazydev.metrics.counters()}))
""")


def _run_script(cache_dir, extra_env=None):
    return subprocess.Popen([sys.executable, "-c", SCRIPT], env=script_env(cache_dir,
                            **(extra_env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_second_process_compiles_nothing_and_starts_fast(tmp_path):
    first = _result(_run_script(tmp_path))
    second = _result(_run_script(tmp_path))
    assert first["counters"]["compilations"] >= 2
    assert second["counters"]["compilations"] == 0
    assert second["counters"]["disk_cache_hits"] == first["counters"]["compilations"]
    assert second["losses"] == first["losses"]
    # "Starts fast" is structural here: no gcc run at all (compilations == 0 above). The time
    # itself is measured by benchmarks/, not asserted (timed tests flake on a loaded machine).


def test_a_program_in_several_units_compiles_without_leaking_pipes(monkeypatch, fresh_cache):
    """Units compile in parallel, one gcc each; their stderr pipes were never closed, a
    ResourceWarning per unit once collected (compile/build.py)."""
    import gc
    import warnings
    from lazydev.compile import program
    monkeypatch.setattr(program, "UNIT_LINES", 1)          # a unit per core even for this
    x = torch.randn(64, 64)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        got = ((x.to("wse") @ x.to("wse")).relu().sum(0) + x.to("wse").sin()).cpu()
        gc.collect()
    torch.testing.assert_close(got, (x @ x).relu().sum(0) + x.sin())
    assert lazydev.metrics.counters()["compilations"] >= 1
    assert not [w for w in seen if "unclosed file" in str(w.message)]


def test_two_processes_compiling_the_same_graph_at_once(tmp_path):
    procs = [_run_script(tmp_path) for _ in range(2)]
    a, b = (_result(p) for p in procs)
    assert a["losses"] == b["losses"]
    assert all(e.get("sha256") for e in _entries(tmp_path))


def test_without_a_cxx_compiler_lazydev_warns_once_and_still_runs(tmp_path):
    """The device's hooks are lazydev's only C++ (Note [The device's C++ side]): with no C++
    compiler the import says what goes without them, and steps run as before."""
    proc = _run_script(tmp_path, {"CXX": "no-such-c++"})
    with_cxx = _result(_run_script(tmp_path / "with"))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert err.count("could not build the wse device's C++ side") == 1
    assert json.loads(out.strip().splitlines()[-1])["losses"] == with_cxx["losses"]


def test_a_compiler_command_of_several_words(monkeypatch, fresh_cache):
    """CC="ccache gcc" (a launcher, or flags): the whole was looked up as one program name
    and reported as not found."""
    from lazydev.compile import build
    monkeypatch.setattr(build, "CC", "env gcc")
    assert "|gcc|" in build.compiler_identity(build.CC)
    assert _square_sum(9) == 204.0
    assert lazydev.metrics.counters()["compilations"] == 1


@needs_cpp_side
def test_a_hooks_library_cut_short_is_built_again(tmp_path):
    """The C++ side is kept in the cache directory; a copy cut short (a full disk) cannot be
    loaded, and the next import builds it again instead of running without it."""
    _result(_run_script(tmp_path))
    (so,) = (tmp_path / "hooks").glob("*.so")
    size = so.stat().st_size
    so.write_bytes(so.read_bytes()[:1000])
    proc = _run_script(tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "could not build" not in err and so.stat().st_size == size


def _entries(cache_dir):
    old = lazydev.config.cache_dir
    lazydev.config(cache_dir=str(cache_dir))
    try:
        return cache.entries()
    finally:
        lazydev.config(cache_dir=old)


def _square_sum(n):
    x = torch.arange(float(n)).to("wse")
    return (x * x).sum().item()


def test_the_disk_cache_stays_under_its_cap_least_recently_used_first_out(fresh_cache):
    """Note [Eviction cost]: a process counts what it builds; past the cap the oldest go."""
    _square_sum(3)
    (first,) = _entries(lazydev.config.cache_dir)
    cap = int(first["bytes"] * 2.5)
    old = lazydev.config.cache_max_bytes
    lazydev.config(cache_max_bytes=cap)
    try:
        for n in (4, 5, 6):                          # a new shape each: a build each
            assert _square_sum(n) == sum(k * k for k in range(n))
    finally:
        lazydev.config(cache_max_bytes=old)
    left = _entries(lazydev.config.cache_dir)
    assert sum(e["bytes"] for e in left) <= cap and len(left) == 2
    assert first["key"] not in {e["key"] for e in left}


def _damage(victim: str, how: str) -> None:
    if how == "truncated":
        with open(victim, "r+b") as f:
            f.truncate(100)
    else:       # JSON, but not an object: the entry's summary raised TypeError, the stats too
        for path in (victim[:-3] + ".json", cache.stats_path()):
            with open(path, "w") as f:
                f.write(how)


@pytest.mark.parametrize("how", ["truncated", "null", "[1, 2]"])
def test_truncated_entry_is_reported_and_rebuilt(tmp_path, how):
    # Corruption happens to files on disk, between processes: the test process never maps the
    # entry (truncating a shared object a process has loaded is a fault for that process).
    first = _result(_run_script(tmp_path))
    entries = _entries(tmp_path)
    victim = max(entries, key=lambda e: e["bytes"])["path"]
    old = lazydev.config.cache_dir
    lazydev.config(cache_dir=str(tmp_path))
    try:
        _damage(victim, how)
    finally:
        lazydev.config(cache_dir=old)
    proc = _run_script(tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    second = json.loads(out.strip().splitlines()[-1])
    assert "CacheCorruptionWarning" in err and "truncated or corrupt" in err
    assert second["counters"]["compilations"] == 1
    assert second["losses"] == first["losses"]
    assert os.path.getsize(victim) > 100


def test_a_cache_that_cannot_be_written_is_still_read(fresh_cache, monkeypatch):
    """A prebuilt cache mounted read-only: marking a hit as used (its mtime) failed with EROFS
    and every hit was rebuilt, with a warning each."""
    import errno
    from lazydev import compile as lzc
    assert _square_sum(5) == 30.0
    lzc.clear_memory_cache()

    def read_only(*_, **__):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(cache.os, "utime", read_only)
    before = lazydev.metrics.counters()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _square_sum(5) == 30.0
    after = lazydev.metrics.counters()
    assert after["disk_cache_hits"] - before["disk_cache_hits"] == 1
    assert after["compilations"] == before["compilations"]


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    """A publish that failed (the target a directory) left its temporary file in the cache,
    where eviction, which counts .so files, never removed it."""
    (tmp_path / "entry.json").mkdir()
    with pytest.raises(OSError):
        cache.write_atomic(str(tmp_path / "entry.json"), b"{}")
    assert [p.name for p in tmp_path.iterdir()] == ["entry.json"]


def test_recompile_limit_raises_on_the_third_shape(fresh_cache):
    lazydev.config(recompile_limit=2)
    try:
        assert _square_sum(3) == 5.0
        assert _square_sum(4) == 14.0
        with pytest.raises(RecompileLimitError, match=r"recompile_limit=2.*\[4\] -> \[5\]"):
            _square_sum(5)
    finally:
        lazydev.config(recompile_limit=None)
        lazydev.mark_step()             # the refused step stays recorded (the test below)


def test_a_step_refused_by_the_recompile_limit_stays_recorded(fresh_cache):
    """The step RecompileLimitError refuses (or a Ctrl-C stops while compiling) ran nothing:
    it stays recorded, and the next mark_step runs it. It was dropped: its in-place update lost,
    its new tensors ValueLost, though the message said to raise the limit."""
    lazydev.config(recompile_limit=1)
    try:
        w = torch.zeros(4, device="wse")
        lazydev.mark_step()
        for n in (1, 2):
            w.add_(torch.ones(n, 4).to("wse").sum(0))
            y = w * 10
            try:
                lazydev.mark_step()
            except RecompileLimitError:
                assert n == 2
                lazydev.config(recompile_limit=None)
                lazydev.mark_step()
    finally:
        lazydev.config(recompile_limit=None)
    assert_same(w.cpu(), torch.full((4,), 3.0))
    assert_same(y.cpu(), torch.full((4,), 30.0))


def test_strict_mode_raises_on_a_stray_item_and_names_its_line():
    x = torch.randn(8).to("wse")
    lazydev.config(strict_syncs=True)
    try:
        y = x.exp().sum()
        lazydev.mark_step()                     # allowed
        with pytest.raises(StrictSyncError, match=r"item.*test_cache.py:\d+"):
            (x * 2).sum().item()
    finally:
        lazydev.config(strict_syncs=False)
    assert y.item() == pytest.approx(x.cpu().exp().sum().item(), rel=1e-6)


def test_a_fallback_strict_mode_refuses_is_not_counted():
    """bincount (a data-dependent size: the CPU's kernel) refused by strict mode still counted
    as a fallback, so one that then ran showed as two."""
    x = torch.tensor([1, 1, 3]).to("wse") * 1
    lazydev.config(strict_syncs=True)
    try:
        with pytest.raises(StrictSyncError, match="bincount"):
            torch.bincount(x)
    finally:
        lazydev.config(strict_syncs=False)
    assert torch.equal(torch.bincount(x).cpu(), torch.tensor([0, 2, 0, 1]))
    assert lazydev.metrics.counters()["fallbacks"] == {"aten.bincount.default": 1}


def test_sync_ledger_counts_implicit_syncs_per_line():
    x = torch.randn(4).to("wse")
    for _ in range(3):
        (x + 1).sum().item()
        lazydev.mark_step()
    ledger = lazydev.metrics.sync_ledger()
    ((reason, where), count), = ledger.items()
    assert reason == "item" and "test_cache.py" in where and count == 3
    # the steps it synced in are counted, not kept one by one (a set grew every step)
    assert lazydev.metrics._ledger_steps[(reason, where)] == [3, mock.ANY]
    steps = lazydev.metrics.steps()
    assert steps and {"trace_s", "compile_s", "execute_s", "transfer_s"} <= set(steps[-1])


def test_runaway_trace_warns_then_cuts():
    lazydev.config(trace_warn_ops=50, trace_max_ops=120)    # applies to the current trace
    try:
        x = torch.zeros(2).to("wse")
        with pytest.warns(UserWarning, match="without a sync"):
            for _ in range(200):
                x = x + 1
    finally:
        lazydev.config(trace_warn_ops=200_000, trace_max_ops=2_000_000)
    assert lazydev.metrics.counters()["sync_runaway_trace"] >= 1
    assert x.tolist() == [200.0, 200.0]


def test_cache_cli_and_debug_dump(tmp_path, fresh_cache):
    _square_sum(6)
    out = lazydev.debug.dump(str(tmp_path / "dump"))
    for name in ("graph.mlir", "program.c", "compile_command.txt", "inputs.pt", "repro.py"):
        assert os.path.exists(os.path.join(out, name))
    assert "wse.mul" in open(os.path.join(out, "graph.mlir")).read()
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    rep = subprocess.run([sys.executable, "repro.py"], cwd=out, env=env, capture_output=True,
                         text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    raw = torch.load(os.path.join(out, "outputs.pt"))[0]
    assert raw.view(torch.float32).item() == 55.0
    env["LAZYDEV_CACHE_DIR"] = lazydev.config.cache_dir
    ls = subprocess.run([sys.executable, "-m", "lazydev", "cache", "ls"], env=env,
                        capture_output=True, text=True, timeout=120)
    assert ls.returncode == 0 and "1 entries" in ls.stdout
    show = subprocess.run([sys.executable, "-m", "lazydev", "cache", "show"], env=env,
                          capture_output=True, text=True, timeout=120)
    # without a key it said "no entries match None"
    assert show.returncode == 2 and "show needs a KEY" in show.stdout
    extra = subprocess.run([sys.executable, "-m", "lazydev", "cache", "ls", "extra"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert extra.returncode == 2 and "takes no KEY" in extra.stdout     # it ignored it
    bad_log = subprocess.run([sys.executable, "-m", "lazydev", "demo", "--log", "bogus"],
                             env=env, capture_output=True, text=True, timeout=120)
    # a traceback of the ValueError, not argparse's usage and error
    assert bad_log.returncode == 2 and "error: argument --log" in bad_log.stderr


def test_a_deleted_input_of_the_last_compiled_graph_is_freed_when_memory_is_short(tmp_path):
    """lazydev.debug keeps the last compiled graph's inputs, and steps that hit the cache never
    replace it: a deleted tensor's buffer stayed allocated, and an allocation that fits without
    it ran the device out of memory. The device drops them before refusing one."""
    rt = lazydev.runtime
    x = torch.randn(250_007, device="wse")
    lazydev.mark_step()
    ((x * 3).sum() + 0.5).item()                # a new graph, reading x: the last compiled
    del x
    lazydev.wait()
    gc.collect()
    cap = rt.memory_stats()["capacity"]
    try:
        rt.set_capacity(rt.memory_stats()["bytes_in_use"] + 200_000)
        rt.Buffer(1_100_000)                    # fits once x's 1 MB is freed
    finally:
        rt.set_capacity(cap)
    with pytest.warns(UserWarning, match="inputs were freed"):
        lazydev.debug.dump(str(tmp_path / "dump"))


def test_programs_past_the_kept_number_are_unloaded_and_load_again(monkeypatch, fresh_cache):
    """Every graph compiled stayed loaded for the process's life (six mappings each; a job
    whose shapes never settle reached vm.max_map_count). Past PROGRAMS_KEPT the least recently
    run is dropped and its library unloaded once no run holds it; run again, it is a disk-cache
    hit, not a recompilation counted against recompile_limit."""
    from lazydev import compile as lzc
    monkeypatch.setattr(lzc, "PROGRAMS_KEPT", 2)
    monkeypatch.setattr(lzc, "ARENAS_KEPT", 1)  # (programs with a scratch arena are kept too)
    lazydev.config(recompile_limit=4)
    try:
        first = None
        for rnd in range(2):
            for n in (3, 4, 5, 6):
                assert _square_sum(n) == sum(i * i for i in range(n))
                if first is None:
                    first = weakref.ref(next(iter(lzc._programs.values())).program)
            assert len(lzc._programs) == 2
    finally:
        lazydev.config(recompile_limit=None)
    lazydev.wait()
    gc.collect()
    assert first() is None                      # unloaded
    counters = lazydev.metrics.counters()
    assert counters["compilations"] == 4 and counters["disk_cache_hits"] == 4


def test_cache_clear_with_a_key_removes_that_entry_only(fresh_cache):
    """`cache clear KEY` removed every entry (the key was ignored)."""
    _square_sum(6)
    _square_sum(7)
    keys = sorted(e["key"] for e in cache.entries())
    assert len(keys) == 2
    env = dict(os.environ, LAZYDEV_CACHE_DIR=lazydev.config.cache_dir)

    def clear(*key):
        return subprocess.run([sys.executable, "-m", "lazydev", "cache", "clear", *key], env=env,
                              capture_output=True, text=True, timeout=120)
    assert clear("no-such-key").returncode == 1
    done = clear(keys[0][:12])
    assert done.returncode == 0 and "removed 1 entries" in done.stdout
    assert [e["key"] for e in cache.entries()] == keys[1:]
    assert clear().returncode == 0 and cache.entries() == []


def test_padding_to_buckets_bounds_recompiles_and_keeps_the_loss(fresh_cache):
    torch.manual_seed(0)
    w = torch.randn(8, 3)
    ww = w.to("wse")
    losses = []
    for n in (10, 12, 14, 16):
        x = torch.randn(n, 8)
        xp, keep = lazydev.pad_to_bucket(x, dim=0, buckets=(16,))
        per_row = (xp.to("wse") @ ww).square().sum(1)
        keep = keep.to("wse")
        loss = (per_row * keep).sum() / keep.sum()
        lazydev.mark_step()
        losses.append(loss.item())
        torch.testing.assert_close(losses[-1], (x @ w).square().sum(1).mean().item(),
                                   rtol=1e-5, atol=1e-6)
    assert lazydev.metrics.counters()["compilations"] == 1


def test_padding_a_tensor_already_on_wse_warns_that_it_does_not_bound_compiles():
    """Padded on the device, the program's input is the unpadded tensor, so each size compiled
    its own program, silently; the same tensor padded on the CPU does not warn."""
    with pytest.warns(UserWarning, match="pad the CPU tensor before"):
        xp, keep = lazydev.pad_to_bucket(torch.ones(5, 2).to("wse"), buckets=(8,))
    assert xp.shape == (8, 2) and keep.cpu().tolist() == [True] * 5 + [False] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lazydev.pad_to_bucket(torch.ones(5, 2), buckets=(8,))
        lazydev.pad_to_bucket(torch.ones(8, 2).to("wse"), buckets=(8,))     # nothing to pad


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="no /proc/cpuinfo to read")
def test_cache_key_names_the_cpu():
    """A program built with -march=native must not be loaded on another CPU: the key's CPU part
    carries the vendor, model and flags (it was 'x86_64|||' while /proc/cpuinfo's tab-padded
    keys went unstripped)."""
    from lazydev.compile import build
    machine, vendor, model, flags = build.cpu_features().split("|")
    assert machine and vendor and model and flags
    assert dict(cache.key_parts(["int x;"]))["cpu_features"] == build.cpu_features()


@pytest.mark.parametrize("setting", [
    {"max_queued_steps": -1}, {"recompile_limit": "5"}, {"async_exec": "no"}, {"buckets": 5},
    {"log": "trac"}, {"cache_max_bytes": 1.5}, {"trace_max_ops": 0}], ids=str)
def test_a_bad_config_value_is_refused_where_it_is_set(setting):
    """Not met later as a TypeError inside a compile or a sync: refused, with what it takes,
    and nothing changes."""
    before = repr(lazydev.config)
    (name, _), = setting.items()
    with pytest.raises(ValueError, match=rf"^lazydev\.config\({name}=.*\): {name} takes "):
        lazydev.config(**setting)
    assert repr(lazydev.config) == before


def test_a_bad_config_environment_variable_is_named(monkeypatch):
    from lazydev.config import Config
    monkeypatch.setenv("LAZYDEV_CACHE_MAX_BYTES", "1GB")
    with pytest.raises(ValueError, match="^LAZYDEV_CACHE_MAX_BYTES='1GB': cache_max_bytes takes"):
        Config()
    monkeypatch.setenv("LAZYDEV_CACHE_MAX_BYTES", "4096")
    monkeypatch.setenv("LAZYDEV_LOG", "cache,trace")
    assert Config().cache_max_bytes == 4096 and Config().log == {"cache", "trace"}


@pytest.mark.parametrize("var,name", [("LAZYDEV_CACHE", "disk_cache"),
                                      ("LAZYDEV_ASYNC", "async_exec"),
                                      ("LAZYDEV_STRICT_SYNCS", "strict_syncs")])
def test_switches_from_the_environment_read_words_and_refuse_others(monkeypatch, var, name):
    """LAZYDEV_CACHE=no left the disk cache on (anything but "0" was on)."""
    from lazydev.config import Config
    for text, want in (("no", False), ("0", False), ("off", False), ("False", False),
                       ("yes", True), ("1", True), ("on", True), ("TRUE", True)):
        monkeypatch.setenv(var, text)
        assert getattr(Config(), name) is want, text
    monkeypatch.setenv(var, "maybe")
    with pytest.raises(ValueError, match=f"^{var}='maybe': takes 1 or 0"):
        Config()


def test_a_cap_below_one_entry_keeps_the_program_just_built(fresh_cache):
    """Eviction after a build removed that very entry when the cap was below its size (or
    another process's was), and opening it raised FileNotFoundError."""
    old = lazydev.config.cache_max_bytes
    lazydev.config(cache_max_bytes=1000)
    try:
        assert _square_sum(7) == sum(k * k for k in range(7))
        assert _square_sum(8) == sum(k * k for k in range(8))
    finally:
        lazydev.config(cache_max_bytes=old)
    assert len(_entries(lazydev.config.cache_dir)) == 1       # the newest stays


def test_an_unusable_cache_directory_warns_and_builds_without_it(tmp_path):
    """A cache directory through a file (or unwritable, or on a full disk) made every compile
    raise NotADirectoryError, losing the step's values; the C++ side's build blamed g++."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = textwrap.dedent("""
        import torch, lazydev
        print((torch.arange(5.0, device="wse") * 2).tolist())
    """)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.run([sys.executable, "-c", code], env=script_env(
        blocker / "cache", TMPDIR=str(scratch)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0.0, 2.0, 4.0, 6.0, 8.0]"
    assert "cannot be used (NotADirectoryError" in proc.stderr
    assert "C++ side" not in proc.stderr
    # what it built for itself is gone at exit (each process left a directory in /tmp)
    assert not [p for p in scratch.glob("lazydev-*") if p.is_dir()]


_INT_VALUES = {
    "clamp(max=step)": lambda x, s: x.clamp(max=s),
    "where(c, x, step)": lambda x, s: torch.where(x > 0, x, s),
    "masked_fill": lambda x, s: x.masked_fill(x > 0, s),
    "full_like": lambda x, s: torch.full_like(x, s) + x,
    "x >= step": lambda x, s: (x >= s - 8).float(),
    "add alpha": lambda x, s: torch.add(x, x, alpha=s + 2),
    # a plan of several nodes (a CALL): a half tensor times an int, computed in float
    "half * step": lambda x, s: x.half() * s,
    "bfloat16 / step": lambda x, s: x.bfloat16() / s,
}


@pytest.mark.parametrize("name", _INT_VALUES)
def test_an_int_from_a_step_counter_in_a_floating_op_compiles_once(name, fresh_cache):
    """An int bound, fill, comparand or factor of a floating op was a constant of the program:
    one compilation per step. It is a runtime scalar, as a float of the same value (-1, 0 and
    1 stay constants the C folds; the steps here are past them)."""
    f = _INT_VALUES[name]
    x = torch.randn(8, 16)
    xw = x.to("wse")
    lazydev.mark_step()
    misses = lazydev.metrics.counters()["cache_misses"]
    for step in range(2, 7):
        got = f(xw, step)
        lazydev.mark_step()
        assert_same(got.cpu(), f(x, step))
    assert lazydev.metrics.counters()["compilations"] == 1
    # not even a graph the disk cache has (the same C, under a new graph key: the half's
    # multiplication made a macro per int)
    assert lazydev.metrics.counters()["cache_misses"] - misses == 1


def test_changing_ints_in_arithmetic_and_write_positions_do_not_recompile(fresh_cache):
    """x * step, x + step, step - x, x / step with a new int each step compiled a program each
    (the int was a constant); they are runtime scalars now (Note [Int operands]), with the
    CPU's values. So are the positions of writes, cache[:, t] = v and history[step] = loss
    (Note [Positions of writes]), and of history[step] += v (its copy of the view onto itself,
    special._copy_). An int that stays in the graph (an integer op's operand) warned 'pass
    such a number as a float' at lazydev's sync.py: the warning now names the cases and a way
    out, at the user's line."""
    def run(device):
        w = torch.arange(4.0).to(device)
        cache, history = torch.zeros(2, 12, device=device), torch.zeros(12, device=device)
        out = []
        for step in range(1, 11):
            out.append((w * step + step - w / step, step - w.half() * step))
            cache[:, step] = out[-1][0][:2]
            history[step - 1] += out[-1][0][1]      # a view read back and copied onto itself
            history[step] = out[-1][0].sum()
            if device == "wse":
                lazydev.mark_step()
        return out, cache, history

    lazydev.mark_step()
    before = lazydev.metrics.counters()["compilations"]
    got = run("wse")
    assert lazydev.metrics.counters()["compilations"] - before <= 2
    assert_same(got, run("cpu"))
    n = torch.arange(4).to("wse")
    with pytest.warns(UserWarning, match=r"int divisor or shift of an integer op") as seen:
        for step in range(lazydev.config.recompile_warn):
            (n % (step + 2)).sum().item()
    assert any(r.filename == __file__ for r in seen)


def test_reads_after_writes_at_step_positions_do_not_recompile(fresh_cache):
    """Two writes at step-dependent positions in one step (kc[:, t] += k; kc[:, t + 1] += k)
    and a ring buffer (row t written, row t + 1 read) compiled a program per step: after the
    first write, the second view was read at a constant offset (Note [Reads at positions])."""
    def run(device):
        kc = torch.zeros(3, 12, 4, device=device)
        ring = torch.arange(40.0).reshape(8, 5).to(device)
        k = torch.arange(12.0).reshape(3, 4).to(device)
        out, misses = [], []
        for t in range(9):
            kc[:, t] += k
            kc[:, t + 1] += k * 2
            ring[t % 8] = ring[t % 8] * 0.5 + t
            nxt = ring[(t + 1) % 8]
            out.append((nxt * 1, ring[:, t % 5].sum(), kc[1, t + 1, ::2] + 0))
            if device == "wse":
                lazydev.mark_step()
                misses.append(lazydev.metrics.counters()["cache_misses"])
        return out, kc, ring, misses

    *got, misses = run("wse")
    *want, _ = run("cpu")
    assert_same(got, want)
    assert misses[2] == misses[-1]          # steps 0 and 1 differ: step 0 (t % 8 == 0)


def test_the_recompile_warning_names_data_dependent_sizes(fresh_cache):
    """h[h > 0] of new data each step compiles for each count; the warning spoke of write
    positions and 0-d tensors only."""
    with pytest.warns(UserWarning, match=r"size of a data-dependent result") as seen:
        for step in range(lazydev.config.recompile_warn):
            h = torch.arange(-3.0, 40.0).to("wse") - step
            (h[h > 0] * 2).sum().item()
    assert any(r.filename == __file__ for r in seen)


def test_changing_int_operands_of_integer_ops_do_not_recompile(fresh_cache):
    """ids + step, arange(T) + step, ids * step and positions < length with a new int each
    step compiled a program each (the int was a constant of the integer op); they are int64
    runtime scalars, converted to the op's dtype as ATen converts them."""
    def run(device):
        ids = torch.tensor([[3, 250, 7], [0, 1, 2]], dtype=torch.uint8, device=device)
        pos = torch.arange(6, dtype=torch.int32, device=device)
        out, misses = [], []
        for step in range(2, 9):
            out.append(((ids + step), (ids * step), (ids > -step), (pos + step) * (pos < step),
                        torch.add(pos, pos, alpha=step), pos.clamp(max=step)))
            if device == "wse":
                lazydev.mark_step()
                misses.append(lazydev.metrics.counters()["cache_misses"])
        return out, misses

    got, misses = run("wse")
    assert misses[1] == misses[-1]      # the first step also uploads ids and pos
    assert_same(got, run("cpu")[0])


def test_views_over_a_whole_buffer_are_one_node_per_trace():
    """F.linear makes weight.t() anew at every call: each such view of a device buffer reads
    the one AS_STRIDED node the trace keeps for it (Storage.strided), while a view of part of
    the buffer still gets a window of its own (Note [Windows]); the next trace makes new nodes.
    Values as on the CPU."""
    from lazydev.tensor.wse_tensor import value
    w0, x0 = torch.randn(6, 4), torch.randn(3, 4)
    w, x = w0.to("wse"), x0.to("wse")
    lazydev.mark_step()
    first = value(w.t())
    assert value(w.t()) is first and first.op.name == "AS_STRIDED"
    assert value(w[1:].t()) is not value(w[1:].t())         # windows: a slot each
    out = x @ w.t() + (x @ w.t()).relu()
    assert_same(out.cpu(), x0 @ w0.t() + (x0 @ w0.t()).relu())
    assert value(w.t()) is not first                          # a new trace


def test_slices_of_a_dataset_on_the_device_compile_once_and_train_as_on_the_cpu(fresh_cache):
    """data[i * b:(i + 1) * b] and data[i] of a tensor on the device, a new i each step: the
    offsets are bound at run time (Note [Windows]), so steps after the second hit the cache;
    each step compiled a program before. d[63] += d[i] writes the buffer the step reads
    through windows, so it must not be overwritten in place (donated) before they are read."""
    torch.manual_seed(0)
    data, w0 = torch.randn(64, 8), torch.randn(8, 3)

    def train(device):
        d, w = data.to(device), w0.clone().to(device).requires_grad_()
        losses = []
        for i in range(8):
            x = d[i * 6:(i + 1) * 6]
            # d[i % 2] and d[1] meet at odd steps: two slots still (Storage.window)
            loss = (x @ w).square().mean() + (d[i + 1] @ w).sum() + (d[i % 2] * d[1]).sum()
            loss.backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
                w.grad = None
                d[63] += d[i]          # a window of the buffer this step writes
            if device == "wse":
                lazydev.mark_step()
            losses.append(loss.item())
        return torch.tensor(losses), w.detach().cpu(), d.cpu()

    before = lazydev.metrics.counters()["compilations"]
    wse, cpu = train("wse"), train("cpu")
    assert lazydev.metrics.counters()["compilations"] - before <= 3
    for a, b in zip(wse, cpu):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("op", [lambda x, w, b: x.softmax(-1),
                                lambda x, w, b: F.layer_norm(x, (16,)),
                                lambda x, w, b: F.linear(x, w, b),
                                lambda x, w, b: F.cross_entropy(x, torch.arange(
                                    8, device=x.device))])
def test_ops_recorded_as_calls_on_windows_at_new_offsets_compile_once(op):
    """Softmax, layer norm, a linear layer with a bias and cross entropy record CALL nodes
    (Note [Macro nodes]) whose key holds their macro; a plan, and its macro, was made per
    signature, which holds the offset, so a batch at a new offset of data on the device made
    a new graph key and compiled at every step (Note [Shared macros])."""
    torch.manual_seed(0)
    data, w, b = torch.randn(160, 16), torch.randn(4, 16), torch.randn(4)
    on = [t.to("wse") for t in (data, w, b)]
    lazydev.mark_step()
    before = lazydev.metrics.counters()["cache_misses"]
    for i in range(6):
        got = op(on[0][i * 8:(i + 1) * 8], on[1], on[2]).cpu()
        torch.testing.assert_close(got, op(data[i * 8:(i + 1) * 8], w, b))
    assert lazydev.metrics.counters()["cache_misses"] - before == 1


@pytest.mark.parametrize("make", [lambda b: b[2:4].clone(), lambda b: b[3].clone(),
                                  lambda b: torch.cat([b[2:4]]),
                                  lambda b: b[1:3].to("wse", copy=True)])
def test_a_clone_of_a_slice_of_a_computed_tensor_reads_and_updates_as_on_the_cpu(make):
    """A clone of a slice of a buffer is the slice's window itself (the program returns its
    input), so the clone's storage holds a window: reading it raised AttributeError (a read
    marks the window final), and an in-place update of it, once no queued run held it, was
    donated the window and wrote the rows of the tensor it was cloned from."""
    def run(device):
        b = torch.arange(36.0, device=device).reshape(6, 6).add_(1)
        if device == "wse":
            lazydev.mark_step()
        c = make(b)
        if device == "wse":
            lazydev.mark_step()
        first = c.cpu().clone()     # (on the CPU, .cpu() is c itself)
        for k in range(3):          # the runs holding the window finish and let it go
            torch.ones(3, device=device).mul_(k).cpu()
        c.add_(10)
        if device == "wse":
            lazydev.mark_step()
        return first, c.cpu(), b.cpu()

    for got, want in zip(run("wse"), run("cpu")):
        torch.testing.assert_close(got, want)


def test_clones_of_slices_of_clones_are_windows_of_the_first_buffer():
    """x = x[1:].clone() step after step: each clone is a window of the last one's memory, and
    a window of a window is one of the first buffer (they chained, one object per step)."""
    from lazydev.runtime import BufferWindow

    def run(device):
        x, seen = torch.arange(40.0, device=device) * 1, []
        for _ in range(5):
            x = x[1:].clone()
            if device == "wse":
                lazydev.mark_step()
                assert type(getattr(x._st.buf, "base", None)) is not BufferWindow
            seen.append(x.cpu().clone())
        return seen, (x.add_(1)[2:5] * 2).cpu()

    wse, cpu = run("wse"), run("cpu")
    torch.testing.assert_close(wse, cpu)
