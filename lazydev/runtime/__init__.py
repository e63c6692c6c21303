"""lazydev.runtime: device memory and compiled-program execution for "wse".

Re-exports lazydev.runtime.device, the only module that talks to the C
runtime (`_lazydev_wse`).
"""

from .device import (
    Buffer,
    BufferWindow,
    DeviceOutOfMemoryError,
    Program,
    autocast_source,
    blas_library_path,
    empty_cache,
    gemm_library_path,
    hooks_source,
    install_hooks,
    load_torch_library,
    memory_stats,
    on_pressure,
    prefix_source,
    reset_peak,
    set_capacity,
    special_source,
    tensor_maker,
)

__all__ = [
    "Buffer", "BufferWindow", "DeviceOutOfMemoryError", "Program", "autocast_source", "blas_library_path",
    "empty_cache", "gemm_library_path", "hooks_source", "install_hooks", "load_torch_library",
    "memory_stats", "on_pressure", "prefix_source", "reset_peak", "set_capacity", "special_source",
    "tensor_maker",
]
