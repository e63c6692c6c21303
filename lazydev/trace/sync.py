"""Sync points: cut the trace, compile (or hit the cache) and run it.

Every sync (mark_step, .item(), .cpu(), print, bool, a CPU fallback, a data-dependent shape)
computes every pending live tensor at once, so a later sync never recomputes a value, and then
starts a new trace. Device buffers are immutable, so results simply replace pending values.
"""
from __future__ import annotations

import time

from .. import compile as _compile
from .. import log, metrics
from . import state

upload = _compile.upload
download = _compile.download


def sync(reason: str) -> None:
    tr = state.current()
    pending = state.pending_storages()
    metrics.count("syncs")
    if reason != "mark_step":
        metrics.count(f"sync_{reason.split(':')[0]}")
    if not pending:
        state.new_trace()
        return
    where = log.user_frame()
    info: dict = {}
    outputs = [st.node for st in pending]
    state.new_trace()            # ops recorded from here on belong to the next trace
    try:
        buffers = _compile.run_graph(outputs, tr.inputs, tr.scalars, info)
    except BaseException as e:
        _revert(pending, e)
        raise
    for st, buf in zip(pending, buffers):
        st.materialise(buf)
    _log_cut(reason, where, len(pending), info, tr)


def _revert(pending, error) -> None:
    """A failed graph loses no data: storages fall back to their last materialised value, and
    values that never had one remember why they are gone."""
    for st in pending:
        st.node = None
        if st.buf is None:
            st.error = f"{type(error).__name__}: {error}"


def _log_cut(reason, where, n_out, info, tr) -> None:
    if info.get("changed"):
        metrics.count("recompiles_shape")
    if not log.enabled("trace") and not (log.enabled("cache") and info.get("cache") != "hit"):
        return
    parts = [f"cut by [bold]{reason}[/] at [green]{where}[/]", f"nodes={info.get('nodes')}",
             f"kernels={info.get('kernels')}", f"outputs={n_out}", f"graph={info.get('graph_key')}",
             f"cache={info.get('cache')}"]
    if "compile_s" in info:
        parts.append(f"compile={info['compile_s'] * 1e3:.1f}ms")
    parts.append(f"execute={info.get('execute_s', 0) * 1e3:.2f}ms")
    log.emit("trace" if log.enabled("trace") else "cache", " ".join(parts))
    for slot, dt, old, new in info.get("changed", []):
        origin = tr.origins[slot] if slot < len(tr.origins) else None
        log.emit("cache", f"  recompiled: input {slot} ({str(dt).replace('torch.', '')}"
                 f"{', from ' + origin if origin else ''}) changed shape "
                 f"{list(old)} -> {list(new)}")
