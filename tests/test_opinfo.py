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
        return coverage._compare_judged(torch.sum, sample, 0, value, expected, "output", True)
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
        coverage._compare_judged(torch.exp, sample, 0, torch.tensor([2.7182817, 0.0]),
                                 expected, "output", True)
