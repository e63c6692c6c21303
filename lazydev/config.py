"""User settings. `lazydev.config(log="trace,cache")` or environment variables.

| setting          | environment        | default                      |
|------------------|--------------------|------------------------------|
| log              | LAZYDEV_LOG        | "" (off); channels: trace, cache, fallback, all |
| cache_dir        | LAZYDEV_CACHE_DIR  | $XDG_CACHE_HOME/lazydev or ~/.cache/lazydev |
| disk_cache       | LAZYDEV_CACHE      | True (LAZYDEV_CACHE=0 disables) |
"""
from __future__ import annotations

import os


class Config:
    def __init__(self):
        self.log = set(filter(None, os.environ.get("LAZYDEV_LOG", "").split(",")))
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.cache_dir = os.environ.get("LAZYDEV_CACHE_DIR") or os.path.join(base, "lazydev")
        self.disk_cache = os.environ.get("LAZYDEV_CACHE", "1") != "0"

    def logs(self, channel: str) -> bool:
        return channel in self.log or "all" in self.log

    def __call__(self, log=None, cache_dir=None, disk_cache=None):
        """Change settings; returns the object so settings can be read back."""
        if log is not None:
            self.log = set(filter(None, log.split(","))) if isinstance(log, str) else set(log)
        if cache_dir is not None:
            self.cache_dir = cache_dir
        if disk_cache is not None:
            self.disk_cache = bool(disk_cache)
        return self

    def __repr__(self):
        return (f"lazydev.config(log={','.join(sorted(self.log))!r}, cache_dir={self.cache_dir!r}, "
                f"disk_cache={self.disk_cache})")


config = Config()
