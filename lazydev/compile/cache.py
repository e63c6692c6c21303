"""The compile cache: in memory by graph key, on disk by content.

Note [Two keys]
In memory, a program is found by the graph key (trace/ir.py Note [IR keys]) in O(#outputs).
On a memory miss the graph is code-generated (milliseconds) and the shared object is found on
disk by a content key built from named parts: the C source (which carries every shape, dtype, the
runtime's prefix header, the special-function header where used, and the codegen's choices), the
codegen version, the compiler's identity and flags, the CPU features `-march=native` targets, and
the lazydev version. The source stands in for the graph, so two graphs that generate the same
code share one object.

Note [Disk entries]
An entry is `<dir>/<k[:2]>/<k>.so` plus `<k>.json` (sha256 and size of the .so, when it was
built, the compile command, graph summary). Both are written to temporary files and renamed into
place, so a reader sees a whole file or none, and two processes building the same key at once
both succeed (the second rename wins; the contents are equivalent). An entry whose .so does not
match its recorded hash (truncated, corrupted) is reported, deleted and rebuilt, never loaded.
The directory is bounded: after a write, least-recently-used entries are evicted past the cap.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
import time
import warnings
import weakref

from ..config import config
from . import build

CODEGEN_VERSION = "1"


class CacheCorruptionWarning(UserWarning):
    pass


def key_parts(source) -> list:
    from .. import __version__
    return [
        ("source", "\n/* unit */\n".join(source)),
        ("codegen_version", CODEGEN_VERSION),
        ("compiler", build.compiler_identity()),
        ("flags", " ".join(build.FLAGS)),
        ("cpu_features", build.cpu_features()),
        ("lazydev_version", __version__),
    ]


def content_key(source) -> str:
    return digest(key_parts(source))


def digest(parts: list) -> str:
    """sha256 of named (name, text) parts: what a cached build's key is made of."""
    h = hashlib.sha256()
    for name, part in parts:
        h.update(name.encode())
        h.update(b"\0")
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def so_path(key: str) -> str:
    return os.path.join(config.cache_dir, key[:2], key + ".so")


def file_sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_atomic(path: str, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        # (a failed publish, the path a directory, left the temporary file for good: the
        # cache's eviction counts .so files only)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _json_object(path: str) -> dict | None:
    """The JSON object in file `path`, or None: missing, unreadable, not JSON, or JSON that is
    not an object (a cache's file written over by something else: `null` raised TypeError)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _valid(path: str) -> bool:
    """The entry's .so matches its recorded hash; warns and deletes a bad entry."""
    meta = _json_object(path[:-3] + ".json") or {}
    try:
        ok = os.path.getsize(path) == meta.get("size") and file_sha(path) == meta.get("sha256")
    except OSError:
        ok = False
    if not ok:
        warnings.warn(f"lazydev: compile cache entry {os.path.basename(path)} is truncated or "
                      "corrupt; it is removed and rebuilt", CacheCorruptionWarning, stacklevel=2)
        _remove(path)
    return ok


# path -> (inode, weak reference to the program) of shared objects this process has open
_loaded: dict = {}


def _open(path: str, load):
    """dlopen caches by path: a file replaced at a path this process already opened would come
    back as the old mapping (a truncated one faults). A new inode is opened under its own name,
    unless the old program was unloaded since (compile.PROGRAMS_KEPT)."""
    inode = os.stat(path).st_ino
    seen = _loaded.get(path)
    open_now = seen[1]() if seen is not None else None
    if open_now is not None and seen[0] == inode:
        return open_now
    target = path
    if open_now is not None:
        target = os.path.join(build.scratch_dir(), os.path.basename(path))
        _copy(path, target)
    program = load(target)
    _loaded[path] = (inode, weakref.ref(program))
    return program


def _copy(src: str, dst: str) -> None:
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data)


def load_or_build(source: list, load, summary: dict | None = None):
    """(program, built: bool). `load(path)` opens a shared object."""
    key = content_key(source)
    if not config.disk_cache:
        return _build_private(source, key, load), True
    try:
        return _load_or_build_on_disk(source, key, load, summary or {})
    except OSError as e:            # Note [An unusable cache directory]
        if isinstance(e, FileNotFoundError) and os.path.isdir(config.cache_dir):
            raise
        warnings.warn(f"lazydev: the compile cache directory {config.cache_dir} cannot be used "
                      f"({type(e).__name__}: {e}); building without the disk cache. Set "
                      "LAZYDEV_CACHE_DIR to a writable directory with free space, or "
                      "LAZYDEV_CACHE=0.", RuntimeWarning, stacklevel=2)
        return _build_private(source, key, load), True


# Note [An unusable cache directory]
# A cache directory that cannot be written (a path through a file, no permission, a full disk)
# made every compile raise the OSError, and the step's values were lost with it. The program is
# built in the temporary directory instead, as with LAZYDEV_CACHE=0, with a warning.
# An entry another process evicts between our finding it and opening it is a miss, and one it
# evicts between our publishing it and opening it is opened from a private build: the cache is
# shared, and the other process's cap may be smaller than one entry.


def _build_private(source: list, key: str, load):
    tmp = os.path.join(tempfile.gettempdir(), f"lazydev-{os.getpid()}-{key}.so")
    build.build(source, tmp)
    try:
        return load(tmp)
    finally:
        os.unlink(tmp)


