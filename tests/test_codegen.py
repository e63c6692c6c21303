"""Index simplification in generated C (Note [Affine indices] in compile/affine.py): values
against CPU eager for the view patterns it rewrites, the rewrite itself on the emitted C, and
the algebra's rules on their own, including where it must refuse."""
import re
import subprocess

import pytest
import torch
import torch.nn.functional as F

import lazydev
from conftest import assert_same
from lazydev.compile import build, last_compiled
from lazydev.compile.affine import IndexAlgebra
from lazydev.compile.kernels import STAGE_TILE


def _algebra():
    names = []

    def bind(expr):            # as the emitter's CBuilder: one temporary per expression
        if expr not in names:
            names.append(expr)
        return f"t{names.index(expr) + 1}"
    return IndexAlgebra(bind), names


def test_divmod_by_loop_ranges():
    ix, names = _algebra()
    ix.set_range("o", 0, 1023)
    ix.set_range("j", 0, 1023)
    assert ix.coordinate("o * 1024 + j", 1, 1024) == "j"
    assert ix.coordinate("o * 1024 + j", 1024, None) == "o"
    assert names == []
    ix.set_range("j", 0, 1024)              # one past: j itself must be reduced
    assert ix.coordinate("o * 1024 + j", 1, 1024) == "t2" and names[1] == "j % 1024"


def test_divmod_splits_one_atom_and_joins_it_again():
    ix, names = _algebra()
    ix.set_range("r", 0, 1023)
    ix.set_range("ob", 0, 192)
    ix.set_range("j", 0, 63)
    q = ix.coordinate("r * 256 + ob + j", 32768, None)
    m = ix.coordinate("r * 256 + ob + j", 256, 128)
    assert (q, m) == ("t1", "t2") and names == ["r / 128", "r % 128"]
    assert ix.parse(f"{q} * 128 + {m}").c() == "r"


def test_negative_or_unknown_terms_are_not_simplified():
    ix, _ = _algebra()
    ix.set_range("j", 0, 767)
    assert ix.coordinate("j - 512", 64, 4) is None          # j - 512 may be negative
    with ix.narrowed("j", 512, 767):
        assert ix.coordinate("j - 512", 64, 4) is not None
    assert ix.coordinate("j - 512", 64, 4) is None          # the narrowing ended
    assert ix.coordinate("x * 4 + j", 4, None) is None       # x has no known range
    assert ix.parse("j / 2") is None and ix.parse("(j) * (j)") is None
    assert ix.parse("3 - (j - 2) * 4").c() == "-j * 4 + 11"


def test_bias_gelu_inner_loop_has_no_division():
    x, b = torch.randn(64, 1024), torch.randn(1024)
    out = F.gelu(x.to("wse") + b.to("wse"))
    lazydev.mark_step()
    assert_same(out, F.gelu(x + b))
    code = "\n".join(last_compiled["units"])
    inner = code[code.index("for (int64_t j"):]
    inner = inner[:inner.index("}")]
    assert "/" not in inner and "%" not in inner, inner


@pytest.mark.parametrize("case", ["heads", "cat_heads", "column_sum", "reshape_twice"])
def test_rewritten_view_patterns_match_cpu(case):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 128, 256, generator=g)
    fns = {
        "heads": lambda t: t.view(8, 128, 4, 64).transpose(1, 2).contiguous() * 2,
        "cat_heads": lambda t: torch.cat([t.view(8, 128, 4, 64).transpose(1, 2), t.view(
            8, 4, 128, 64), t.view(8, 128, 4, 64).permute(0, 2, 1, 3)], dim=-1).exp(),
        "column_sum": lambda t: (t.reshape(-1, 128)[:, :37] * 3).sum(0),
        "reshape_twice": lambda t: t.reshape(1024, 256).t().reshape(64, 4096).t() + 1,
    }
    assert_same(fns[case](x.to("wse")), fns[case](x))


@pytest.mark.parametrize("cat", [False, True])
def test_merged_heads_read_in_split_row_loops(cat):
    """Note [Split row loops]: heads of 64 read as 256 columns split the row loop into 4 x 64,
    so the inner loop's reads need no division; values as on the CPU."""
    x = torch.randn(8, 4, 128, 64, generator=torch.Generator().manual_seed(0))

    def merged(t):
        m = t.transpose(1, 2).reshape(8, 128, 256)
        return torch.cat([m, m * 3], dim=-1) if cat else m * 2
    assert_same(merged(x.to("wse")), merged(x))
    code = "\n".join(last_compiled["units"])
    assert "for (int64_t jl = 0; jl < 64; jl++)" in code, code
    inner = code[code.index("for (int64_t jl"):]
    inner = inner[:inner.index("}")]
    assert "/" not in inner and "%" not in inner, inner


