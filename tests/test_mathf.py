"""The float math functions of csrc/wse_prefix.h (Note [Own float math]).

Each is run in a vectorised loop of a tiny program that pastes prefix_source() and is compiled
with the generated programs' flags, and compared with float64 torch (max error in ulp of the
float result) and with torch's own float32 CPU kernels (the suite's tolerance).
"""
import subprocess

import pytest
import torch

import lazydev.runtime as rt
from conftest import assert_same
from lazydev.compile import build, last_compiled
from lazydev.runtime import Buffer, Program

# name in the prefix -> (torch function, max ulp error allowed, measured over all 2^32 floats
# below the bound on |x| where it is defined)
FUNCS = {"wse_expf": (torch.exp, 1.0, None), "wse_erff": (torch.erf, 1.5, None),
         "wse_tanhf": (torch.tanh, 5.5, None),
         "wse_sinf_small": (torch.sin, 1.9, 2.0**17),    # Note [Tile-checked math] in
         "wse_expf_normal": (torch.exp, 1.0, 87.0)}      # compile/kernels.py

PROGRAM = r"""
/* s[0] picks the function, s[1] = n; bufs[0] = x, bufs[1] = f(x). */
int wse_entry(const wse_lib_t* lib, void* const* bufs, const double* s, int64_t* errinfo,
              int32_t* next, const volatile int32_t* stop) {
  (void)lib; (void)errinfo; (void)next; (void)stop;
  const float* x = bufs[0];
  float* y = bufs[1];
  const int64_t n = (int64_t)s[1];
  switch ((int)s[0]) {
%s
  }
  return 0;
}
"""
CASE = """    case %d:
      #pragma omp simd
      for (int64_t i = 0; i < n; i++) y[i] = %s(x[i]);
      break;"""


@pytest.fixture(scope="module")
def mathf(tmp_path_factory):
    """call(name, x): the prefix function `name` on a float32 tensor, in a vectorised loop."""
    directory = tmp_path_factory.mktemp("mathf")
    src, so = directory / "mathf.c", directory / "mathf.so"
    cases = "\n".join(CASE % (k, name) for k, name in enumerate(FUNCS))
    src.write_text(rt.prefix_source() + "\n" + PROGRAM % cases)
    cmd = [build.CC, *build.FLAGS, "-fopt-info-vec-optimized", str(src), "-o", str(so), "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    loops = {line.split(": ")[0] for line in res.stderr.splitlines()
             if line.startswith(str(src)) and "loop vectorized" in line}
    assert len(loops) == len(FUNCS), res.stderr       # every function's loop is vectorised
    prog = Program(str(so))

    def call(name, x):
        out = Buffer(x.numel() * 4)
        prog.run([Buffer.from_tensor(x.contiguous()), out], [list(FUNCS).index(name), x.numel()])
        return out.to_tensor(torch.float32, x.shape)

    return call


def _floats(bound=None):
    """Every 1024th float in [-10, 10], 400K random bit patterns (huge values, subnormals,
    NaNs of every payload) and the edges of the functions' ranges; with `bound`, those of
    smaller magnitude only, and every 1024th float up to it."""
    ten = torch.tensor(10.0).view(torch.int32).item()
    dense = torch.arange(0, ten, 1024, dtype=torch.int32).view(torch.float32)
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (400_000,), generator=g, dtype=torch.int64)
    inf, nan = float("inf"), float("nan")
    edges = torch.tensor([0.0, inf, nan, 1e-45, 1e-40, 1.1754942e-38, 1e-30, 1e-4, 0.5, 1.0,
                          3.9192, 3.9194, 4.0, 0.6249999, 0.625, 9.0, 9.1, 9.1000004, 87.3,
                          88.72, 88.73, 89.0, 89.1, 103.9, 104.0, 104.1, 150.0, 1e10, 3.4e38])
    x = torch.cat([dense, bits.to(torch.int32).view(torch.float32), edges])
    if bound is not None:
        top = torch.tensor(bound).view(torch.int32).item()
        wide = torch.arange(0, top, 1024, dtype=torch.int32).view(torch.float32)
        edge = torch.tensor([bound]).nextafter(torch.tensor(0.0))     # the largest below it
        x = torch.cat([x[x.abs() < bound], wide, edge])
    return torch.cat([x, -x])


def _ulp_error(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """|got - want| in units of the spacing of float32 at want (float64, finite want)."""
    _, e = torch.frexp(want.float().double().abs())        # binade of want rounded to float
    ulp = torch.ldexp(torch.ones_like(want), (e - 24).clamp(min=-149))
    return (got.double() - want).abs() / ulp


@pytest.mark.parametrize("name", FUNCS)
def test_accuracy_against_float64(mathf, name):
    fn, max_ulp, bound = FUNCS[name]
    x = _floats(bound)
    got, want = mathf(name, x), fn(x.double())
    nan, inf = want.isnan(), want.float().isinf()
    assert got[nan].isnan().all() and not got[~nan].isnan().any()
    assert torch.equal(got[inf], want[inf].float())
    finite = ~nan & ~inf
    err = _ulp_error(got[finite], want[finite])
    assert err.max() <= max_ulp, (err.max().item(), x[finite][err.argmax()].item())
    zeros = got == 0
    assert torch.equal(got[zeros].signbit(), want.float()[zeros].signbit())   # erf(-0) = -0


@pytest.mark.parametrize("name", FUNCS)
def test_matches_torch_cpu_float32(mathf, name):
    fn, _, bound = FUNCS[name]
    x = _floats(bound)
    assert_same(mathf(name, x), fn(x))


def test_exp_of_normal_results_is_exp_bit_for_bit_in_its_range(mathf):
    x = _floats(87.0)
    got, want = mathf("wse_expf_normal", x), mathf("wse_expf", x)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_erf_and_gelu_run_our_erf_on_the_device():
    x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(1)) * 3
    assert_same(torch.erf(x.to("wse")), torch.erf(x))
    code = "\n".join(last_compiled["units"])
    assert "wse_erff(" in code[code.index("/* Node("):]      # in a kernel, not just the prefix
    w = x.clone().requires_grad_()
    wd = x.clone().to("wse").requires_grad_()
    gelu = torch.nn.functional.gelu
    gelu(w).sum().backward()
    gelu(wd).sum().backward()
    assert_same(wd.grad, w.grad)


def test_tanh_runs_our_tanh_on_the_device():
    """wse_tanhf is libmvec's tanhf with AVX-512 and our rational one without; either way
    the kernel calls it, and values and gradients match the CPU."""
    x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(2)) * 4
    assert_same(torch.tanh(x.to("wse")), torch.tanh(x))
    code = "\n".join(last_compiled["units"])
    assert "wse_tanhf(" in code[code.index("/* Node("):]
    w = x.clone().requires_grad_()
    wd = x.clone().to("wse").requires_grad_()
    torch.tanh(w).sum().backward()
    torch.tanh(wd).sum().backward()
    assert_same(wd.grad, w.grad)
