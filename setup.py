"""Build shim: metadata lives in pyproject.toml; this only adds the two C extensions."""
from setuptools import Extension, setup

setup(
    cffi_modules=["lazydev/runtime/_build.py:ffibuilder"],
    # The IR's node type (Note [Native nodes] in lazydev/trace/ir.py) and recording's hot path
    # (Note [Native recording] in lazydev/tensor/replay.py); stable ABI, like the cffi module.
    ext_modules=[Extension("_lazydev_node", ["csrc/wse_node.c", "csrc/wse_record.c"],
                           depends=["csrc/wse_record.h"], py_limited_api=True)],
)
