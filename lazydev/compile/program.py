"""From a canonical, scheduled graph to one C translation unit and its run-time binding."""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..trace.ir import ELEMENTWISE, REDUCE, Node, Op, toposort
from . import cexpr
from .cexpr import CodegenUnsupported
from .codegen import SPECIAL_PREFIX
from .kernels import KERNEL_ARGS, SLICED, TEMPLATES, emit_kernel
from .passes import roots

ALIGN = 64


@dataclass
class Layout:
    """How a compiled program is bound at run time: bufs = inputs + new outputs + arena."""
    input_slots: list            # trace DATA slots, in bufs order
    out_nbytes: list             # byte size of each new output buffer
    out_map: list                # per graph output: ("new", k) or ("input", position)
    arena_bytes: int
    kernels: int
    nodes: int
    donatable: dict = None       # output index -> input slots it may overwrite (Note [Donation])
    out_ready: list = None       # per new output buffer: the calls run once it is final
    forks: bool = True           # a call may fork the team (Note [Team hold], runtime/queue.py)


def _reads(order: list[Node], realized: set) -> dict:
    """id(kernel node) -> ids of realized/DATA nodes its fused loop nest reads."""
    inline_reads: dict = {}
    kernel_reads: dict = {}
    for n in order:
        acc = set()
        for s in n.src:
            if id(s) in realized or s.op is Op.DATA:
                acc.add(id(s))
            else:
                acc |= inline_reads[id(s)]
        if id(n) in realized:
            kernel_reads[id(n)] = acc
            inline_reads[id(n)] = {id(n)}
        else:
            inline_reads[id(n)] = acc
    return kernel_reads


