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

Switches read from the environment take 1/0, true/false, yes/no or on/off; other values raise.
"""
from __future__ import annotations

import os

_CHANNELS = {"trace", "cache", "fallback", "sync", "all"}


def _int_from(low: int):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_bool(v) -> bool:
    return isinstance(v, bool)


def _is_channels(v) -> bool:
    return isinstance(v, (str, list, tuple, set, frozenset)) and _channels(v) <= _CHANNELS


# setting -> (whether a value is valid, what the setting takes): a bad value is refused where
# it is set, not met later as a TypeError deep inside a compile or a sync.
_RULES = {
    "log": (_is_channels, "log channels, from trace, cache, fallback, sync, all (a "
            "comma-separated string or a collection)"),
    "cache_dir": (lambda v: isinstance(v, (str, os.PathLike)), "a directory path"),
    "disk_cache": (_is_bool, "True or False"),
    "cache_max_bytes": (_int_from(0), "a number of bytes (an int, 0 or more)"),
    "strict_syncs": (_is_bool, "True or False"),
    "recompile_warn": (_int_from(1), "an int, 1 or more"),
    "recompile_limit": (lambda v: v is None or _int_from(1)(v), "None or an int, 1 or more"),
    "trace_warn_ops": (_int_from(1), "an int, 1 or more"),
    "trace_max_ops": (_int_from(1), "an int, 1 or more"),
    "async_exec": (_is_bool, "True or False"),
    "max_queued_steps": (_int_from(0), "an int, 0 or more"),
    "buckets": (lambda v: isinstance(v, (list, tuple)) and len(v) > 0
                and all(_int_from(1)(b) for b in v), "a non-empty list of ints, 1 or more"),
}
_FIELDS = tuple(_RULES)


def checked(name: str, value, where: str):
    """`value` if `name` takes it; else a ValueError that shows `where` it was set from."""
    valid, takes = _RULES[name]
    if not valid(value):
        raise ValueError(f"{where.format(value)}: {name} takes {takes}")
    return value


# Called with a setting's name when lazydev.config changes it, by the modules that keep what
# they derive from it (the current trace's runaway-guard threshold, trace/state.py).
_WATCHERS: list = []


def watch(fn) -> None:
    _WATCHERS.append(fn)


class Config:
    def __init__(self):
        self.log = _channels(checked("log", os.environ.get("LAZYDEV_LOG", ""),
                                      "LAZYDEV_LOG={!r}"))
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.cache_dir = os.environ.get("LAZYDEV_CACHE_DIR") or os.path.join(base, "lazydev")
        self.disk_cache = _env_bool("LAZYDEV_CACHE", True)
        self.cache_max_bytes = _env_int("LAZYDEV_CACHE_MAX_BYTES", "cache_max_bytes", 1 << 30)
        self.strict_syncs = _env_bool("LAZYDEV_STRICT_SYNCS", False)
        self.recompile_warn = 8
        self.recompile_limit = None
        self.trace_warn_ops = 200_000
        self.trace_max_ops = 2_000_000
        self.async_exec = _env_bool("LAZYDEV_ASYNC", True)
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
            checked(name, value, f"lazydev.config({name}={{!r}})")
            setattr(self, name, _channels(value) if name == "log" else value)
            for watcher in _WATCHERS:
                watcher(name)
        return self

    def __repr__(self):
        parts = [f"{k}={getattr(self, k)!r}" for k in _FIELDS]
        return "lazydev.config(" + ", ".join(parts) + ")"


def _env_int(var: str, name: str, default: int) -> int:
    """Environment variable `var`, an int for setting `name`, or `default` when unset."""
    text = os.environ.get(var)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = text                # refused below, shown as the user wrote it
    return checked(name, value, var + "={!r}")


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _env_bool(var: str, default: bool) -> bool:
    """A switch from the environment: 1/true/yes/on or 0/false/no/off (LAZYDEV_CACHE=no was
    read as "not 0", and left the cache on)."""
    text = os.environ.get(var)
    word = (text or "").strip().lower()
    if not word:
        return default
    if word in _TRUE + _FALSE:
        return word in _TRUE
    raise ValueError(f"{var}={text!r}: takes 1 or 0 (also true/false, yes/no, on/off)")


def _channels(value) -> set:
    if isinstance(value, str):
        return set(filter(None, value.split(",")))
    return set(value or ())


config = Config()
