"""The four backends: where tensors live, how a model is wrapped, and how a step is cut.

Each backend is imported only inside its own worker process, so e.g. the eager numbers never
pay for lazydev's device registration or torch._lazy's initialisation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch


def _identity(model):
    return model


def _no_sync():
    pass


@dataclass
class Backend:
    name: str
    device: str
    sync: Callable[[], None] = _no_sync          # called at the end of every step
    wrap: Callable = _identity                   # applied to the model (or function)
    extra: dict = field(default_factory=dict)    # backend-only hooks (wse: its trace state)


def _eager() -> Backend:
    return Backend("eager", "cpu")


def _lazy_ts() -> Backend:
    import torch._lazy
    import torch._lazy.ts_backend
    torch._lazy.ts_backend.init()
    return Backend("lazy_ts", "lazy", sync=torch._lazy.mark_step)


def _compile() -> Backend:
    # Default inductor settings; the first call of the compiled model pays for compilation.
    return Backend("compile", "cpu", wrap=torch.compile)


def _device_peak_bytes():
    # The C runtime's own high-water mark of device buffers (a private API: None if it moves).
    try:
        from lazydev.runtime.device import lib
        return lib.wse_peak_bytes()
    except (ImportError, AttributeError):
        return None


def _wse() -> Backend:
    import lazydev
    from lazydev.trace import state
    return Backend("wse", "wse", sync=lazydev.mark_step,
                   extra={"state": state, "metrics": lazydev.metrics,
                          "device_peak_bytes": _device_peak_bytes,
                          "tensor_class": lazydev.WseTensor})


BACKENDS = {"eager": _eager, "lazy_ts": _lazy_ts, "compile": _compile, "wse": _wse}


def make(name: str) -> Backend:
    return BACKENDS[name]()
