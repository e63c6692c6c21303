"""Special functions (csrc/wse_special.h): what the float32 OpInfo harness does not check --
the header pasted only where used, the double and half instances, values where the algorithms
amplify libm differences, and errors of dtypes the CPU kernels do not have."""
import pytest
import torch

import lazydev
from lazydev.compile import last_compiled, program
from lazydev.compile.codegen import SPECIAL_PREFIX

from conftest import assert_same

GUARD = "#define WSE_SPECIAL_H"


def _units_of(fn, *args):
    out = fn(*(a.to("wse") for a in args))
    lazydev.sync(out if isinstance(out, (list, tuple)) else [out])
    return last_compiled["units"]


def test_header_only_in_programs_that_call_it():
    x = torch.rand(64)
    assert not any(GUARD in u for u in _units_of(lambda t: t.exp() + 1, x))
    units = _units_of(lambda t: torch.special.bessel_j0(t) + 1, x)
    assert any(GUARD in u and SPECIAL_PREFIX + "bessel_j0_forward_f(" in u for u in units)


def test_header_only_in_the_units_that_call_it(monkeypatch):
    monkeypatch.setattr(program.os, "cpu_count", lambda: 2)
    body = "\n" * program.UNIT_LINES
    plain = f"int k0(void) {{ return 0; }}{body}"
    calling = f"int k1(void) {{ return {SPECIAL_PREFIX}x_f(1.0f); }}{body}"
    units = program._units("/*pre*/", [plain, calling], "/*entry*/", "/*special*/")
    assert len(units) == 2
    assert ["/*special*/" in u for u in units] == [False, True]


DOUBLE_AND_HALF = [
    (torch.special.bessel_y1, (torch.float64,)),
    (torch.special.modified_bessel_k0, (torch.float64,)),
    (torch.special.erfcx, (torch.float64,)),
    (torch.special.i1e, (torch.float64, torch.float16, torch.bfloat16)),
    (torch.digamma, (torch.float64, torch.float16)),
    (lambda x: torch.polygamma(3, x), (torch.float64, torch.bfloat16)),
    (torch.erfinv, (torch.float64, torch.float16)),
]


@pytest.mark.parametrize("fn,dtypes", DOUBLE_AND_HALF)
def test_double_and_half_instances(fn, dtypes):
    base = torch.cat([torch.linspace(-0.99, 0.99, 50), torch.linspace(0.01, 30, 50)])
    for dt in dtypes:
        x = base.to(dt)
        assert_same(fn(x.to("wse")), fn(x))


def test_binary_and_integer_order_double():
    x = torch.linspace(0.1, 40, 80, dtype=torch.float64)
    a = torch.linspace(0.5, 30, 80, dtype=torch.float64).flip(0)
    assert_same(torch.igammac(a.to("wse"), x.to("wse")), torch.igammac(a, x))
    assert_same(torch.special.zeta(x.to("wse") + 1, 2.5), torch.special.zeta(x + 1, 2.5))
    n = torch.arange(80, dtype=torch.float64) % 12
    xs = torch.linspace(-1.5, 1.5, 80, dtype=torch.float64)
    for f in (torch.special.chebyshev_polynomial_t, torch.special.hermite_polynomial_he,
              torch.special.laguerre_polynomial_l):
        assert_same(f(xs.to("wse"), n.to("wse")), f(xs, n))


def test_erfinv_near_one_matches_cpu():
    # Vectorised libm (libmvec) erff differs from glibc's by an ulp, which erfinv's Newton
    # steps turn into a 1e-3 error next to +-1: the special functions must stay scalar calls.
    # The loop must be long enough to be parallel and vectorised (PARALLEL_MIN).
    x = torch.linspace(0.9997, 0.99999, 40000)
    assert_same(torch.erfinv(x.to("wse")), torch.erfinv(x))


def test_logcumsumexp_infinities_and_nan():
    x = torch.tensor([[float("-inf"), float("-inf"), 1.0, float("inf"), 2.0],
                      [3.0, float("nan"), 0.0, -1.0, float("inf")]], dtype=torch.float64)
    for dim in (0, 1):
        assert_same(torch.logcumsumexp(x.to("wse"), dim), torch.logcumsumexp(x, dim))
        assert_same(torch.cumprod(x.to("wse"), dim), torch.cumprod(x, dim))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_ldexp_of_integer_exponents_is_the_cpus_std_ldexp(dtype):
    """x * 2**e in the tensor's dtype underflowed past e = -149 in float: ldexp(inf, -200)
    gave NaN and ldexp(1e30, -200) zero. An int64 exponent past int's range wraps, as there."""
    x = torch.tensor([float("inf"), -float("inf"), 1e30, 3e38, 1.5, 1e-30, 0.0]).to(dtype)
    for e in (torch.tensor(-200), torch.tensor([-200, -200, -200, -150, 2 ** 40, -100, 7]),
              torch.tensor([3, -3, 2, 1, 0, 5, 9], dtype=torch.int32)):
        assert_same(torch.ldexp(x.to("wse"), e.to("wse")), torch.ldexp(x, e))
    e = torch.tensor(-2.5)          # a float exponent: x * pow(2, e), as the CPU's
    assert_same(torch.ldexp(x.to("wse"), e.to("wse")), torch.ldexp(x, e))


def test_frexp_and_fmax_special_values():
    x = torch.tensor([0.0, -0.0, 1.0, -3.5, 1e-40, float("nan"), 6e37])
    y = torch.tensor([float("nan"), 1.0, float("nan"), -4.0, 0.0, float("nan"), 1.0])
    assert_same(torch.frexp(x.to("wse")), torch.frexp(x))
    assert_same(torch.fmax(x.to("wse"), y.to("wse")), torch.fmax(x, y))
    assert_same(torch.fmin(x.to("wse"), y.to("wse")), torch.fmin(x, y))


def test_polygamma_inplace():
    x = torch.linspace(0.5, 4, 8)
    w = x.to("wse")
    w.polygamma_(2)
    assert_same(w, x.clone().polygamma_(2))
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.arange(4).to("wse").polygamma_(1)


def test_dtype_without_cpu_kernel_raises_like_cpu():
    x = torch.rand(4, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="not implemented for 'Half'"):
        torch.special.bessel_j0(x)
    with pytest.raises(RuntimeError, match="not implemented for 'Half'"):
        torch.special.bessel_j0(x.to("wse")).cpu()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_nextafter_steps_in_the_tensors_own_type(dtype):
    """nextafter of the half types stepped in float, and rounding back undid the step:
    nextafter(1, 2) gave 1, nextafter(-inf, 0) -inf."""
    bits = torch.arange(-2 ** 15, 2 ** 15, 97, dtype=torch.int32).to(torch.int16)
    special = [0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan"), 1e-45, 65504.0]
    x = torch.cat([bits.view(dtype) if dtype.itemsize == 2 else torch.randn(600, dtype=dtype),
                   torch.tensor(special, dtype=dtype)])
    for to in (torch.zeros_like(x), x.flip(0), torch.full_like(x, float("inf")),
               torch.full_like(x, -0.0), torch.full_like(x, float("nan"))):
        assert_same(torch.nextafter(x.to("wse"), to.to("wse")), torch.nextafter(x, to))
    ints = torch.tensor([1, -3, 0, 7])
    if dtype.itemsize == 2:     # an int tensor with a half one: converted to the half type
        y = torch.tensor([2.0, -4.0, -1.0, 7.0], dtype=dtype)
        assert_same(torch.nextafter(ints.to("wse").to(dtype), y.to("wse")),
                    torch.nextafter(ints.to(dtype), y))