@pytest.mark.parametrize("case", ["per_channel", "transposed", "row_softmax"])
def test_short_rows_merge_when_no_read_needs_their_columns(case):
    """Note [Merged rows]: a per-channel affine + ReLU over 28 x 28 planes runs rows of 784; a
    read that needs the columns apart (a transposed plane) or a reduction over the last dim
    keeps rows of 28; values as on the CPU either way."""
    g = torch.Generator().manual_seed(0)
    x, s = torch.randn(4, 3, 28, 28, generator=g), torch.randn(1, 3, 1, 1, generator=g)
    fns = {"per_channel": lambda t, c: torch.relu(t * c + 1),
           "transposed": lambda t, c: t * c + t.transpose(-1, -2),
           "row_softmax": lambda t, c: (t * c).softmax(-1) * c}
    f = fns[case]
    assert_same(f(x.to("wse"), s.to("wse")), f(x, s))
    code = "\n".join(last_compiled["units"])
    merged = "for (int64_t j = 0; j < 784; j++)" in code
    assert merged == (case == "per_channel"), code
    assert merged or "for (int64_t j = 0; j < 28; j++)" in code, code
    if case != "transposed":                      # no rows to merge into
        empty = torch.randn(4, 3, 0, 28)
        assert_same(f(empty.to("wse"), s.to("wse")), f(empty, s))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_min_max_reductions_vectorise_and_keep_nan(dtype):
    x = torch.randn(64, 33) * 10
    x[3, 5], x[7, :], x[9, 0] = float("nan"), float("-inf"), float("nan")
    x = x.to(dtype) if dtype is not torch.bool else x > 0
    w = x.to("wse")
    for i, f in enumerate((lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.amax(),
                           lambda t: t.view(8, 8, 33).amin((0, 2)))):
        assert_same(f(w), f(x))
        if i == 0 and dtype.is_floating_point:
            assert "reduction(max:acc) reduction(|:nan)" in "\n".join(last_compiled["units"])


@pytest.mark.parametrize("shape", [(64, 3, 14, 9), (2, 5, 16, 16)])
def test_window_argmax_matches_cpu(shape):
    x = torch.randn(*shape)
    x.view(-1)[::7] = 0.5                    # ties: the first index wins
    x.view(-1)[5] = float("nan")
    for k in (2, 3):
        got = F.max_pool2d(x.to("wse"), k, return_indices=True)
        want = F.max_pool2d(x, k, return_indices=True)
        assert_same(got[0], want[0])
        assert_same(got[1], want[1])
    rows = x.reshape(-1, shape[-1])           # a short last axis: the window template
    assert_same(rows.to("wse").argmin(1), rows.argmin(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape,kwargs", [
    ((3, 4, 12, 2100), dict(kernel_size=2)),                # a row longer than one tile
    ((2, 3, 9, 9), dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 7, 9), dict(kernel_size=2, ceil_mode=True)),
    ((3, 10, 11), dict(kernel_size=(2, 3), stride=1, padding=1, dilation=(1, 2))),
])
def test_max_pool_indices_are_the_cpu_kernels(dtype, shape, kwargs):
    """max_pool2d as PyTorch's CPU kernel computes it: the first maximum of a window, the
    last NaN of a window with several, the first position in bounds of a window of -inf."""
    x = torch.randn(*shape).to(dtype)
    flat = x.view(-1, shape[-1])
    flat[0, :4] = 0.5                                     # ties
    flat[1, 0], flat[1, 1] = float("nan"), float("nan")   # two NaNs in one window
    flat[2, 3], flat[3, 2] = float("nan"), float("nan")   # NaNs in two rows of one window
    flat[4:6, :] = float("-inf")
    got = F.max_pool2d(x.to("wse"), return_indices=True, **kwargs)
    want = F.max_pool2d(x, return_indices=True, **kwargs)
    assert_same(got[0], want[0])
    assert_same(got[1], want[1])
    assert "POOL_ARGMAX" in "\n".join(last_compiled["units"])


def test_a_scatter_add_runs_its_rows_in_parallel_and_adds_in_index_order():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(96, 500, generator=g)
    index = torch.randint(0, 7, (96, 400), generator=g)      # many hits on one element
    src = torch.randn(96, 400, generator=g) * 1e4
    got = base.to("wse").scatter_add(1, index.to("wse"), src.to("wse"))
    assert torch.equal(got.cpu(), base.scatter_add(1, index, src))  # same order: same bits
    code = "\n".join(last_compiled["units"])
    assert code.count("#pragma omp parallel for") >= 2              # the base copy, the rows


def _three_calls(t, b):
    return torch.tanh(torch.exp(torch.sin(t * 0.9 + b))) * t    # t is read again at the end


@pytest.mark.parametrize("shape,dtype", [((4099,), torch.float32), ((64, 1000), torch.float32),
                                         ((16, 600), torch.float64), ((2, 2048), torch.float16)])
