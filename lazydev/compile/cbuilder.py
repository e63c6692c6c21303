"""A small C code builder: lines, indentation blocks, and CSE-named temporaries."""
from __future__ import annotations

import contextlib


class CBuilder:
    def __init__(self):
        self.lines: list[str] = []
        self._indent = 0
        self._scopes: list[dict] = [{}]
        self._n = 0

    def line(self, text: str = "") -> None:
        self.lines.append("  " * self._indent + text if text else "")

    @contextlib.contextmanager
    def block(self, head: str, tail: str = "}"):
        """`head {` ... `}`; temporaries named inside are not visible after it."""
        self.line(head + " {")
        self._indent += 1
        self._scopes.append({})
        try:
            yield
        finally:
            self._scopes.pop()
            self._indent -= 1
            self.line(tail)

    def fresh(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def lookup(self, key):
        for scope in reversed(self._scopes):
            if key in scope:
                return scope[key]
        return None

    def remember(self, key, name: str) -> None:
        self._scopes[-1][key] = name

    def temp(self, ctype: str, expr: str, key=None, prefix: str = "t") -> str:
        """Bind `expr` to a const temporary (reused for the same key in the same scope)."""
        key = ("expr", ctype, expr) if key is None else key
        found = self.lookup(key)
        if found is not None:
            return found
        if _is_atom(expr):
            return expr
        name = self.fresh(prefix)
        self.line(f"const {ctype} {name} = {expr};")
        self.remember(key, name)
        return name

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _is_atom(expr: str) -> bool:
    return expr.isidentifier() or expr.lstrip("-").replace(".", "", 1).isdigit()
