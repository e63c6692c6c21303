"""Device-side checks: errors that depend on values, raised without reading them on the host.

Note [Device-side checks]
ATen checks many arguments by value: a gather's indices, a loss's targets, one_hot's classes,
multinomial's probabilities, torch._assert_async's condition. The CPU reads them; on wse a read
is a sync, which would cut every step's trace at each such op. So the check is a CHECK node
instead: elementwise, its value is its first source, and computing it fails the program where
its second source (bool) is true, with errinfo = (third source there, the flat position, check
id). The program stops and the sync that ran it raises the error the CPU would have raised, as
a CUDA device-side assert surfaces at the next synchronising call; the storages it would have
written keep their old values (trace/sync.py). A check whose value nothing reads is not run,
so one that guards no result (an assert) is kept alive by the trace until the next sync.

The check id is a hash of the error's text, the same in every process (the disk cache keys by
the generated source, which holds it), and _ERRORS maps it back to the error; tracing the op
registers it before any program holding it can run.
"""
from __future__ import annotations

import zlib
from typing import Callable

import torch

from .build import cast, const, ew, expand
from .ir import Node, Op
from .state import Storage, current

ERR_CHECK = 3           # the program's error code when a CHECK fails (WSE_ERR_CHECK, wse_prefix.h)

# check id -> f(value shown, flat position) -> the exception to raise
_ERRORS: dict[int, Callable[[int, int], Exception]] = {}


def check_id(name: str, error: Callable[[int, int], Exception]) -> int:
    """The id of the check `name` (any text naming the error exactly), registering `error`."""
    cid = zlib.crc32(name.encode()) & 0x7FFFFFFF
    _ERRORS[cid] = error
    return cid


def message(kind: type, template: str) -> int:
    """The id of a check raising kind(template), formatted with {value} (the value shown) and
    {index} (the flat position of the first failure found)."""
    return check_id(f"{kind.__name__}: {template}",
                    lambda value, index: kind(template.format(value=value, index=index)))


def checked(value: Node, bad: Node, shown: Node, cid: int) -> Node:
    """`value`, failing the program where `bad` is true (Note [Device-side checks])."""
    srcs = (value, bad, cast(shown, torch.int64))
    srcs = tuple(s if not s.shape else expand(s, value.shape) for s in srcs)
    return Node(Op.CHECK, value.dtype, value.shape, srcs, cid)


def keep(bad: Node, shown: Node, cid: int) -> None:
    """A check that guards no result: run at the next sync whatever is read."""
    node = checked(bad, bad, shown, cid)
    current().keep.append(Storage(node.numel, torch.bool, node=node))


def compare(x: Node, op: Op, number) -> Node:
    """`x op number` elementwise (Op.LT, Op.NE, ...), the number a compile-time constant."""
    return ew(op, torch.bool, x.shape, x, const(number, x.dtype))


def in_range(index: Node, size: int, cid: int, low: int = 0, allowed=None) -> Node:
    """`index`, failing where it is outside [low, size) and not equal to `allowed`. A check
    already made on the same node in this trace is made once: a loss checks its targets in
    the forward and again in the backward, 35-65 µs of recording each time (the key holds the
    node, so its id is not reused while the trace lives)."""
    key = (id(index), size, cid, low, allowed)
    made = current().ranges.get(key)
    if made is not None:
        return made[1]
    bad = ew(Op.OR, torch.bool, index.shape, compare(index, Op.LT, low),
             compare(index, Op.GE, size))
    if allowed is not None:
        bad = ew(Op.AND, torch.bool, index.shape, bad, compare(index, Op.NE, allowed))
    node = checked(index, bad, index, cid)
    current().ranges[key] = (index, node)
    return node


def bounded(index: Node, op: Op, bound: int, cid: int) -> Node:
    """`index`, failing where `index op bound` (Op.LT, Op.GE, ...) holds."""
    return checked(index, compare(index, op, bound), index, cid)


def element(x: Node, k: int) -> Node:
    """Element k of x (in row-major order), as a 0-dim node."""
    return Node(Op.AS_STRIDED, x.dtype, (), (x,), ((), k))


def wrapped(index: Node, size: int) -> Node:
    """A checked index in [-size, size) as Python wraps it, into [0, size)."""
    shifted = ew(Op.ADD, index.dtype, index.shape, index, const(size, index.dtype))
    return ew(Op.WHERE, index.dtype, index.shape, compare(index, Op.LT, 0), shifted, index)


def error(errinfo) -> Exception:
    """The exception for a program that failed a check, errinfo = (value, position, id)."""
    make = _ERRORS.get(errinfo[2])
    if make is None:
        return RuntimeError(f"a wse device-side check failed (errinfo={list(errinfo)})")
    return make(errinfo[0], errinfo[1])


def _register() -> None:
    from ..runtime import device
    device.ERROR_DECODERS[ERR_CHECK] = error


_register()