def test_a_loop_of_three_math_calls_runs_in_staged_tiles(shape, dtype):
    # Note [Staged loops]: flat and row loops, tails shorter than a tile, half and double.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g).to(dtype)
    b = torch.randn(shape[-1], generator=g).to(dtype)
    assert_same(_three_calls(x.to("wse"), b.to("wse")), _three_calls(x, b))
    code = "\n".join(last_compiled["units"])
    assert f"s2[{STAGE_TILE}]" in code and "s3[" not in code


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_output_read_by_staged_calls_is_staged_before_them(dtype):
    """s = a + b kept and y = s.sin().exp().tanh(), one loop: its staged calls read s's buffer
    before the tile's last loop wrote it (every y wrong); s is now a stage of its own. Also a
    kept chain read by a second one (v1 = tanh/cos/sin, v2 = exp/sigmoid of v1)."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(2048, generator=g).to(dtype) for _ in range(2))
    got = {}
    for d in ("cpu", "wse"):
        s = a.to(d) + b.to(d)
        v1 = s.tanh().cos().sin()
        got[d] = (s, s.sin().exp().tanh(), v1, v1.exp().sigmoid())
        if d == "wse":
            lazydev.mark_step()
    assert_same(got["wse"], got["cpu"])


@pytest.mark.parametrize("view", [lambda t: t[:, ::2], lambda t: t[:, :300].t(),
                                  lambda t: t.flip(1)], ids=["step", "transposed", "flipped"])
def test_staged_tiles_of_a_strided_view_read_their_own_columns(view):
    """A staged tile's column is `jb + i`; a view's stride multiplied it as `jb + i * 2`, so
    every tile but the first of a row read the wrong columns."""
    x = torch.randn(300, 600, generator=torch.Generator().manual_seed(0))
    assert_same(view(x.to("wse")).tanh().sigmoid().sin(), view(x).tanh().sigmoid().sin())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sin_and_cos_of_atan_pass_nan_on(dtype):
    """gcc folds sin(atan(x)) under -fno-math-errno, to copysign(1, x) past a bound: NaN."""
    x = torch.tensor([float("nan"), 0.5, float("inf"), -3.0], dtype=dtype)
    for f in (lambda t: t.atan().sin(), lambda t: t.atan().cos()):
        got, want = f(x.to("wse")).cpu(), f(x)
        assert_same(got, want)
        assert torch.equal(got.isnan(), want.isnan())


def test_argmax_of_a_million_rows_of_one_element():
    """argmax(1) of a (1M, 1) tensor kept a row's 1M outputs in stack arrays (12 MB): the
    process died of SIGSEGV."""
    x = torch.randn(1 << 20, 2)
    assert_same(x.to("wse").argmax(1), x.argmax(1))
    assert_same(x.to("wse").argmin(1), x.argmin(1))


def _matches_cpu_with_nans(fn, x) -> str:
    """fn on wse matches fn on the CPU, NaN for NaN; returns the generated kernels' C."""
    got, want = fn(x.to("wse")).cpu(), fn(x)
    assert_same(got, want)
    assert torch.equal(got.isnan(), want.isnan())
    code = "\n".join(last_compiled["units"])
    return code[code.index("/* Node("):]


