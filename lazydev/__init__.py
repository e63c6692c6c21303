"""lazydev: a lazy-tensor device ("wse") for PyTorch.

    model.to("wse"); ...; loss.backward(); opt.step(); lazydev.mark_step()

Operations on wse tensors are recorded, not run. `mark_step()` (or any read of a value) compiles
the recorded trace to C, caches the program, and runs it on the C device runtime.
"""
from __future__ import annotations

__version__ = "0.1.0"

from . import metrics  # noqa: E402
from .compile import hooks as _hooks  # noqa: E402
from .config import config  # noqa: E402
from .tensor import device as _device  # noqa: E402

# The C++ side first: torch keeps the first PrivateUse1 hooks it is given (Note [The device's
# C++ side] in compile/hooks.py). Its synchronize is lazydev.wait, defined below.
_cpp_side = _hooks.install(lambda: wait())
_device.register(amp_dtypes=_hooks.autocast_dtypes)

from .tensor import wse_tensor as _wse_tensor  # noqa: E402  (names the device register() made)
_wse_tensor.set_tensor_maker(_hooks.tensor_maker())    # Note [Native tensor objects]

from .tensor import special as _special  # noqa: E402,F401  (registers handlers)
from .tensor import vjp as _vjp  # noqa: E402,F401  (registers the traced backward handlers)
from .tensor import pool as _pool  # noqa: E402,F401  (registers the pooling handlers)
from .tensor import conv as _conv  # noqa: E402,F401  (registers the convolution handlers)
from .tensor import norm as _norm  # noqa: E402,F401  (registers the batch-norm handlers)
from .tensor import pairwise as _pairwise  # noqa: E402,F401  (_trilinear, cdist, pdist)
from .tensor import composites as _composites  # noqa: E402,F401  (logsumexp)
from .tensor import sampling as _sampling  # noqa: E402,F401  (grid_sampler_3d, aa resize)
from .tensor import distributions as _distributions  # noqa: E402,F401  (multinomial)
from .tensor import ctc as _ctc  # noqa: E402,F401  (ctc_loss)
from .tensor import rnn as _rnn  # noqa: E402,F401  (the fused GRU cell)
from .tensor import transformer as _transformer  # noqa: E402,F401  (fused attention, inference)
from .tensor import optim as _optim  # noqa: E402,F401  (fused optimizers, GradScaler's ops)
from .tensor.wse_tensor import WseTensor  # noqa: E402
from .tensor import dispatch as _dispatch  # noqa: E402
from .trace import sync as _sync  # noqa: E402

if _cpp_side:
    _dispatch.raise_errors_in_backward()    # Note [Errors inside backward]


def mark_step() -> None:
    """End of a step: compile (or fetch from the cache) the pending graph of every live wse
    tensor with pending work, queue it for execution, and start a new trace. Returns once the
    program is queued; it runs on the runtime's thread while Python records the next step.
    A later read (.item(), .cpu(), print) waits only for the program that writes it."""
    _sync.sync("mark_step")


def wait() -> None:
    """Wait for all queued device work; raises the first error of a failed program."""
    _sync.wait()


def sync(tensors=None) -> None:
    """Compute all pending work (as mark_step does) and wait until it has run."""
    _sync.sync("sync")
    _sync.wait()


from . import debug  # noqa: E402
from .buckets import pad_to_bucket  # noqa: E402


__all__ = ["debug", "pad_to_bucket", "mark_step", "wait", "sync", "metrics", "config", "WseTensor", "__version__"]
