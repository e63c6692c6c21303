"""Affine index algebra: the flat index of a loop nest split back into coordinates without a
division or modulo per element, where the loop bounds prove it exact.

Note [Affine indices]
A view read in a loop body turns the loop's position into a source position with `/` and `%`
(codegen.py, Note [Index expressions]): a bias broadcast over rows reads
`p[(o * 1024 + j) % 1024]`, an attention head transpose `((f / 64) % 4)`. Written out, those keep
gcc from vectorising the loop at all ("data ref analysis failed"), and an erf or exp in it is then
a scalar libm call per element. But the loop variables have known ranges, so most of these
reduce exactly: with j in [0, 1023], `(o * 1024 + j) % 1024` is `j`.

Index expressions built by the emitter are tracked as affine sums `c0 + sum(c_i * v_i)` over
atoms v_i: loop variables (ranges from their loop heads) and opaque temporaries with a proven
range. For a divisor d, terms whose coefficient is a multiple of d go to the quotient; the rest
must provably lie in [0, d) (or, for one term c*v with c | d, the others in [0, c)), and then

    (D + c*v + R) / d == D / d + v / (d / c)        (D + c*v + R) % d == c * (v % (d / c)) + R

Every fact used is a bound derived from loop ranges, never an assumption about the data, so a
simplified index equals the unsimplified one whenever the unsimplified one does not overflow.
"""
from __future__ import annotations

import contextlib
import re

_NAME = re.compile(r"^[A-Za-z_]\w*$")
_INT = re.compile(r"^-?\d+$")


def _split_top(expr: str, ops: tuple) -> list:
    """[(sign, text)] of `expr` split at the binary operators `ops` outside parentheses."""
    out, depth, start, sign = [], 0, 0, "+"
    for i, ch in enumerate(expr):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in ops and expr[i - 1:i] == " " and expr[i + 1:i + 2] == " ":
            out.append((sign, expr[start:i - 1].strip()))
            sign, start = ch, i + 2
    out.append((sign, expr[start:].strip()))
    return out


def _unwrap(expr: str) -> str:
    """`expr` without one pair of parentheses around all of it."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for i, ch in enumerate(expr):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and i < len(expr) - 1:
            return expr            # "(a) * (b)": the first parenthesis closes early
    return expr[1:-1]


class Affine:
    """c0 + sum(coef * name): terms is a tuple of (name, coef) with nonzero coefs, sorted."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: dict | tuple = (), const: int = 0):
        items = terms.items() if isinstance(terms, dict) else terms
        self.terms = tuple(sorted((n, c) for n, c in items if c))
        self.const = const

    def plus(self, other: "Affine") -> "Affine":
        acc = dict(self.terms)
        for n, c in other.terms:
            acc[n] = acc.get(n, 0) + c
        return Affine(acc, self.const + other.const)

    def scaled(self, k: int) -> "Affine":
        return Affine({n: c * k for n, c in self.terms}, self.const * k)

    def c(self) -> str:
        parts = [(c < 0, n if abs(c) == 1 else f"{n} * {abs(c)}") for n, c in self.terms]
        if self.const or not parts:
            parts.append((self.const < 0, str(abs(self.const))))
        text = ("-" if parts[0][0] else "") + parts[0][1]
        return text + "".join((" - " if neg else " + ") + p for neg, p in parts[1:])