def test_a_staged_sin_takes_the_fast_path_only_on_tiles_of_small_arguments():
    """Note [Tile-checked math]: tiles whose arguments are all small finite numbers run
    wse_sinf_small, a tile with one huge, inf or NaN argument libmvec's sin; both match the
    CPU."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(64 * STAGE_TILE, generator=g) * 4
    x[3 * STAGE_TILE + 5] = 1e9                           # past 2^17: its tile is exact
    x[7 * STAGE_TILE] = float("inf")
    x[9 * STAGE_TILE + 1] = float("nan")
    x[11 * STAGE_TILE:12 * STAGE_TILE] *= 1e8             # a whole tile of huge arguments
    b = torch.zeros(1)
    kernels = _matches_cpu_with_nans(lambda t: _three_calls(t, b.to(t.device)), x)
    assert "wse_sinf_small(s0[i])" in kernels and "sin(s0[i])" in kernels


def test_a_staged_exp_takes_the_fast_form_only_on_tiles_in_its_range():
    """Note [Tile-checked math]: exp reads log's tile in place; a tile with an argument past
    87 (overflow), -inf, NaN or one giving a subnormal result runs wse_expf."""
    g = torch.Generator().manual_seed(5)
    x = torch.rand(64 * STAGE_TILE, generator=g) * 4 + 0.01
    x[3 * STAGE_TILE + 5] = 3e38                           # log 89.2: exp overflows
    x[5 * STAGE_TILE + 2] = 2e38                           # log 88.8: exp is finite, past 87
    x[7 * STAGE_TILE] = 0.0                                # log -inf
    x[9 * STAGE_TILE + 1] = -1.0                           # log NaN
    x[11 * STAGE_TILE:12 * STAGE_TILE] = 1e-44             # subnormal results
    kernels = _matches_cpu_with_nans(lambda t: torch.tanh(torch.exp(torch.log(t))), x)
    assert "s1[i] = wse_expf_normal(s0[i]);" in kernels and "s1[i] = wse_expf(s0[i]);" in kernels


def test_a_loop_of_two_math_calls_is_one_loop():
    x = torch.randn(4096)
    assert_same(torch.tanh(torch.sin(x.to("wse"))), torch.tanh(torch.sin(x)))
    assert f"s0[{STAGE_TILE}]" not in "\n".join(last_compiled["units"])


def test_exp_matches_cpu_at_its_edges_over_its_range_and_under_a_causal_mask():
    # csrc/wse_prefix.h, wse_expf: overflow, the subnormal results, the flush to 0, specials.
    inf, nan = float("inf"), float("nan")
    edges = torch.tensor([-inf, inf, nan, 0.0, -0.0, 88.72, 88.73, -87.3, -103.9, -104.0, -150.0,
                          1e-30, 1.0, -1.0])
    for f in (torch.exp, torch.sigmoid):
        got = f(edges.to("wse")).cpu()
        torch.testing.assert_close(got, f(edges), atol=0, rtol=0, equal_nan=True)
    sweep = torch.linspace(-110, 90, 400_001)
    got = torch.exp(sweep.to("wse")).cpu()
    want = torch.exp(sweep.double())                 # relative error within 2 ulp
    finite = torch.exp(sweep).isfinite()
    assert ((got.double() - want).abs() <= 2 * 2.0 ** -23 * want + 2.0 ** -149)[finite].all()
    assert torch.isinf(got[~finite]).all() and (~finite).sum() > 0
    scores = torch.randn(2, 4, 64, 64).masked_fill(torch.ones(64, 64).triu(1).bool(), -inf)
    assert_same(torch.softmax(scores.to("wse"), -1), torch.softmax(scores, -1))
    code = "\n".join(last_compiled["units"])
    assert "wse_expf(" in code[code.index("/* Node("):]      # in a kernel, not just the prefix


def test_a_last_dim_concatenation_is_one_loop_per_source():
    g = torch.Generator().manual_seed(0)
    x, b = torch.randn(6, 40, generator=g), torch.randn(7, generator=g)
    fns = (lambda t, c: torch.cat([t[:, 3:] * 2, c.expand(6, 7).exp(), t[:, :3]], dim=-1),
           lambda t, c: t.copy_(torch.cat([t[:, 2:], t[:, :2]], dim=-1)))    # a roll in place
    for f in fns:
        assert_same(f(x.clone().to("wse"), b.to("wse")), f(x.clone(), b))
    code = "\n".join(last_compiled["units"])
    body = code[code.index("/* Node(CAT"):]
    assert "if (" not in body[:body.index("return err")]


def _kernels(code: str) -> list:
    """The ops of the kernels in the last compiled program, in order."""
    return [c.split(",")[0] for c in code.split("/* Node(")[1:]]


def _ln_gelu_softmax(t, w, b):
    return torch.softmax(F.gelu(F.layer_norm(t, t.shape[-1:], w, b)), -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_reductions_are_computed_by_the_kernels_that_read_them(dtype):
    # Note [Row reductions] in compile/passes.py: LayerNorm's mean and variance and softmax's
    # max and sum are loops inside the kernels of their rows, none a kernel of its own.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 40, generator=g, dtype=dtype)
    x[0, 0, 3] = float("nan")                   # a NaN row stays NaN through the max
    w, b = torch.randn(40, generator=g, dtype=dtype), torch.randn(40, generator=g, dtype=dtype)
    with torch.no_grad():
        got = _ln_gelu_softmax(*(t.to("wse") for t in (x, w, b)))
        lazydev.mark_step()
        assert_same(got, _ln_gelu_softmax(x, w, b))
    code = "\n".join(last_compiled["units"])
    ops = _kernels(code)
    assert not {"SUM", "RMAX"} & set(ops), ops
    assert code.count("of the row */") == 4


def test_a_row_reduction_read_elsewhere_stays_a_kernel():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 24, generator=g)
    fns = (lambda t: (t - t.mean(-1, keepdim=True), t.mean(-1, keepdim=True)),   # a saved mean
           lambda t: t.transpose(0, 1) - t.amax(-1, keepdim=True).transpose(0, 1),
           lambda t: t.var(-1, keepdim=True),   # the mean inside the variance's own loop
           lambda t: t.sum(-1, keepdim=True).expand(5, 3, 24).sum(0))        # column readers
    kept = ("SUM", "RMAX", "SUM", "SUM")
    for f, op in zip(fns, kept):
        assert_same(f(x.to("wse")), f(x))
        assert op in _kernels("\n".join(last_compiled["units"]))


def test_a_value_read_twice_by_one_loop_is_computed_there_once():
    # GELU reads its input twice (x * Phi(x)); x = t + b is computed in GELU's loop, not stored.
    g = torch.Generator().manual_seed(0)
    x, b = torch.randn(32, 64, generator=g), torch.randn(64, generator=g)
    cases = ((lambda t, c: F.gelu(t + c), ["MUL"]),
             (lambda t, c: (t + c, F.gelu(t + c)), ["ADD"]),    # an output: stored (and
             #                                       the GELU joins its loop, a kernel group)
             (lambda t, c: ((t + c).sin() * 2, (t + c).sin().sum(0, keepdim=True)),
              ["SIN", "MUL", "SUM"]))
    for f, kernels in cases:
        assert_same(f(x.to("wse"), b.to("wse")), f(x, b))
        code = "\n".join(last_compiled["units"])
        assert _kernels(code) == kernels
        assert code[code.index("/* Node("):].count("sin(") <= 1


def test_a_cheap_value_read_by_a_row_loop_and_its_row_reductions_is_computed_twice():
    # LayerNorm's x - mean is read by the variance (a row reduction) and by the normalisation:
    # one loop, no stored copy. With a math call in it, and read by a reduction directly, the
    # same kernel stores it once per row in a stack array, and both loops read that (Note
    # [Row-staged values] in kernels_row.py); read by a reduction through another value, it is
    # stored once, by a kernel of its own.
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 3, 48, generator=g), torch.randn(48, generator=g)

    def centred_exp(t):
        c = (t - t.mean(-1, keepdim=True)).exp()
        return c * (c * c).sum(-1, keepdim=True)

    def normalised_exp(t):
        c = (t - t.mean(-1, keepdim=True)).exp()
        return c / c.sum(-1, keepdim=True)
    def deep_centred(t):            # 120 ops: the fusion depth bound stores one value midway
        for _ in range(60):
            t = t * 1.01 + 0.1
        return t - t.mean(-1, keepdim=True)
    cases = ((lambda t: F.layer_norm(t, (48,), w.to(t.device)), ["MUL"], 0, 0),
             (centred_exp, ["EXP", "MUL"], 0, 1), (normalised_exp, ["DIV"], 1, 1),
             (deep_centred, ["ADD", "SUB"], 0, 0))
    for f, kernels, arrays, exps in cases:
        with torch.no_grad():
            assert_same(f(x.to("wse")), f(x))
        text = "\n".join(last_compiled["units"])
        assert _kernels(text) == kernels
        assert len(re.findall(r"float ra\d+\[48\]", text)) == arrays
        assert text.count("wse_expf(t") == exps         # exp computed in one loop only


def test_a_cheap_value_of_one_stored_value_is_recomputed_by_each_reader():
    # Note [Recomputed values]: a matmul plus its bias, read by a reduction and two elementwise
    # outputs, is not stored; a value reading two stored values of its size (or making a math
    # call) is.
    g = torch.Generator().manual_seed(0)
    a, w, b = torch.randn(16, 24, generator=g), torch.randn(24, 32, generator=g), \
        torch.randn(32, generator=g)

    def bias_readers(x, y, c):
        h = x @ y + c
        return h.relu(), h.sum(0), h * 2
    def two_loads(x, y, c):
        h = x @ y + x @ (y * 2)
        return h.relu(), h.sum(0)
    def math_call(x, y, c):
        h = (x @ y + c).exp()
        return h.relu(), h.sum(0)
    cases = ((bias_readers, None), (two_loads, "ADD"), (math_call, "EXP"))
    for f, stored in cases:
        with torch.no_grad():
            assert_same(f(a.to("wse"), w.to("wse"), b.to("wse")), f(a, w, b))
        ops = _kernels("\n".join(last_compiled["units"]))
        assert ("ADD" in ops or "EXP" in ops) == (stored is not None), ops
        assert stored is None or stored in ops, ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_wide_column_sums_read_rows_in_runs(dtype):
    # Note [Column reductions]: a sum over leading axes of a wide row is split into row runs with
    # partial accumulators; narrow rows keep the column blocks.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 50, 96, generator=g, dtype=dtype)
    for f, runs in ((lambda t: t.sum((0, 1)), True), (lambda t: t.reshape(300, 96).prod(0), True),
                    (lambda t: t[..., :8].sum((0, 1)), False)):
        assert_same(f(x.to("wse")), f(x))
        code = "\n".join(last_compiled["units"])
        assert ("part[4][" in code) == runs


def test_cross_entropy_backward_row_loops_vectorise(tmp_path):
    """nll_loss + log_softmax backward is one row kernel whose loops select `-scale` at the
    label's column. gcc's PRE pass used to move the scale's load into a branch of that select,
    and the loops ran scalar (580 us against 128 for 1024 x 256): build.FLAGS turns PRE off.
    Every loop over a row's columns must be vectorised."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=g, requires_grad=True)
    y = torch.randint(0, 256, (64,), generator=g)
    xw = x.detach().to("wse").requires_grad_()
    F.cross_entropy(xw, y.to("wse")).backward()
    lazydev.mark_step()
    F.cross_entropy(x, y).backward()
    assert_same(xw.grad, x.grad)
    unit = next(u for u in last_compiled["units"] if "wse_expf(" in u and "? " in u)
    _assert_vectorised(tmp_path, unit, ("for (int64_t j = 0; j < 256",
                                        "for (int64_t r = 0; r < 256"))