def _load_or_build_on_disk(source: list, key: str, load, summary: dict):
    path = so_path(key)
    try:
        if os.path.exists(path) and _valid(path):
            _touch(path)
            return _open(path, load), False
    except FileNotFoundError:               # evicted by another process meanwhile: a miss
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    part = f"{path}.{os.getpid()}.part"     # per process: two builders never share a file
    build.build(source, part)
    size = _record_and_publish(path, part, summary)
    try:
        program = _open(path, load)
    except FileNotFoundError:               # another process evicted it already
        program = _build_private(source, key, load)
    _evict_after_build(size, keep=path)     # never the entry just built, if over the cap alone
    return program, True


def _touch(path: str) -> None:
    """LRU: an entry's mtime is its last use. A cache that cannot be written (a shared, prebuilt
    one mounted read-only) is still read: its hits were rebuilt, one warning each."""
    try:
        os.utime(path)
    except PermissionError:
        pass
    except OSError as e:
        if e.errno != errno.EROFS:
            raise


def _record_and_publish(path: str, part: str, summary: dict) -> int:
    # The json describes the .so about to appear; write it first so a reader never finds a
    # .so without its checksum (it would take it for corrupt and rebuild: safe, only slower).
    meta = dict(summary, sha256=file_sha(part), size=os.path.getsize(part), built=time.time(),
                command=" ".join(build.command("<source>.c", os.path.basename(path))))
    write_atomic(path[:-3] + ".json", json.dumps(meta).encode())
    os.replace(part, path)
    return meta["size"]


def _files():
    """(path, bytes, last use) of every entry's .so, from directory entries and stat alone."""
    root = config.cache_dir
    if not os.path.isdir(root):
        return
    for sub in sorted(os.scandir(root), key=lambda d: d.name):
        if len(sub.name) != 2 or not sub.is_dir():
            continue
        for f in os.scandir(sub.path):
            if f.name.endswith(".so"):
                try:
                    st = f.stat()
                except OSError:          # evicted by another process meanwhile
                    continue
                yield f.path, st.st_size, st.st_mtime


def entries() -> list[dict]:
    """Every entry on disk: key, path, size, last use, and its recorded summary."""
    out = []
    for path, size, used in _files():
        meta = _json_object(path[:-3] + ".json") or {}
        key = os.path.basename(path)[:-3]
        out.append(dict(meta, key=key, path=path, bytes=size, used=used))
    return out


# Note [Eviction cost]
# Every build checks the cache's size against its cap. Reading every entry's summary for that
# took 0.52 s per compile with a user's cache of 9780 entries (a stat-only scan, 57 ms), so a
# process scans once, at its first build, and then adds what it builds to that total, scanning
# again only once the total passes the cap. Other processes' builds are not counted until then:
# the cap is approximate, never a reason to build more slowly.
_scanned = {"dir": None, "bytes": 0}


def _evict_after_build(size: int, keep: str) -> None:
    cap = config.cache_max_bytes
    if _scanned["dir"] == config.cache_dir and _scanned["bytes"] + size <= cap:
        _scanned["bytes"] += size
        return
    _scanned.update(dir=config.cache_dir, bytes=_evict(cap, keep)[1])


def _evict(cap: int, keep: str | None = None) -> tuple[int, int]:
    """(entries removed, bytes left): least-recently-used entries but `keep` go until the cache
    is under `cap` bytes. One scan of the cache."""
    files = list(_files())
    total = sum(f[1] for f in files)
    items = sorted((f for f in files if f[0] != keep), key=lambda f: f[2])
    removed = 0
    while items and total > cap:
        path, size, _ = items.pop(0)
        _remove(path)
        total -= size
        removed += 1
    return removed, total


def _remove(path: str) -> None:
    for p in (path, path[:-3] + ".json"):
        try:
            os.unlink(p)
        except FileNotFoundError:       # removed by another process meanwhile
            pass


def evict(cap: int | None = None) -> int:
    """Remove least-recently-used entries until the cache is under `cap` bytes."""
    return _evict(config.cache_max_bytes if cap is None else cap)[0]


def clear(prefix: str | None = None) -> int:
    """Remove every entry, or those whose key starts with `prefix`; returns how many."""
    if prefix is None:
        return evict(cap=0)
    found = [e["path"] for e in entries() if e["key"].startswith(prefix)]
    for path in found:
        _remove(path)
    return len(found)


def stats_path() -> str:
    return os.path.join(config.cache_dir, "stats.json")


def persist_stats(hits: int, misses: int, disk_hits: int) -> None:
    """Add this process's counts to the totals kept in the cache directory."""
    if not config.disk_cache or not (hits or misses or disk_hits):
        return
    os.makedirs(config.cache_dir, exist_ok=True)
    import fcntl
    with open(stats_path() + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        totals = persisted_stats()
        for k, v in (("memory_hits", hits), ("compilations", misses), ("disk_hits", disk_hits),
                     ("processes", 1)):
            old = totals.get(k)
            totals[k] = (old if type(old) is int else 0) + v
        write_atomic(stats_path(), json.dumps(totals).encode())


def persisted_stats() -> dict:
    return _json_object(stats_path()) or {}
