"""Linear algebra on LAPACK (trace/lower_linalg.py, csrc/wse_linalg.c): values and gradients
against the CPU, no CPU fallback, deferred LAPACK errors."""
import pytest
import torch

import lazydev
from conftest import assert_same


def _spd(*batch, n=4, dtype=torch.float32):
    a = torch.randn(*batch, n, n, dtype=dtype)
    return a @ a.mT + n * torch.eye(n, dtype=dtype)


def _check(fn, *inputs, grad=True):
    """fn on wse matches fn on the CPU (outputs, and gradients of their sum), natively."""
    def run(device):
        xs = [x.detach().clone().to(device).requires_grad_(grad and x.is_floating_point())
              for x in inputs]
        out = fn(*xs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        grads = []
        if grad:
            total = sum(o.sum() for o in outs if o.is_floating_point() and o.requires_grad)
            grads = list(torch.autograd.grad(total, [x for x in xs if x.requires_grad]))
        return outs, grads
    expected, actual = run("cpu"), run("wse")
    assert_same(actual[0], expected[0])
    assert_same(actual[1], expected[1])
    assert lazydev.metrics.counters()["fallbacks"] == {}


CASES = {
    "solve_triangular": (lambda a, b: torch.linalg.solve_triangular(a.triu(), b, upper=True,
                                                                    left=False),
                         lambda: (_spd(2), torch.randn(2, 3, 4))),
    "cholesky": (torch.linalg.cholesky, lambda: (_spd(3),)),
    "cholesky_solve": (torch.cholesky_solve, lambda: (torch.randn(4, 2),
                                                      torch.linalg.cholesky(_spd()))),
    "cholesky_inverse": (torch.cholesky_inverse, lambda: (torch.linalg.cholesky(_spd()),)),
    "lu": (torch.linalg.lu, lambda: (torch.randn(2, 5, 3),)),
    "lu_factor_solve": (lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b,
                                                           adjoint=True),
                        lambda: (_spd(2) + torch.randn(4, 4), torch.randn(4, 2))),
    "solve": (torch.linalg.solve, lambda: (_spd(2) + torch.randn(2, 4, 4), torch.randn(4))),
    "inv": (torch.linalg.inv, lambda: (_spd(3),)),
    "det": (lambda a: (torch.linalg.det(a), *torch.linalg.slogdet(a)), lambda: (_spd(2),)),
    "qr": (lambda a: torch.linalg.qr(a, mode="complete"), lambda: (torch.randn(2, 3, 5),)),
    "householder": (lambda a, tau, c: (torch.linalg.householder_product(a, tau),
                                       torch.ormqr(a, tau, c, transpose=True)),
                    lambda: (*torch.geqrf(torch.randn(4, 3)), torch.randn(4, 2))),
    "svd": (lambda a: torch.linalg.svd(a, full_matrices=False), lambda: (torch.randn(2, 5, 3),)),
    "eigh": (torch.linalg.eigh, lambda: (_spd(2),)),
    "pinv": (torch.linalg.pinv, lambda: (torch.randn(3, 5),)),
    "lstsq": (lambda a, b: torch.linalg.lstsq(a, b, driver="gels")[:2],
              lambda: (torch.randn(5, 3), torch.randn(5, 2))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_matches_cpu_natively(name):
    torch.manual_seed(0)
    fn, make = CASES[name]
    _check(fn, *make())


def test_ldl_forward():       # ldl_solve has no derivative
    torch.manual_seed(0)
    _check(lambda a, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a), b),
           _spd() - 6 * torch.eye(4), torch.randn(4, 3), grad=False)


def test_float64():
    torch.manual_seed(0)
    _check(lambda a: torch.linalg.eigh(a)[0], _spd(2, dtype=torch.float64))


def test_lapack_error_is_deferred_to_the_next_sync():
    bad = -torch.eye(3).to("wse")                 # not positive-definite
    syncs = lazydev.metrics.counters()["syncs"]
    L = torch.linalg.cholesky(bad)
    assert lazydev.metrics.counters()["syncs"] == syncs     # the check did not sync
    with pytest.raises(torch.linalg.LinAlgError, match="leading minor of order 1"):
        L.cpu()
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\)"):
        torch.linalg.inv(torch.stack([torch.eye(2), torch.zeros(2, 2)]).to("wse")).cpu()


def test_ex_variants_return_info_without_raising():
    L, info = torch.linalg.cholesky_ex(-torch.eye(3).to("wse"))
    assert info.cpu().item() == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_routine_short_of_scratch_raises_and_the_next_call_runs(name):
    """Note [Scratch failures] (csrc/wse_runtime.c): LAPACK scratch that cannot be allocated
    fails the program with DeviceOutOfMemoryError instead of aborting the process."""
    from _lazydev_wse import lib
    from lazydev.runtime import DeviceOutOfMemoryError
    torch.manual_seed(0)        # the inputs test_linalg_matches_cpu_natively checks
    fn, make = CASES[name]
    inputs = make()
    xs = [x.to("wse") for x in inputs]
    lazydev.mark_step()
    lib.wse_set_scratch_limit(16)
    try:
        out = fn(*xs)
        with pytest.raises(DeviceOutOfMemoryError, match="scratch"):
            [o.cpu() for o in (out if isinstance(out, (tuple, list)) else [out])]
    finally:
        lib.wse_set_scratch_limit(0)
    _check(fn, *inputs)