def _assert_vectorised(tmp_path, unit: str, heads) -> None:
    """Every loop of `unit` whose line contains one of `heads` is vectorised by gcc with the
    flags programs build with."""
    src = tmp_path / "unit.c"
    src.write_text(unit)
    cmd = [build.CC, *build.FLAGS, "-fopt-info-vec-all", str(src), "-o", str(tmp_path / "u.so")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = unit.splitlines()
    loops = [i for i, line in enumerate(lines) if any(h in line for h in heads)]
    assert loops, unit
    vectorised = {int(m.split(":")[1]) - 1 for m in res.stderr.splitlines()
                  if m.startswith(str(src)) and "loop vectorized" in m}

    def end(first):            # the line of the loop's closing brace
        depth = 0
        for i in range(first, len(lines)):
            depth += lines[i].count("{") - lines[i].count("}")
            if depth == 0:
                return i
        return len(lines)
    # gcc reports a vectorised loop at its own line, the pragma before it, or a statement in it
    scalar = [i + 1 for i in loops if not any(i - 1 <= v <= end(i) for v in vectorised)]
    assert not scalar, (scalar, res.stderr)


def test_embedding_gradient_rows_vectorise(tmp_path):
    """An embedding's gradient is an accumulating index_put into the weight's rows: the index
    is loaded and checked once per row and the row's loop vectorises (a flat loop over every
    element took 303 us for 1024 x 256 in the transformer's step). Values as on the CPU,
    repeated tokens included."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 256, generator=g, requires_grad=True)
    tokens = torch.randint(0, 64, (8, 128), generator=g)
    c = torch.randn(8, 128, 256, generator=g)
    ww = w.detach().to("wse").requires_grad_()
    (F.embedding(tokens.to("wse"), ww) * c.to("wse")).sum().backward()
    lazydev.mark_step()
    (F.embedding(tokens, w) * c).sum().backward()
    assert_same(ww.grad, w.grad)
    unit = next(u for u in last_compiled["units"] if "Node(INDEX_PUT" in u)
    _assert_vectorised(tmp_path, unit, ("for (int64_t r = 0; r < 256",))
    for accumulate in (True, False):        # rows of no elements
        x, v, i = torch.zeros(10, 0), torch.ones(3, 0), torch.tensor([1, 3, 1])
        got = x.to("wse").index_put_((i.to("wse"),), v.to("wse"), accumulate=accumulate)
        assert_same(got, x.index_put_((i,), v, accumulate=accumulate))


def test_hoisted_lines_leave_the_loops_they_do_not_use():
    """Note [Hoisted lines]: inside `hoisting()` a temporary goes before every loop whose names
    it does not use; one using an unknown name (an accumulator), a loop variable, or made in a
    block opened while hoisting stays; a rewind keeps what was hoisted out of the dropped lines."""
    from lazydev.compile.cbuilder import CBuilder
    b = CBuilder()
    with b.block("for (int64_t o = 0; o < 4; o++)", loop_var="o"):
        mark = b.mark()
        b.line("#pragma omp simd")
        with b.block("for (int64_t j = 0; j < 8; j++)", loop_var="j"):
            with b.hoisting():
                i = b.temp("int64_t", "p0[o]")
                b.temp("float", "((float)S[0] * 2.0f)")
                b.line("float acc = 0;")
                b.temp("float", "acc + 1.0f")
                b.temp("int64_t", f"{i} + j")
                with b.block("if (j > 1)"):
                    b.temp("float", "((float)S[1])")
        assert b.text() == (
            "const float t2 = ((float)S[0] * 2.0f);\n"
            "for (int64_t o = 0; o < 4; o++) {\n"
            "  const int64_t t1 = p0[o];\n"
            "  #pragma omp simd\n"
            "  for (int64_t j = 0; j < 8; j++) {\n"
            "    float acc = 0;\n"
            "    const float t3 = acc + 1.0f;\n"
            "    const int64_t t4 = t1 + j;\n"
            "    if (j > 1) {\n"
            "      const float t5 = ((float)S[1]);\n"
            "    }\n"
            "  }\n")
        b.rewind(mark)
        b.line(f"use({i});")
    assert b.text().splitlines()[2:] == ["  const int64_t t1 = p0[o];", "  use(t1);", "}"]


@pytest.mark.parametrize("in_place", [False, True])
def test_a_value_of_scalars_is_computed_once_before_the_loops(in_place):
    """Note [Hoisted scalars]: Adam's bias corrections of a step count on the device, read by a
    loop over a matrix, are computed before the loop, not at each element, also where the
    matrix's buffer is donated to the result (a pointer that may alias); values as the CPU's."""
    x, t = torch.randn(64, 128), torch.tensor(3.0)

    def f(x, t):
        factor = 0.01 / (1 - torch.pow(0.9, t))
        shift = torch.sqrt(1 - torch.pow(0.999, t))
        return x.mul_(factor).add_(shift) if in_place else x * factor + shift
    want = f(x.clone(), t)
    wx, wt = x.to("wse"), t.to("wse")
    lazydev.mark_step()
    got = f(wx, wt)
    lazydev.mark_step()
    assert_same(got.cpu(), want)
    code = "\n".join(last_compiled["units"])
    kernel = code[code.index("WSE_KERNEL int k0("):]
    kernel = kernel[kernel.index("{"):kernel.index("\n}\n")]
    assert kernel.count("pow(") == 2 and kernel.count("sqrt(") == 1
    assert kernel.rindex("pow(") < kernel.index("for (") > kernel.index("sqrt(")


def test_embedding_lookup_rows_vectorise(tmp_path):
    """A gather's index depends on the row only: it is loaded and bounds-checked before the
    row loop (Note [Hoisted lines]), which then vectorises (the transformer's token + position
    embedding: 213 us for 1024 x 256 with the check inside). Out-of-range tokens still raise."""
    g = torch.Generator().manual_seed(0)
    w, pos = torch.randn(300, 64, generator=g), torch.randn(128, 64, generator=g)
    tokens = torch.randint(-300, 300, (8, 128), generator=g)

    def embed(t, w, pos):
        return F.embedding(t % 300, w) + pos
    assert_same(embed(tokens.to("wse"), w.to("wse"), pos.to("wse")), embed(tokens, w, pos))
    unit = next(u for u in last_compiled["units"] if "WSE_FAIL(64" in u)   # (axis 0)
    _assert_vectorised(tmp_path, unit, ("for (int64_t j = 0; j < 64",))
    with pytest.raises(IndexError, match="index out of range in self"):    # the CPU's
        F.embedding(tokens.to("wse") + 300, w.to("wse")).cpu()


def test_softmax_multiplies_by_the_rows_reciprocal():
    """As PyTorch's CPU kernel: exp(x - max) times 1 / sum, one division per row."""
    x = torch.randn(8, 4, 16, 128, generator=torch.Generator().manual_seed(0))
    assert_same(x.to("wse").softmax(-1), x.softmax(-1))
    code = "\n".join(last_compiled["units"])
    assert "Node(DIV" not in code and "Node(MUL" in code, code


def test_attention_heads_are_read_in_place_by_the_gemms():
    """Note [Two-level batches] in csrc/wse_kernels.c: the query and key of attention, head
    splits of the QKV projection (the key transposed), are read by the GEMMs where they lie,
    batched over (sample, head) in two levels, the key's transpose by BLAS's flag (`_gemm_view`
    in compile/passes.py), in the scores and in the gradients alike: no copy of either; values
    and gradients as on the CPU."""
    g = torch.Generator().manual_seed(0)
    # Inputs at an attention layer's scale: weights as an initialised layer's, and r, the
    # scores' upstream gradient, 1/16 of unit as from softmax rows over 16 keys. With unit
    # weights the gradients reached ~270, with unit r ~130, and the CPU's own float32 result was
    # then 2.5e-5 from the float64 one, beyond the table's atol, so a BLAS summing in another
    # order could fail it.
    x, w = torch.randn(2, 16, 24, generator=g), torch.randn(24, 96, generator=g) * 24 ** -0.5
    b, r = torch.randn(96, generator=g), torch.randn(2, 4, 16, 16, generator=g) / 16

    def scores(x, w, b, r):
        qkv = x @ w + b
        q = qkv[..., :32].reshape(2, 16, 4, 8).transpose(1, 2)
        k = qkv[..., 32:64].reshape(2, 16, 4, 8).transpose(1, 2)
        return ((q @ k.transpose(-2, -1)) * r).sum()

    cpu = [t.clone().requires_grad_() for t in (x, w, b)]
    scores(*cpu, r).backward()
    dev = [t.to("wse").requires_grad_() for t in (x, w, b)]
    loss = scores(*dev, r.to("wse"))
    loss.backward()
    lazydev.mark_step()
    code = "\n".join(last_compiled["units"])
    for got, want in zip(dev, cpu):
        assert_same(got.grad, want.grad)
    copies = [c[:60] for c in code.split("/* Node(")[1:] if c.startswith("AS_STRIDED")]
    assert copies == []
    assert "static const int64_t hb[4] = {4, 8, 4, 8};" in code      # heads 8 floats apart
    assert ", 0, 1, " in code and ", 1, 0, " in code       # a GEMM with each operand transposed


def test_an_autocast_gemm_casts_its_operands_as_they_lie_and_reads_them_transposed():
    """`_gemm_cast` in compile/passes.py: a bfloat16 product (autocast's linear, x @ w.t()) is a
    float32 GEMM of casts, and a cast of a transpose runs over the weight, and in the backward
    pass over the gradient, as they lie; the GEMMs read them transposed. Cast as transposes,
    each read one element per source row (a 1024x1024 weight's took 1.66 ms). The weight's cast
    serves the forward and the backward product alike. Values and gradients as on the CPU."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 48, generator=g), torch.randn(64, 48, generator=g) * 48 ** -0.5
    r = torch.randn(16, 64, generator=g)

    def f(x, w, r):
        y = x.to(torch.bfloat16) @ w.to(torch.bfloat16).t()
        return y, (y.float() * r).sum()

    cpu = [t.clone().requires_grad_() for t in (x, w)]
    y_cpu, loss = f(*cpu, r)
    loss.backward()
    dev = [t.to("wse").requires_grad_() for t in (x, w)]
    y, loss = f(*dev, r.to("wse"))
    loss.backward()
    lazydev.mark_step()
    code = "\n".join(last_compiled["units"])
    assert_same(y, y_cpu)
    for got, want in zip(dev, cpu):
        assert_same(got.grad, want.grad)
    casts = re.findall(r"/\* Node\(CAST, float32\[(\d+), (\d+)\]", code)
    assert sorted(set(casts)) == [("16", "48"), ("16", "64"), ("64", "48")]   # x, dy, w
    assert casts.count(("64", "48")) == 1
    assert ", 1, 0, " in code and ", 0, 1, " in code       # dW reads dy^T, y reads w^T
    # bfloat16 values in float buffers: the CPU's bfloat16 dot products (Note [BF16 GEMM])
    assert code.count("lib->gemm_bf16_sliced(") == 3 and "lib->gemm_f32" not in code


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["heads_by_contiguous", "transposed_heads_by_broadcast",
                                  "heads_by_other_heads"])
def test_strided_head_views_are_gemm_operands_in_place(dtype, case):
    """Note [Two-level batches]: a GEMM operand that is a view batched over two dims of any
    stride, with rows or columns of unit stride, is read where it lies, whatever the other
    operand: contiguous, broadcast over the batch, or batched over other heads. No copy; the
    CPU's values."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 5 * 6, generator=g, dtype=dtype)
    w, v = torch.randn(3, 5, 6, 4, generator=g, dtype=dtype), torch.randn(7, 2, dtype=dtype)

    def product(x, w, v):
        heads = x.reshape(3, 7, 5, 6).transpose(1, 2)           # [3, 5, 7, 6], rows 30 apart
        if case == "heads_by_contiguous":
            return heads @ w
        if case == "transposed_heads_by_broadcast":
            return heads.transpose(-2, -1) @ v
        return heads @ x.reshape(3, 7, 5, 6).permute(0, 2, 3, 1)   # [3, 5, 6, 7], columns 30 apart
    got = product(x.to("wse"), w.to("wse"), v.to("wse"))
    lazydev.mark_step()
    code = "\n".join(last_compiled["units"])
    assert_same(got, product(x, w, v))
    kernels = [c.split(",")[0] for c in code.split("/* Node(")[1:]]
    assert "MATMUL" in kernels and not {"AS_STRIDED", "PERMUTE"} & set(kernels), kernels
    assert "static const int64_t hb[4]" in code


@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.float16])
def test_float_to_integer_casts_give_the_cpus_results_out_of_range(src):
    """C leaves NaN, inf and out-of-range float -> int undefined; the CPU kernels give x86's
    results (INT32_MIN, then the low bits, for the narrow types): inf -> uint8 was 255, 1e10 ->
    int32 1410065408 and NaN -> int64 0 here."""
    x = torch.tensor([300.0, -1.5, 1e10, -1e10, float("nan"), float("inf"), -float("inf"), 2.7,
                      -2.7, 3e9, -3e9, 1e19, 128.0, -129.0, 70000.0, 2.0 ** 31, -2.0 ** 31])
    x = x.to(src)
    for dst in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool):
        assert_same(x.to("wse").to(dst), x.to(dst))


