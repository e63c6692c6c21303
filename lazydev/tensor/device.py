"""Registers the "wse" device with PyTorch (PrivateUse1, renamed) and its factory kernels."""
from __future__ import annotations

import functools
import re
import weakref

import torch

from ..trace import build, meta, state, sync
from ..trace.meta import COMPILED
from ..trace.state import Storage


class _WseModule:
    """`torch.wse`: what PyTorch and users ask a device module for."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        # wse random numbers come from the CPU generator (tensor/special.py), which
        # torch.manual_seed already seeds.
        pass

    @staticmethod
    def get_rng_state(device=None) -> torch.Tensor:
        # The wse generator is the CPU generator (see manual_seed_all); code that saves and
        # restores the accelerator's state (torch.random.fork_rng, freeze_rng_state) needs this.
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, device=None) -> None:
        torch.set_rng_state(state)

    # The rest of torch.cuda's generator functions, on the one generator: the CPU's.
    @staticmethod
    def get_rng_state_all() -> list:
        return [torch.get_rng_state()]

    @staticmethod
    def set_rng_state_all(states) -> None:
        torch.set_rng_state(states[0])

    @staticmethod
    def initial_seed() -> int:
        return torch.initial_seed()

    @staticmethod
    def seed() -> None:
        torch.seed()

    seed_all = seed

    class device:
        """`torch.wse.device(i)`, the current device in a block: there is one. (Without it,
        storage.to("wse") raised AttributeError; it now reaches the storage's own error.)"""

        def __init__(self, device):
            check_index(device if not isinstance(device, int) else torch.device("wse", device))
            import lazydev
            if not lazydev._cpp_side:       # a storage made in the block would crash
                raise RuntimeError("torch.wse.device needs the wse device's C++ side, which "
                                   "could not be built (see the import's warning)")

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> bool:
            return False

    @staticmethod
    def synchronize(device=None) -> None:
        from .. import wait
        wait()

    # torch.cuda's memory functions under their CUDA names, for code that calls them on the
    # device module (torch.get_device_module("wse")): torch.accelerator's, which read the
    # runtime's accounting through the C++ side (Note [The device's C++ side]).
    memory_allocated = staticmethod(torch.accelerator.memory_allocated)
    max_memory_allocated = staticmethod(torch.accelerator.max_memory_allocated)
    memory_reserved = staticmethod(torch.accelerator.memory_reserved)
    memory_stats = staticmethod(torch.accelerator.memory_stats)
    reset_peak_memory_stats = staticmethod(torch.accelerator.reset_peak_memory_stats)
    empty_cache = staticmethod(torch.accelerator.empty_cache)
    mem_get_info = staticmethod(torch.accelerator.get_memory_info)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)     # the CPU generator is wse's (see manual_seed_all)

    @staticmethod
    def get_amp_supported_dtype():
        # torch.autocast("wse", dtype=...) asks at its start; loading the policies (built on
        # the first call) is the compile stage's (Note [Autocast on wse] in compile/hooks.py).
        return _amp_dtypes[0]()


def check_index(device) -> None:
    """wse has one device, wse:0 (torch.wse.device_count()); "wse:1" must not quietly mean it.
    Called by the factory kernels below and, for every op with a `device` argument, by
    tensor/dispatch.py (_one_device)."""
    if device is None:
        return
    device = torch.device(device)
    if device.type == "wse" and device.index not in (None, 0):
        raise RuntimeError(f"there is no wse:{device.index}: lazydev has one wse device, wse:0 "
                           "(torch.wse.device_count() == 1); use device='wse'")


def _numel(size) -> int:
    n = 1
    for d in size:
        if d < 0:       # before any storage is made: a negative one would fail every later sync
            raise RuntimeError(f"Trying to create tensor with negative dimension {d}: "
                               f"{list(size)}")
        n *= d
    return n


_ZEROS: dict = {}      # (dtype, numel) -> the zero-fill node (trace-independent: constants only)


