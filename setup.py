"""Build shim: metadata lives in pyproject.toml; this only adds the two C extensions."""
from setuptools import Extension, setup

setup(
    cffi_modules=["lazydev/runtime/_build.py:ffibuilder"],
    # The IR's node type (Note [Native nodes] in lazydev/trace/ir.py); stable ABI, like the
    # cffi module.
    ext_modules=[Extension("_lazydev_node", ["csrc/wse_node.c"], py_limited_api=True)],
)