def plan_arena(kernel_nodes: list[Node], scratch: set, reads: dict) -> tuple[dict, int]:
    """Offsets in one arena for intermediates (ids in `scratch`), reusing the space of values
    whose last reader has run. A kernel's output never overlaps what that kernel reads."""
    pos = {id(n): i for i, n in enumerate(kernel_nodes)}
    last = {}
    for n in kernel_nodes:
        for r in reads[id(n)]:
            last[r] = max(last.get(r, -1), pos[id(n)])
    free: list = []              # (offset, size)
    live: dict = {}              # id -> (offset, size, last use)
    offsets, top = {}, 0
    for i, n in enumerate(kernel_nodes):
        for nid in [k for k, v in live.items() if v[2] < i]:
            off, size, _ = live.pop(nid)
            free.append((off, size))
        if id(n) not in scratch:
            continue
        size = max(ALIGN, -(-n.numel * n.dtype.itemsize // ALIGN) * ALIGN)
        fits = [f for f in free if f[1] >= size]
        if fits:
            best = min(fits, key=lambda f: f[1])
            free.remove(best)
            off = best[0]
            if best[1] > size:
                free.append((off + size, best[1] - size))
        else:
            off, top = top, top + size
        offsets[id(n)] = off
        live[id(n)] = (off, size, last.get(id(n), i))
    return offsets, top


# Note [Donation]
# A step replaces parameters and optimizer state with new values. Computed into new buffers,
# every step allocates and writes a second copy of them (and a fresh buffer costs the cache a
# read for ownership before each line is written). So an output may be written over an input
# buffer, chosen at run time (compile/__init__.py): the caller offers an input buffer that
# nothing else holds for the output that replaces it (trace/sync.py). The program decides here,
# from the schedule alone, which (output, input) pairs are safe, so a graph compiles once
# whichever offers a run gets:
#   * the output is computed by an elementwise loop nest reading that input only through
#     elementwise ops of its own shape, so element i is read before i is written; that loop
#     takes both pointers without `restrict`, under `omp simd` (no loop-carried dependence);
#   * no kernel after it reads the input, and no output returns the input unchanged;
#   * every kernel that can fail (an index check, a LAPACK info) runs before it: the program
#     stops at a failing kernel, so a failed run has overwritten nothing and its inputs are as
#     they were (Note [Async execution]).

def _own_index_reader(o: Node, target, realized: set) -> bool:
    """Whether o's loop nest reads the buffers `target(node)` picks only at o's own index
    (Note [Donation], Note [Kernel groups])."""
    ok, stack, seen = True, [(o, True)], set()
    while stack and ok:
        n, direct = stack.pop()
        for s in n.src:
            if target(s):
                ok = direct and s.shape == o.shape
            elif s.op is not Op.DATA and id(s) not in realized and (id(s), direct) not in seen:
                seen.add((id(s), direct))
                stack.append((s, direct and s.op in ELEMENTWISE and s.shape == o.shape))
            if not ok:
                break
    return ok


# Note [Kernel groups]
# Elementwise outputs of one shape that follow one another in the schedule share one loop nest:
# an optimizer's momentum and parameter updates, AdamW's two moments and its parameter. A member
# reads the earlier members' results only at its own index, so iteration i reads what it has just
# stored (the compiler forwards the store), and the update is one pass over the parameters
# instead of one per formula. Outputs only: their buffers live for the whole program, so the
# arena plan (which assumes one kernel per node) is untouched. Donation still holds: a member
# overwrites input s at index i after every member has read s at i, because _donatable lets no
# later kernel read s and every earlier member must read s only at its own index (checked here).

def _groups(kernel_nodes, realized, out_index, donated) -> list[list[int]]:
    """The kernel positions, in runs that one loop nest computes (Note [Kernel groups])."""
    groups = []
    for k, n in enumerate(kernel_nodes):
        last = groups[-1] if groups else None
        if last and _joins(n, [kernel_nodes[j] for j in last], realized, out_index, donated):
            last.append(k)
        else:
            groups.append([k])
    return groups


def _groupable(n: Node, out_index) -> bool:
    return (id(n) in out_index and n.op in ELEMENTWISE and n.op not in TEMPLATES
            and len(n.shape) > 0)


def _joins(n: Node, members: list, realized: set, out_index, donated) -> bool:
    if not (_groupable(n, out_index) and _groupable(members[0], out_index)
            and n.shape == members[0].shape):
        return False
    for m in members:
        if not _own_index_reader(n, lambda s, m=m: s is m, realized):
            return False
        if any(not _own_index_reader(m, _data_slot(s), realized) for s in donated.get(id(n), ())):
            return False
    return True


def _data_slot(slot: int):
    return lambda s: s.op is Op.DATA and s.arg == slot


def _can_fail(body: str) -> bool:
    """Whether a kernel can end its program with an error (an index check, a LAPACK info, a
    library routine's scratch: Note [Scratch failures] in csrc/wse_runtime.c)."""
    return "WSE_FAIL" in body or "errinfo" in body


def _donatable(outputs, kernel_nodes, realized, reads, slot_of, fail_at: int) -> dict:
    """{output index: input slots it may overwrite} (Note [Donation]). `fail_at`: position of
    the last kernel that can fail, or -1."""
    pos = {id(n): i for i, n in enumerate(kernel_nodes)}
    last_read = {}
    for n in kernel_nodes:
        for r in reads[id(n)]:
            if r in slot_of:
                last_read[slot_of[r]] = max(last_read.get(slot_of[r], -1), pos[id(n)])
    returned = {o.arg for o in outputs if o.op is Op.DATA}
    count: dict = {}
    for o in outputs:
        count[id(o)] = count.get(id(o), 0) + 1
    out = {}
    for i, o in enumerate(outputs):
        if (id(o) not in pos or count[id(o)] > 1 or pos[id(o)] <= fail_at
                or o.op in TEMPLATES or o.op in REDUCE or o.op not in ELEMENTWISE):
            continue
        slots = frozenset(slot_of[r] for r in reads[id(o)] if r in slot_of
                          and slot_of[r] not in returned and last_read[slot_of[r]] == pos[id(o)]
                          and _own_index_reader(o, _data_slot(slot_of[r]), realized))
        if slots:
            out[i] = slots
    return out


def generate(outputs: list[Node], order: list[Node], realized: set, prefix: str,
             special: str = "", hoisted: bool = False):
    """C source and Layout for the scheduled graph. `special` (csrc/wse_special.h) is pasted
    only into the units whose kernels call one of its functions."""
    for n in order:
        if n.dtype not in cexpr.SUPPORTED:
            raise CodegenUnsupported(f"dtype {n.dtype} is not supported by the wse compiler")
    datas = [n for n in order if n.op is Op.DATA]
    input_slots = sorted({n.arg for n in datas})
    input_pos = {s: i for i, s in enumerate(input_slots)}
    # Pointer codes for the call table (_entry): i >= 0 is bufs[i], -1 - off is arena + off.
    ptrs = {id(n): input_pos[n.arg] for n in datas}
    out_nbytes, out_map, out_index = _output_buffers(outputs, input_pos)
    nin = len(input_slots)
    for nid, k in out_index.items():
        ptrs[nid] = nin + k
    kernel_nodes = [n for n in order if id(n) in realized]
    scratch = {id(n) for n in kernel_nodes if id(n) not in out_index}
    reads = _reads(order, realized)
    offsets, arena = plan_arena(kernel_nodes, scratch, reads)
    for nid, off in offsets.items():
        ptrs[nid] = -1 - off
    emitted = [emit_kernel(n, ptrs, realized) for n in kernel_nodes]
    fails = [i for i, e in enumerate(emitted) if _can_fail(e[0])]
    if fails and not hoisted:
        # Kernels that can fail run as early as their inputs allow, so the updates after them
        # may overwrite their inputs (Note [Donation]); any topological order is a schedule.
        first = toposort(roots(outputs, [kernel_nodes[i] for i in fails]))
        if [id(n) for n in first] != [id(n) for n in order]:
            return generate(outputs, first, realized, prefix, special, hoisted=True)
    donatable = _donatable(outputs, kernel_nodes, realized, reads,
                           {id(n): n.arg for n in datas}, fails[-1] if fails else -1)
    donated = {id(outputs[i]): slots for i, slots in donatable.items()}
    kernels, calls, ids, out_ready = _kernel_calls(kernel_nodes, realized, emitted, ptrs,
                                                   (out_index, len(out_nbytes)), donated,
                                                   input_pos)
    entry = _entry(nin + len(out_nbytes), calls, len(ids),
                   sliced={kid for body, kid in ids.items() if SLICED in body})
    units = _units(_preamble(prefix, _max_tile(kernel_nodes)), kernels, entry, special)
    # Every new output has a writer; were one missed, a read would wait for the whole run.
    layout = Layout(input_slots, out_nbytes, out_map, arena, len(calls), len(order), donatable,
                    [len(calls) if r is None else r for r in out_ready],
                    any(_may_fork(k) for k in kernels))
    return units, layout

def _output_buffers(outputs: list[Node], input_pos: dict) -> tuple:
    """(bytes per new output buffer, per output ("input", input index) or ("new", buffer index),
    id(node) -> buffer index): an output that is an input is that buffer, and a node asked for
    twice gets one buffer."""
    out_nbytes, out_map, out_index = [], [], {}
    for o in outputs:
        if o.op is Op.DATA:
            out_map.append(("input", input_pos[o.arg]))
            continue
        if id(o) not in out_index:
            out_index[id(o)] = len(out_nbytes)
            out_nbytes.append(o.numel * o.dtype.itemsize)
        out_map.append(("new", out_index[id(o)]))
    return out_nbytes, out_map, out_index


def _kernel_calls(kernel_nodes, realized, emitted, ptrs, outs, donated, input_pos) -> tuple:
    """(kernel sources, calls as (kernel id, pointer args, scalar slots), body -> kernel id,
    per new output the number of calls after which it is written) for the kernel nodes in
    order, grouped (Note [Kernel groups]) and deduplicated (Note [Kernel deduplication]).
    `outs`: (id(node) -> output buffer index, number of output buffers)."""
    out_index, n_out = outs
    kernels, calls, ids = [], [], {}
    out_ready = [None] * n_out
    for group in _groups(kernel_nodes, realized, out_index, donated):
        n, also = kernel_nodes[group[0]], [kernel_nodes[k] for k in group[1:]]
        for m in (n, *also):
            if id(m) in out_index:
                out_ready[out_index[id(m)]] = len(calls) + 1
        alias = {input_pos[s] for m in (n, *also) for s in donated.get(id(m), ())}
        body, ptr_args, slots = (emit_kernel(n, ptrs, realized, alias, also) if also or alias
                                 else emitted[group[0]])  # re-emitted: grouped or aliasing
        kid = ids.get(body)
        if kid is None:             # Note [Kernel deduplication]
            kid = ids[body] = len(ids)
            more = f" and {len(also)} more (Note [Kernel groups])" if also else ""
            kernels.append(f"/* {n!r}{more} */\nWSE_KERNEL int k{kid}({KERNEL_ARGS}) {{\n{body}")
        calls.append((kid, ptr_args, slots))
    return kernels, calls, ids, out_ready



def _may_fork(kernel: str) -> bool:
    """Whether a kernel may start the OpenMP team: a loop given `omp parallel` (only with
    enough work, kernels._omp) or a library routine, which forks by its own work (csrc)."""
    return "omp parallel" in kernel or "lib->" in kernel


# Note [Kernel deduplication]
# A kernel reads its buffers through P[i] and its runtime scalars through S[j], bound by the
# call in wse_entry, never through fixed buffer or scalar slots. So the same loop nest over other
# buffers (the same layer repeated, one optimizer update per parameter of a shape) is the same
# text, emitted and compiled once: a transformer step has several times fewer distinct kernels
# than kernel calls, and gcc time is what a cold first step costs.

UNIT_LINES = 400      # a translation unit of about this size is worth its own gcc process


def _units(preamble: str, kernels: list, entry: str, special: str = "") -> list:
    """Translation units compiled in parallel (compile/build.py): kernels split in balanced
    chunks, one per core at most; the last unit also declares every kernel and has the entry.
    A unit whose kernels call a special function also gets `special` after the preamble."""
    lines = sum(k.count("\n") for k in kernels)
    n = max(1, min(os.cpu_count() or 1, -(-lines // UNIT_LINES)))
    chunks = [[] for _ in range(n)]
    sizes = [0] * n
    share = lines / n                 # the entry (a table and a loop, _entry) costs gcc nothing
    for k in kernels:                 # in order, filling each chunk to an even share
        i = min(range(n), key=lambda j: (sizes[j] >= share, j)) if n > 1 else 0
        chunks[i].append(k)
        sizes[i] += k.count("\n")
    decls = "\n".join(f"WSE_KERNEL int k{i}({KERNEL_ARGS});" for i in range(len(kernels)))
    def head(chunk):
        uses = special and any(SPECIAL_PREFIX in k for k in chunk)
        return [preamble, special] if uses else [preamble]
    units = ["\n".join(head(c) + c) for c in chunks[:-1]]
    units.append("\n".join(head(chunks[-1]) + [decls] + chunks[-1] + [entry]))
    return units


# Note [Program-sized tiles] in csrc/wse_kernels.c: one GEMM tile may hold this share of all
# the program's GEMM work.
TILE_SHARE = 128


def _max_tile(kernel_nodes: list) -> int:
    """The multiply-adds one GEMM tile may hold in this program (WSE_MAX_TILE)."""
    work = sum(n.numel * n.src[0].shape[-1] for n in kernel_nodes if n.op is Op.MATMUL)
    return work // TILE_SHARE


def _preamble(prefix: str, max_tile: int) -> str:
    return "\n".join([
        "/* generated by lazydev */",
        "#include <tgmath.h>",
        prefix,
        f"#define WSE_MAX_TILE {max_tile}LL   /* Note [Program-sized tiles] */",
        # Kernels are shared between translation units but not exported from the .so.
        '#define WSE_KERNEL __attribute__((visibility("hidden")))',
        # gcc 12 stored a stack array of a leaf kernel with an aligned vector store at an
        # address it had not aligned (a crash in pool_argmax); explicit alignment makes it
        # realign the frame.
        "#define WSE_ALIGNED __attribute__((aligned(64)))",
        # The first failure is the one reported, whole: with threads failing at once, each
        # writing errinfo would mix one's value with another's position. A failed device-side
        # check (Note [Device-side checks] in trace/checks.py) replaces an index error, which
        # is only the kernels' backstop: the check states the op's own contract and message,
        # and the backstop's line may run first, hoisted out of the loop.
        "#define WSE_FAIL(code, a, b) do { int wse_no_ = 0; if (__atomic_compare_exchange_n("
        "&err, &wse_no_, (code), 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { "
        "errinfo[0] = (int64_t)(a); errinfo[1] = (int64_t)(b); } } while (0)",
        "#define WSE_BACKSTOP(e) ((e) == 0 || (e) == WSE_ERR_INDEX || (e) >= WSE_ERR_INDEX_DIM)",
        "#define WSE_FAIL_CHECK(a, b, c) do { int wse_was_ = __atomic_load_n(&err, "
        "__ATOMIC_RELAXED); while (WSE_BACKSTOP(wse_was_) && "
        "!__atomic_compare_exchange_n(&err, &wse_was_, WSE_ERR_CHECK, 0, __ATOMIC_RELAXED, "
        "__ATOMIC_RELAXED)) {} if (WSE_BACKSTOP(wse_was_)) { "
        "errinfo[0] = (int64_t)(a); errinfo[1] = (int64_t)(b); errinfo[2] = (int64_t)(c); } "
        "} while (0)",
        "",
    ])


def _table(ctype: str, name: str, values) -> str:
    body = ", ".join(str(v) for v in values) or "0"
    return f"static const {ctype} {name}[] = {{{body}}};"


def _entry(arena_index: int, calls: list, n_kernels: int, sliced=()) -> str:
    """wse_entry: the kernel calls as data (kernel, pointer arguments, scalar slots per call)
    and one loop that binds P and S and calls. Written as one C block per call, 500 calls
    (a transformer step) took gcc a second; a table takes nothing. `sliced`: the kernels that
    may pause inside (Note [Sliced GEMM] in csrc/wse_kernels.c), which a run with a long-call
    limit starts however long their last run took."""
    kernel_ids, pstart, pargs, sstart, sargs = [], [0], [], [0], []
    for kid, ptr_codes, slots in calls:
        kernel_ids.append(kid)
        pargs += ptr_codes
        pstart.append(len(pargs))
        sargs += slots
        sstart.append(len(sargs))
    max_p = max((len(c[1]) for c in calls), default=0) or 1
    max_s = max((len(c[2]) for c in calls), default=0) or 1
    fns = ", ".join(f"k{i}" for i in range(n_kernels)) or "0"
    return "\n".join([
        f"typedef int (*wse_kernel_fn)({KERNEL_ARGS});",
        f"static const wse_kernel_fn kernel_fns[] = {{{fns}}};",
        _table("int32_t", "call_kernel", kernel_ids),
        _table("int32_t", "call_pstart", pstart), _table("int64_t", "call_p", pargs),
        _table("int32_t", "call_sstart", sstart), _table("int32_t", "call_s", sargs),
        _table("int8_t", "kernel_sliced", [int(k in sliced) for k in range(n_kernels)]),
        f"static int32_t call_us[{max(len(calls), 1)}];   /* each call's last run */",
        "int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* sc, "
        "int64_t* errinfo, int32_t* next, const volatile int32_t* stop) {",
        f"  char* arena = (char*)bufs[{arena_index}];",
        f"  void* P[{max_p}]; double S[{max_s}];",
        "  const int64_t t_entry = stop[4] ? wse_clock_ns() : 0;",
        f"  for (int c = *next; c < {len(calls)}; c++) {{",
        "    __atomic_store_n(next, c, __ATOMIC_RELEASE);   /* calls before c are done */",
        "    if (stop[0] || (stop[3] && c >= stop[3])",
        "        || (stop[1] && call_us[c] > stop[1] && !kernel_sliced[call_kernel[c]]",
        "            && !WSE_IN_BUDGET(stop, t_entry, call_us[c])))",
        "      return WSE_PAUSED;",
        "    const int64_t t0 = wse_clock_ns();",
        "    for (int j = call_pstart[c]; j < call_pstart[c + 1]; j++) {",
        "      int64_t v = call_p[j];",
        "      P[j - call_pstart[c]] = v >= 0 ? bufs[v] : (void*)(arena + (-1 - v));",
        "    }",
        "    for (int j = call_sstart[c]; j < call_sstart[c + 1]; j++)",
        "      S[j - call_sstart[c]] = sc[call_s[j]];",
        "    int rc = kernel_fns[call_kernel[c]](lib, P, S, errinfo);",
        "    if (rc) return rc;",
        "    call_us[c] = (int32_t)((wse_clock_ns() - t0) / 1000);",
        "  }",
        f"  __atomic_store_n(next, {len(calls)}, __ATOMIC_RELEASE);",
        "  return 0;",
        "}",
        "",
    ])