def _zero_fill(dtype, numel: int):
    node = _ZEROS.get((dtype, numel))
    if node is None:
        if len(_ZEROS) >= 4096:
            _ZEROS.clear()
        node = _ZEROS[(dtype, numel)] = build.full(0, dtype, (numel,))
    return node


def empty_tensor(size, dtype):
    """A new tensor. Its contents are unspecified in PyTorch; here they are lazily zero, so an
    uninitialised read is deterministic and costs nothing until something reads it. Every
    upload (`x.to("wse")`) makes one first, so its zero node is made once per size."""
    dtype = dtype or torch.get_default_dtype()
    size = tuple(size)
    numel = _numel(size)
    from .wse_tensor import WseTensor   # after register(): it names the "wse" device
    if dtype.is_complex:                  # real pairs (Note [Complex storage])
        real = dtype.to_real()
        storage = Storage(2 * numel, real, node=_zero_fill(real, 2 * numel))
        return WseTensor(storage, size, dtype=dtype)
    if dtype not in COMPILED:
        # float8, uint32, ...: no node can hold their values, so zeros in a device buffer (a
        # zero node failed the step's compilation at the next sync, losing its values)
        zeros = torch.zeros(numel, dtype=dtype, device="cpu")
        return WseTensor.fresh(Storage(numel, dtype, buf=sync.upload(zeros)), size)
    return WseTensor.fresh(Storage(numel, dtype, node=_zero_fill(dtype, numel)), size)


@state.recorder
def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None,
                         memory_format=None):
    check_index(device)
    check_format(memory_format, size, "empty")
    return empty_tensor(size, dtype)


def check_format(memory_format, size, op: str) -> None:
    """The CPU's checks of a memory format (channels_last of a 3-d size; preserve_format for an
    empty tensor): wse's results are row-major whatever the format (README), but an invalid
    format is refused as there."""
    if memory_format is None or memory_format is torch.contiguous_format:
        return
    if memory_format is not torch.preserve_format:
        torch.empty(size, memory_format=memory_format, device="meta")
    elif op == "empty":
        raise RuntimeError("unsupported memory format Preserve")


@state.recorder
def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    # Storage is always dense row-major on wse: strides requested here describe a fresh
    # allocation, and a contiguous one holds the same values. Strides with gaps get a storage
    # of the extent they ask for (under the row-major tensor), as the CPU's: as_strided(size,
    # stride) of the result, which code that asked for them may take, stays in bounds.
    check_index(device)
    if any(st < 0 for st in stride):            # the CPU's error (allocating nothing)
        torch.empty_strided(size, stride, dtype=dtype, device="cpu")
    need = build.extent(size, stride, 0)
    if need <= _numel(size):
        return empty_tensor(size, dtype)
    from .wse_tensor import WseTensor
    whole = empty_tensor((need,), dtype)
    return WseTensor(whole._st, tuple(size), build.contiguous_strides(tuple(size)), 0,
                     dtype=whole.dtype)


