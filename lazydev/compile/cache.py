"""The compile cache: in memory by graph key, on disk by content.

Note [Two keys]
In memory, a program is found by the graph key (trace/ir.py Note [IR keys]) in O(#outputs).
On a memory miss the graph is code-generated (milliseconds) and the shared object is found on
disk by a content key built from named parts: the C source (which carries every shape, dtype and
the codegen's choices), the codegen version, the compiler's identity and flags, the CPU features
`-march=native` targets, and the lazydev version. The source stands in for the graph, so two
graphs that generate the same code share one object.
"""
from __future__ import annotations

import hashlib
import os

from ..config import config
from . import build

CODEGEN_VERSION = "1"


def key_parts(source: str) -> list:
    from .. import __version__
    return [
        ("source", source),
        ("codegen_version", CODEGEN_VERSION),
        ("compiler", build.compiler_identity()),
        ("flags", " ".join(build.FLAGS)),
        ("cpu_features", build.cpu_features()),
        ("lazydev_version", __version__),
    ]


def content_key(source: str) -> str:
    h = hashlib.sha256()
    for name, part in key_parts(source):
        h.update(name.encode())
        h.update(b"\0")
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def so_path(key: str) -> str:
    return os.path.join(config.cache_dir, key[:2], key + ".so")


def load_or_build(source: str, load):
    """(program, built: bool). `load(path)` opens a shared object."""
    key = content_key(source)
    if config.disk_cache:
        path = so_path(key)
        if os.path.exists(path):
            try:
                return load(path), False
            except Exception:
                os.unlink(path)          # unreadable: rebuild it below
        build.build(source, path)
        return load(path), True
    tmp = os.path.join(config.cache_dir, "nocache", key + ".so")
    build.build(source, tmp)
    try:
        return load(tmp), True
    finally:
        os.unlink(tmp)