_EMPTY = {
    # ZeroDivisionError in the index algebra (a zero-size dim's stride divided by)
    "logdet of 3 empty matrices": lambda x: torch.logdet(x.reshape(5, 0, 5)[:3, :, :0]),
    # ValueError reading an empty view whose offset lies past its empty buffer
    "unbind of a zero-size dim": lambda x: torch.unbind(x.reshape(5, 0, 5), 0)[4],
    "nonzero, as_tuple": lambda x: torch.nonzero(x.reshape(5, 0, 5)[:, :, 0], as_tuple=True)[1],
}


@pytest.mark.parametrize("case", list(_EMPTY))
def test_zero_size_tensors(case):
    """Found by OpInfo's full sample sets (lazydev.coverage --full)."""
    x = torch.zeros(0)
    assert_same(_EMPTY[case](x.to("wse")).cpu(), _EMPTY[case](x))


def test_float_only_ops_are_the_ones_c_has_no_integer_form_of():
    """trace/ir.py's FLOAT_ONLY, whose integer nodes are not made, names exactly the ops whose
    C expression (compile/cexpr.py) needs floating values."""
    from lazydev.compile import cexpr
    from lazydev.trace.ir import BINARY, FLOAT_ONLY, UNARY, Op

    def has_c_form(op, dtype):
        try:
            if op in UNARY:
                cexpr.unary(op, dtype, "x", dtype)
            else:
                cexpr.binary(op, dtype, "a", "b")
            return True
        except cexpr.CodegenUnsupported:
            return False
    # made by codegen's own rules, not these tables
    ruled = {Op.ERFINV, Op.CAST, Op.BITCAST, Op.POW, Op.TRUNCDIV, Op.FLOORDIV, Op.MOD, Op.FMOD}
    for op in (UNARY | BINARY) - ruled:
        assert has_c_form(op, torch.float32), op
        assert has_c_form(op, torch.int32) == (op not in FLOAT_ONLY), op
