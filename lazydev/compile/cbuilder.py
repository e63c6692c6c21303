"""A small C code builder: lines, indentation blocks, and CSE-named temporaries."""
from __future__ import annotations

import contextlib
import re

# Note [Hoisted lines]
# Inside `hoisting()`, a temporary or line that uses nothing a loop defines goes before that loop
# (and before any loop around it that defines nothing it uses): a gather's index, loaded and
# bounds-checked once per row instead of once per element. The check's branch inside the row
# loop kept gcc from vectorising it (the transformer's embedding lookup: 213 us for 1024 x 256).
# Only loops with at least one iteration are left (a check hoisted out of an empty loop would
# fire when the original never ran), and only lines whose every name the builder knows: loop
# variables and temporaries, kernel pointers, calls, C types and constants. A name declared by a
# plain line (an accumulator) is unknown, so a line using it stays where it is.
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")   # not a literal's suffix (1.0f)
_KNOWN = {"float", "double", "int64_t", "uint64_t", "int32_t", "uint32_t", "int16_t", "uint16_t",
          "int8_t", "uint8_t", "bool", "int", "char", "const", "INFINITY", "NAN", "true", "false",
          "if", "S", "err", "errinfo"}
_POINTER = re.compile(r"p\d+$")


class _Scope:
    __slots__ = ("keys", "names", "start", "indent", "loop")

    def __init__(self, start: int, indent: int, loop: bool, names=()):
        self.keys: dict = {}            # CSE key -> temporary
        self.names = set(names)         # loop variable and temporaries defined here
        self.start = start              # index of the block's first line (a pragma before it)
        self.indent = indent
        self.loop = loop                # a loop that runs at least once: lines may leave it


class CBuilder:
    def __init__(self):
        self.lines: list[str] = []
        self._indent = 0
        self._scopes: list[_Scope] = [_Scope(0, 0, False)]
        self._n = 0
        self._hoist = 0
        self._marks: list = []          # open marks: [line index], moved by hoisted lines

    def line(self, text: str = "") -> None:
        if self._hoist and text:
            self._place(text)
            return
        self.lines.append("  " * self._indent + text if text else "")

    @contextlib.contextmanager
    def block(self, head: str, tail: str = "}", loop_var: str | None = None):
        """`head {` ... `}`; temporaries named inside are not visible after it. `loop_var`: the
        block is a loop over it that runs at least once (Note [Hoisted lines]). Nothing moves
        out of a block opened while hoisting: it may be conditional, and it stays whole."""
        start = len(self.lines)
        while start and self.lines[start - 1].lstrip().startswith("#pragma"):
            start -= 1
        hoist, self._hoist = self._hoist, 0
        self.line(head + " {")
        self._indent += 1
        self._scopes.append(_Scope(start, self._indent, loop_var is not None and not hoist,
                                   () if loop_var is None else (loop_var,)))
        try:
            yield
        finally:
            self._scopes.pop()
            self._indent -= 1
            self.line(tail)
            self._hoist = hoist

    @contextlib.contextmanager
    def hoisting(self):
        """Temporaries and lines made inside go before every loop they do not depend on."""
        self._hoist += 1
        try:
            yield
        finally:
            self._hoist -= 1

    def fresh(self, prefix: str = "t") -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def lookup(self, key):
        for scope in reversed(self._scopes):
            if key in scope.keys:
                return scope.keys[key]
        return None

    def remember(self, key, name: str) -> None:
        self._scopes[-1].keys[key] = name

    def temp(self, ctype: str, expr: str, key=None, prefix: str = "t") -> str:
        """Bind `expr` to a const temporary (reused for the same key in the same scope)."""
        key = ("expr", ctype, expr) if key is None else key
        found = self.lookup(key)
        if found is not None:
            return found
        if _is_atom(expr):
            return expr
        name = self.fresh(prefix)
        text = f"const {ctype} {name} = {expr};"
        scope = self._place(text, expr) if self._hoist else self._append(text)
        scope.names.add(name)
        scope.keys[key] = name
        return name

    def _append(self, text: str) -> _Scope:
        self.lines.append("  " * self._indent + text)
        return self._scopes[-1]

    def _place(self, text: str, uses: str | None = None) -> _Scope:
        """Put `text`, which reads the names in `uses` (default: its own), in the outermost scope
        it may go to (Note [Hoisted lines])."""
        target = len(self._scopes) - 1
        deps = self._depth_needed(text if uses is None else uses)
        while target > deps and self._scopes[target].loop:
            target -= 1
        if target == len(self._scopes) - 1:
            return self._append(text)
        at = self._scopes[target + 1].start
        self.lines.insert(at, "  " * self._scopes[target].indent + text)
        for scope in self._scopes[target + 1:]:
            scope.start += 1
        for mark in self._marks:
            if mark[0] >= at:
                mark[0] += 1
        return self._scopes[target]

    def mark(self) -> list:
        """The current end of the text, for `rewind`; lines hoisted before it move it on."""
        mark = [len(self.lines)]
        self._marks.append(mark)
        return mark

    def rewind(self, mark: list) -> None:
        """Drop the lines written since `mark` (lines hoisted out of them stay)."""
        del self.lines[mark[0]:]
        self._marks.remove(mark)

    def unmark(self, mark: list) -> None:
        self._marks.remove(mark)

    def _depth_needed(self, text: str) -> int:
        """The innermost scope defining a name `text` uses; the current one for an unknown
        name."""
        depth = 0
        for m in _NAME.finditer(text):
            word = m.group()
            if word in _KNOWN or _POINTER.match(word) or text[m.end():m.end() + 1] == "(":
                continue
            for k in range(len(self._scopes) - 1, -1, -1):
                if word in self._scopes[k].names:
                    depth = max(depth, k)
                    break
            else:
                return len(self._scopes) - 1
        return depth

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _is_atom(expr: str) -> bool:
    return expr.isidentifier() or expr.lstrip("-").replace(".", "", 1).isdigit()
