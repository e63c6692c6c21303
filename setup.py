"""Build shim: metadata lives in pyproject.toml; this only adds the cffi extension."""
from setuptools import setup

setup(cffi_modules=["lazydev/runtime/_build.py:ffibuilder"])