class IndexAlgebra:
    """What an emitter knows about its int64 index names: ranges and affine values."""

    def __init__(self, bind):
        self.bind = bind               # (C expression) -> name of a const int64_t temporary
        self.ranges: dict = {}         # name -> (lo, hi), inclusive
        self.values: dict = {}         # temporary name -> Affine over atoms in `ranges`
        self.pairs: dict = {}          # (name of v / m, name of v % m) -> (v, m)

    # -- facts ----------------------------------------------------------------------------------
    def set_range(self, name: str, lo: int, hi: int):
        """Declare a loop variable's range; returns the previous entry, for restore()."""
        prev = self.ranges.get(name)
        self.ranges[name] = (lo, hi)
        return prev

    def restore(self, name: str, prev) -> None:
        if prev is None:
            self.ranges.pop(name, None)
        else:
            self.ranges[name] = prev

    @contextlib.contextmanager
    def narrowed(self, name: str, lo: int, hi: int):
        """Within a branch taken only for lo <= name <= hi (a concatenation's piece), when
        `name` is a loop variable or a temporary with a range."""
        prev = self.ranges.get(name)
        if prev is None:
            yield
            return
        self.ranges[name] = (max(lo, prev[0]), min(hi, prev[1]))
        try:
            yield
        finally:
            self.ranges[name] = prev

    def learn(self, name: str, expr: str) -> None:
        """Remember the value of temporary `name` = `expr`, if it is affine in known atoms."""
        if name not in self.ranges and name not in self.values:
            a = self.parse(expr)
            if a is not None:
                self.values[name] = a

    def parse(self, expr: str) -> Affine | None:
        """An index expression built of names, integers, `+`, `-`, `*` by an integer, and
        parentheses; None for anything else (a division, a load, an unknown name)."""
        expr = _unwrap(expr.strip())
        parts = _split_top(expr, ("+", "-"))
        if len(parts) > 1:
            total = Affine()
            for sign, text in parts:
                a = self.parse(text)
                if a is None:
                    return None
                total = total.plus(a if sign == "+" else a.scaled(-1))
            return self._fold_pairs(total)
        if expr.startswith("-") and not _INT.match(expr):
            a = self.parse(expr[1:])
            return None if a is None else a.scaled(-1)
        factors = [text for _, text in _split_top(expr, ("*",))]
        coef, atom = 1, None
        for f in factors:
            if _INT.match(f):
                coef *= int(f)
            elif atom is not None:
                return None
            elif _NAME.match(f):
                atom = self._atom(f)
            elif f.startswith("(") and len(factors) > 1:
                atom = self.parse(f)
            else:
                return None
            if atom is None and not _INT.match(f):
                return None
        return Affine((), coef) if atom is None else atom.scaled(coef)

    def _fold_pairs(self, a: Affine) -> Affine:
        """m * (v / m) + (v % m) is v: a coordinate split and joined again (a reshape of a
        reshape) costs nothing."""
        terms = dict(a.terms)
        for (q, r), (v, m) in self.pairs.items():
            c = terms.get(r)
            if c and terms.get(q) == c * m:
                del terms[q], terms[r]
                terms[v] = terms.get(v, 0) + c
        return Affine(terms, a.const) if len(terms) != len(a.terms) else a

    def _atom(self, name: str) -> Affine | None:
        if name in self.values:
            return self.values[name]
        if name in self.ranges:
            return Affine({name: 1})
        return None

    def bounds(self, a: Affine) -> tuple[int, int] | None:
        lo = hi = a.const
        for n, c in a.terms:
            r = self.ranges.get(n)
            if r is None:
                return None
            lo, hi = lo + min(c * r[0], c * r[1]), hi + max(c * r[0], c * r[1])
        return lo, hi

    # -- division -------------------------------------------------------------------------------
    def divmod(self, a: Affine, d: int) -> tuple[Affine, Affine] | None:
        """(a // d, a % d) as affine values, when the ranges prove the split exact (a >= 0)."""
        if d <= 0:          # a zero-size dim's stride or size: nothing to simplify
            return None
        whole = Affine({n: c // d for n, c in a.terms if c % d == 0})
        rest = Affine(tuple((n, c) for n, c in a.terms if c % d), a.const)
        b = self.bounds(rest)
        if b is not None and 0 <= b[0] and b[1] < d:
            return whole, rest
        rest = self._absorb_offset(rest)
        for n, c in sorted(rest.terms, key=lambda t: -t[1]):
            if c <= 0 or d % c:
                continue
            others = Affine(tuple(t for t in rest.terms if t[0] != n), rest.const)
            ob = self.bounds(others)
            if ob is None or ob[0] < 0 or ob[1] >= c:
                continue
            m = d // c
            vq, vr = self._split_atom(n, m)
            return whole.plus(vq), vr.scaled(c).plus(others)
        return None

    def _absorb_offset(self, a: Affine) -> Affine:
        """c * v + k with c | k (a concatenation's piece read at v - 512) as c * u, u = v + k / c
        a new atom, when u >= 0: the division rule then applies to u."""
        if len(a.terms) != 1 or not a.const:
            return a
        (n, c), = a.terms
        r = self.ranges.get(n)
        if c <= 0 or a.const % c or r is None or r[0] + a.const // c < 0:
            return a
        k = a.const // c
        u = self.bind(Affine({n: 1}, k).c())
        self.ranges.setdefault(u, (r[0] + k, r[1] + k))
        return Affine({u: c})

    def _split_atom(self, name: str, m: int) -> tuple[Affine, Affine]:
        """(v // m, v % m) for one atom v >= 0: v itself when its range is below m, else new
        opaque temporaries with the ranges that division gives them."""
        lo, hi = self.ranges[name]
        if lo >= 0 and hi < m:
            return Affine(), Affine({name: 1})
        q = self.bind(f"{name} / {m}")
        r = self.bind(f"{name} % {m}")
        self.ranges.setdefault(q, (lo // m, hi // m))
        self.ranges.setdefault(r, (0, min(m - 1, hi)))
        self.pairs[(q, r)] = (name, m)
        return Affine({q: 1}), Affine({r: 1})

    def coordinate(self, flat: str, stride: int, size: int | None) -> str | None:
        """C text for (flat / stride) % size (no modulo when size is None), simplified; None
        when the ranges do not prove a simplification."""
        a = self.parse(flat)
        if a is None or (b := self.bounds(a)) is None or b[0] < 0:
            return None
        q = a if stride == 1 else (self.divmod(a, stride) or (None,))[0]
        if q is None:
            return None
        if size is not None:
            split = self.divmod(q, size)
            if split is None:
                return None
            q = split[1]
        return q.c()
