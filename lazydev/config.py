"""User settings: `lazydev.config(name=value, ...)`, or environment variables at import.

| setting          | environment              | default |
|------------------|--------------------------|---------|
| log              | LAZYDEV_LOG              | "" (off); channels: trace, cache, fallback, sync, all |
| cache_dir        | LAZYDEV_CACHE_DIR        | $XDG_CACHE_HOME/lazydev or ~/.cache/lazydev |
| disk_cache       | LAZYDEV_CACHE            | True (LAZYDEV_CACHE=0 disables the disk cache) |
| cache_max_bytes  | LAZYDEV_CACHE_MAX_BYTES  | 1 GiB; least-recently-used entries are evicted past it |
| strict_syncs     | LAZYDEV_STRICT_SYNCS     | False; True raises on any sync other than mark_step |
| recompile_warn   |                          | 8 compiles of one graph structure warn (shapes keep changing) |
| recompile_limit  |                          | None; an int raises instead of compiling a structure again |
| trace_warn_ops   |                          | 200_000 ops without a sync warn once (a missing mark_step?) |
| trace_max_ops    |                          | 2_000_000 ops without a sync cut the trace |
| async_exec       | LAZYDEV_ASYNC            | True: mark_step returns once the program is queued (False: once it ran) |
| max_queued_steps |                          | 2: past it, mark_step waits for the oldest queued program |
| buckets          |                          | (8, 16, 32, 64, 128, 256): sizes for lazydev.pad_to_bucket |
"""
from __future__ import annotations

import os

_FIELDS = ("log", "cache_dir", "disk_cache", "cache_max_bytes", "strict_syncs", "recompile_warn",
           "recompile_limit", "trace_warn_ops", "trace_max_ops", "async_exec",
           "max_queued_steps", "buckets")


class Config:
    def __init__(self):
        self.log = _channels(os.environ.get("LAZYDEV_LOG", ""))
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.cache_dir = os.environ.get("LAZYDEV_CACHE_DIR") or os.path.join(base, "lazydev")
        self.disk_cache = os.environ.get("LAZYDEV_CACHE", "1") != "0"
        self.cache_max_bytes = int(os.environ.get("LAZYDEV_CACHE_MAX_BYTES", 1 << 30))
        self.strict_syncs = os.environ.get("LAZYDEV_STRICT_SYNCS", "0") == "1"
        self.recompile_warn = 8
        self.recompile_limit = None
        self.trace_warn_ops = 200_000
        self.trace_max_ops = 2_000_000
        self.async_exec = os.environ.get("LAZYDEV_ASYNC", "1") != "0"
        self.max_queued_steps = 2
        self.buckets = (8, 16, 32, 64, 128, 256)

    def logs(self, channel: str) -> bool:
        return channel in self.log or "all" in self.log

    def __call__(self, **settings):
        """Change settings, e.g. `lazydev.config(log="trace,cache", strict_syncs=True)`.
        Returns the config, so `lazydev.config()` shows the current settings."""
        for name, value in settings.items():
            if name not in _FIELDS:
                raise TypeError(f"lazydev.config has no setting {name!r}; settings: "
                                f"{', '.join(_FIELDS)}")
            setattr(self, name, _channels(value) if name == "log" else value)
        return self

    def __repr__(self):
        parts = [f"{k}={getattr(self, k)!r}" for k in _FIELDS]
        return "lazydev.config(" + ", ".join(parts) + ")"


def _channels(value) -> set:
    if isinstance(value, str):
        return set(filter(None, value.split(",")))
    return set(value or ())


config = Config()