@state.recorder
def _arange(start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    # Registered for PrivateUse1 so that torch.arange(..., device="wse") never goes through
    # arange.out, which would make an empty tensor and resize it.
    from .dispatch import dispatch
    check_index(device)
    if end is None:
        start, end = 0, start
    spec_dtype = dtype
    if spec_dtype is None:
        spec_dtype = torch.int64 if all(isinstance(v, int) for v in (start, end, step)) \
            else torch.get_default_dtype()
    return dispatch(torch.ops.aten.arange.start_step, (start, end, step),
                    {"dtype": spec_dtype, "device": torch.device("wse", 0)})


@state.recorder
def _eye(n, m=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    # Registered for the same reason as _arange: eye's kernel resizes an empty eye.m_out.
    from torch._decomp import decomposition_table
    check_index(device)
    return decomposition_table[torch.ops.aten.eye.m](
        n, n if m is None else m, dtype=dtype or torch.get_default_dtype(),
        device=torch.device("wse", 0))


def _on_host(op):
    """A factory whose values depend on no device data, made on the CPU and uploaded: for
    ops PyTorch has no PrivateUse1 kernel for (tril_indices raised NotImplementedError,
    kaiser_window failed an internal assert), and linspace/logspace, whose linspace.out ran as
    a counted fallback (with the CPU's values bit for bit, which a lowering would have to
    reproduce: ATen steps from both ends); randperm, drawn from the CPU's generator, as wse's
    random ops are (it ran as a counted fallback: a step shuffling on the device had one)."""
    @state.recorder
    def run(*args, dtype=None, layout=None, device=None, pin_memory=None, **kwargs):
        from .fallback import _upload
        check_index(device)
        return _upload(op(*args, dtype=dtype, **kwargs))
    return run


@state.recorder
def _zeros(size, dtype=None, layout=None, device=None, pin_memory=None):
    # _efficientzerotensor (autograd's zero gradients, e.g. sgn's): ordinary zeros on wse.
    check_index(device)
    return empty_tensor(size, dtype)


@state.recorder
def _copy_from(src, dst, non_blocking=False):
    # Reached instead of __torch_dispatch__ where PyTorch excludes the Python key while it
    # copies into a new device tensor: torch.tensor(data, device="wse"), torch.as_tensor.
    from .dispatch import SPECIAL
    if type(dst) is torch.Tensor and isinstance(src, torch.Tensor) and src.is_cpu:
        shell = _SHELLS.get(dst.untyped_storage().data_ptr())
        host = shell[0]() if shell is not None else None
        if host is not None:
            _fill_shell(host, shell[1], src, dst, SPECIAL[torch.ops.aten.copy_.default])
            return dst
    return SPECIAL[torch.ops.aten.copy_.default](None, (dst, src), {})


def _fill_shell(host, uploaded: dict, src, dst, copy_) -> None:
    """torch.load of a legacy-format file rebuilds its tensors on the storages _restore_on_wse
    makes first (uploading the bytes they hold then) and reads each storage's bytes afterwards,
    by a copy into a tensor over it (another Python object over the same memory): the bytes go
    to the host copy, and each upload of it (one per dtype) takes them too."""
    torch.empty((0,), dtype=dst.dtype, device="cpu").set_(
        host, dst.storage_offset(), dst.size(), dst.stride()).copy_(src)
    for dtype, flat in uploaded.items():
        copy_(None, (flat, torch.empty((0,), dtype=dtype, device="cpu").set_(host)), {})


@state.recorder
def _local_scalar_dense(t):
    # Reached the same way for each element of torch.tensor([wse 0-d tensors]) (a list of
    # losses): it reads the numbers, as .item() does.
    from .dispatch import SPECIAL
    return SPECIAL[torch.ops.aten._local_scalar_dense.default](None, (t,), {})


# Note [Loading onto wse]
# torch.load(f, map_location="wse") moves each saved storage with storage.to("wse"), which needs
# a device allocator that gives memory; lazydev's refuses (Note [The device's C++ side] in
# compile/hooks.py), and without its C++ side PrivateUse1 has none at all (the process
# crashes). PyTorch's own path (storage.to("wse")) stops at torch.UntypedStorage(n,
# device="wse"), which refuses with a message.
# So our deserializer, ahead of PyTorch's generic one, returns a storage that only says "wse":
# the loaded CPU bytes' pointer with device wse, no owner, the CPU storage kept alive beside it.
# Every tensor torch.load rebuilds on it calls set_(storage, offset, size, stride), and
# special.py's _set_storage_ uploads the bytes once per storage and dtype, so tensors saved as
# views of one storage (tied weights) are views of one wse storage again.
_WSE_LOCATION = re.compile(r"wse(:0)?")


def _restore_on_wse(obj, location):
    if not isinstance(location, str) or not _WSE_LOCATION.fullmatch(location):
        return None
    host = obj if obj.device.type == "cpu" else obj.cpu()
    shell = torch._C._construct_storage_from_data_pointer(
        host.data_ptr(), torch.device("wse", 0), host.nbytes())
    shell._lz_host, shell._lz_flat = host, {}
    # By its address as well, for a legacy-format file's bytes (_fill_shell).
    ptr = host.data_ptr()
    ref = weakref.ref(host, lambda r: _SHELLS.get(ptr, (None,))[0] is r and _SHELLS.pop(ptr))
    _SHELLS[ptr] = (ref, shell._lz_flat)
    return shell


_SHELLS: dict = {}      # host address -> (weak reference to the host bytes, their uploads)


# Note [Default dtype]
# The result dtype of int_x * 0.5, int_x / 3 or sqrt(int_x) is torch's default dtype, which the
# meta kernels read. Their specs are kept by the arguments' signatures (trace/meta.py), and so
# are the replay plans (tensor/replay.py): after torch.set_default_dtype(torch.float64), such an
# op recorded before still gave float32. Both are forgotten when the default dtype changes.
def _watch_default_dtype() -> None:
    for name in ("set_default_dtype", "set_default_tensor_type"):
        original = getattr(torch, name)

        def changed(*args, _original=original, **kwargs):
            before = torch.get_default_dtype()
            _original(*args, **kwargs)
            if torch.get_default_dtype() != before:
                from . import replay
                meta.clear()
                replay.clear()
        setattr(torch, name, functools.wraps(original)(changed))


_lib = _autocast = None     # the Library objects: registrations last while they live
_amp_dtypes = [list]        # the dtypes torch.autocast("wse") casts to (register)


def register(amp_dtypes=list) -> None:
    """Register the wse device with torch; `amp_dtypes()` gives the dtypes autocast casts to,
    once its policies are loaded (torch.wse.get_amp_supported_dtype)."""
    global _lib, _autocast
    if _lib is not None:
        return
    _amp_dtypes[0] = amp_dtypes
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend
    _setup_privateuseone_for_python_backend("wse", backend_module=_WseModule())
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("empty.memory_format", _empty_memory_format, "PrivateUse1")
    _lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    _lib.impl("_copy_from", _copy_from, "PrivateUse1")
    _lib.impl("_local_scalar_dense", _local_scalar_dense, "PrivateUse1")
    _lib.impl("_efficientzerotensor", _zeros, "PrivateUse1")
    for name in ("arange", "arange.start", "arange.start_step"):
        _lib.impl(name, _arange, "PrivateUse1")
    for name in ("eye", "eye.m"):
        _lib.impl(name, _eye, "PrivateUse1")
    for name in ("tril_indices", "triu_indices", "kaiser_window", "kaiser_window.periodic",
                 "kaiser_window.beta", "linspace", "logspace", "randperm", "randperm.generator"):
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        _lib.impl(name, _on_host(op), "PrivateUse1")
    # The autograd engine runs a non-CPU device's backward on a worker thread of its own; for
    # wse every backward op is Python recording, so the hand-off to that thread (and the GIL
    # ping-pong with it) is pure cost, about a tenth of a step's tracing. Run backward on the
    # calling thread instead. This is thread-local: it applies to the thread importing lazydev.
    torch._C._set_multithreading_enabled(False)
    # Ops autocast has no policy for run as they are (Note [Autocast on wse] in
    # compile/hooks.py).
    _autocast = torch.library.Library("_", "IMPL")     # fallbacks live in the "_" namespace
    _autocast.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    # Before PyTorch's PrivateUse1 entry (23); wse tensors pickle as CPU tensors, so there is
    # nothing to tag (Note [Loading onto wse]).
    torch.serialization.register_package(15, lambda storage: None, _restore_on_wse)
    _watch_default_dtype()
    from . import ctc, foreach, grads, guards, modules, sparse
    modules.register()      # Note [Parameters leaving wse]
    grads.register()        # Note [Root gradients on another device]
    from .wse_tensor import to_dlpack
    torch.utils.dlpack.to_dlpack = torch.to_dlpack = to_dlpack
    foreach.register()
    sparse.register(_lib)
    ctc.register(_lib)
    guards.register(_lib)
    grads.register_composites(_lib)     # Note [Half-type backward composites]
