"""OpInfo: every float32 OpInfo entry CPU supports, run on wse and compared with the CPU.

The engine is lazydev/coverage.py (also `python -m lazydev.coverage`, which prints the report).
By default each entry runs its first LAZYDEV_OPINFO_SAMPLES samples (2), forward, in-place and
backward, which keeps the whole file within a few minutes on two cores;
LAZYDEV_OPINFO_FULL=1 runs every sample of every entry. An entry passes natively or through the
CPU fallback; entries that cannot be compared at all are skipped, and the few known failures
(coverage.KNOWN_FAILURES) are xfailed, each with its reason printed (-ra).
"""
import os

import pytest
import torch

from lazydev import coverage

FULL = os.environ.get("LAZYDEV_OPINFO_FULL") == "1"
SAMPLES = None if FULL else int(os.environ.get("LAZYDEV_OPINFO_SAMPLES", "2"))
ENTRIES = coverage.entries()


@pytest.mark.parametrize("op", ENTRIES, ids=[coverage.entry_id(op) for op in ENTRIES])
def test_opinfo(op):
    res = coverage.check_op(op, samples=SAMPLES, backward=True)
    if res.status == "skip":
        pytest.skip(res.reason)
    if res.status == "fail" and res.op in coverage.KNOWN_FAILURES:
        pytest.xfail(res.reason)       # listed, with the reason, in the coverage report too
    assert res.passed, f"{res.op}: {res.reason}"


def test_entries_are_float32_cpu():
    assert ENTRIES and all(torch.float32 in op.supported_dtypes("cpu") for op in ENTRIES)


def test_float64_arbiter_passes_a_closer_sum_and_fails_a_wrong_one():
    """Note [Float64 arbiter] (coverage.py): the CPU's float32 sum of 1e4 + 1e-3 - 1e4 is off by
    more than the table's atol; a result nearer the exact sum passes, a wrong one does not."""
    from torch.testing._internal.opinfo.core import SampleInput
    x = torch.tensor([1e4, 1e-3, -1e4])
    sample, expected = SampleInput(x), torch.sum(x)
    atol, _ = coverage.TOLERANCES[torch.float32]
    assert abs(expected.double() - x.double().sum()) > atol       # the CPU's own error
    exact = x.double().sum().float()

    def judge(value):
        return coverage._compare_judged(value, expected, "output", True,
                                        coverage._output64(torch.sum, sample, 0))
    assert judge(exact) == ["output judged against float64 (Note [Float64 arbiter])"]
    with pytest.raises(coverage.Mismatch):
        judge(exact + 1e-4)
    with pytest.raises(coverage.Mismatch):
        judge(torch.tensor(float("nan")))
    with pytest.raises(coverage.Mismatch):         # the dtype is compared as before
        judge(exact.double())
    with pytest.raises(coverage.Mismatch):         # and so is the number of results
        judge((exact, exact))


def test_float64_arbiter_does_not_excuse_a_float32_overflow():
    """exp(89) overflows float32 on the CPU but not in float64: the float64 result cannot judge
    that element, so wse must give the CPU's inf."""
    from torch.testing._internal.opinfo.core import SampleInput
    x = torch.tensor([1.0, 89.0])
    sample, expected = SampleInput(x), torch.exp(x)
    with pytest.raises(coverage.Mismatch):
        coverage._compare_judged(torch.tensor([2.7182817, 0.0]), expected, "output", True,
                                 coverage._output64(torch.exp, sample, 0))



def _mm_with_gradient_off_by(error: float):
    """torch.mm whose gradient of its first argument is `error` away from the exact one."""
    class Mm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(b)
            return a @ b

        @staticmethod
        def backward(ctx, g):
            (b,) = ctx.saved_tensors
            return (g.double() @ b.double().t() + error).float(), None
    return Mm.apply


def test_float64_arbiter_judges_gradients():
    """A gradient that differs from the CPU's is judged against the gradient computed in float64,
    as outputs are: nearer than the CPU's (plus the table) passes, further fails. Gradients used
    to be compared with the CPU's directly, which failed wse where its float32 error was the
    CPU's own size (conv3d, svd, grid_sample in the full OpInfo run). Here the "CPU" gradient is
    made 10 atol off and "wse" is exact, or 30 atol off."""
    from torch.testing._internal.opinfo.core import SampleInput
    atol, _ = coverage.TOLERANCES[torch.float32]
    sample = SampleInput(torch.ones(1, 3, requires_grad=True), args=(torch.rand(3, 2),))

    def check(wse_error):
        cpu_in = coverage._sample_args(sample, "cpu", True)
        wse_in = coverage._sample_args(sample, "cpu", True)    # only values matter here
        expected = _mm_with_gradient_off_by(10 * atol)(cpu_in[0], *cpu_in[1])
        actual = _mm_with_gradient_off_by(wse_error)(wse_in[0], *wse_in[1])
        return coverage._check_backward(torch.mm, sample, 0, cpu_in, expected, wse_in, actual)
    assert check(0.0) == ["grad judged against float64 (Note [Float64 arbiter])"]
    assert check(10 * atol) == []             # the CPU's own gradient: no judgement needed
    with pytest.raises(coverage.Mismatch):
        check(-30 * atol)


@pytest.mark.parametrize("argv,says", [
    (["--samples", "0"], "--samples: '0' is not an int of at least 1"),
    (["--timeout", "-1"], "--timeout: '-1' is not a number above 0"),
    (["--jobs", "-2"], "--jobs: '-2' is not an int of at least 0"),
    (["--ops", "add,no_such_op"], "no OpInfo entry is named 'no_such_op'"),
    (["--ops", "add", "--json", "/no/such/dir/out.json"], "--json: cannot write"),
])
def test_the_coverage_command_refuses_bad_arguments_before_running(argv, says, capsys):
    """Unknown --ops names were skipped without a word, --samples 0 ran nothing and passed, and
    an unwritable --json path failed after the whole run."""
    try:
        status = coverage.main(argv)
    except SystemExit as e:             # argparse's own refusal
        status = e.code
    out = capsys.readouterr()
    assert status == 2
    assert says in " ".join((out.out + out.err).split())
