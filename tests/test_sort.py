"""Sorting, selection and scatter-with-reduce ops beyond what the OpInfo samples exercise: ties
and stability, NaN placement, long and many rows (the parallel sort path), other dtypes, and
the syncs that value-dependent sizes cost. Every case also asserts it ran without a CPU fallback.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import lazydev
from conftest import assert_same

NAN = float("nan")


def native(fn, *args):
    """fn on wse and on the CPU, compared; and no CPU fallback on wse."""
    expected = fn(*args)
    actual = fn(*[a.to("wse") if isinstance(a, torch.Tensor) else a for a in args])
    assert_same(tuple(actual) if isinstance(actual, tuple) else actual,
                tuple(expected) if isinstance(expected, tuple) else expected)
    assert lazydev.metrics.counters()["fallbacks"] == {}
    return actual


def ties(*shape, low=0, high=4, dtype=torch.float32):
    torch.manual_seed(0)
    return torch.randint(low, high, shape).to(dtype)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stable_sort_keeps_the_order_of_ties(descending, dim):
    x = ties(6, 50)
    x[1, 3] = x[4, 7] = x[2, 0] = NAN
    native(lambda t: torch.sort(t, dim=dim, descending=descending, stable=True), x)


def test_sort_nan_first_when_descending_and_signed_zeros_tie():
    x = torch.tensor([NAN, 1.0, -0.0, float("-inf"), 0.0, float("inf"), NAN, -0.0])
    for descending in (False, True):
        native(lambda t: torch.sort(t, descending=descending, stable=True), x)


@pytest.mark.parametrize("shape,dim", [((100_000,), 0), ((64, 1000), 1), ((1000, 64), 0),
                                       ((8, 9, 700), 1)])
def test_sort_long_and_many_rows(shape, dim):
    torch.manual_seed(0)
    native(lambda t: torch.sort(t, dim=dim, stable=True), torch.randn(shape))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8,
                                   torch.bool, torch.float64, torch.float16, torch.bfloat16])
def test_sort_dtypes(dtype):
    x = ties(5, 40, low=-3 if dtype.is_signed else 0, high=3, dtype=dtype)
    native(lambda t: torch.sort(t, dim=1, stable=True, descending=True), x)
    native(lambda t: torch.argsort(t, dim=0, stable=True), x)


def test_sort_empty_and_zero_dim():
    native(lambda t: torch.sort(t, dim=1), torch.randn(3, 0))
    native(lambda t: torch.sort(t, dim=0), torch.randn(0, 4))
    native(lambda t: torch.sort(t), torch.tensor(2.5))
    native(lambda t: torch.topk(t, 1), torch.tensor(2.5))


def test_topk_and_kthvalue_with_nan_and_ties():
    x = torch.randn(4, 30)
    x[0, 5] = x[2, 9] = NAN
    native(lambda t: torch.topk(t, 4, dim=1), x)
    native(lambda t: torch.topk(t, 4, dim=1, largest=False), x)
    native(lambda t: torch.kthvalue(t, 30, dim=1), x)        # NaN is the largest
    native(lambda t: torch.topk(t, 3, dim=0).values, ties(7, 5))


def test_median_nanmedian_rows_with_nan():
    x = torch.randn(5, 8)
    x[1, 2] = x[1, 6] = x[3, 0] = NAN
    x[4] = NAN                                   # an all-NaN row: value NaN
    for fn in (torch.median, torch.nanmedian):
        native(lambda t: fn(t, dim=1, keepdim=True).values, x)
        native(lambda t: fn(t[:4], dim=1), x)    # indices too, where they are defined
        native(fn, x)
    native(lambda t: torch.median(t, dim=0), ties(9, 4, high=3, dtype=torch.int64))
    native(torch.median, torch.empty(0))
    with pytest.raises(IndexError, match="non-zero size"):
        torch.median(torch.randn(3, 0).to("wse"), dim=1)


def test_mode_picks_the_smallest_most_frequent_value():
    native(lambda t: torch.mode(t, dim=1), ties(6, 12))
    native(lambda t: torch.mode(t, dim=0, keepdim=True), ties(12, 3, dtype=torch.int64))
    native(lambda t: torch.mode(t, dim=0), torch.tensor([[2.0], [1.0]]))


def test_searchsorted_sides_sorter_and_nan():
    torch.manual_seed(0)
    seq = torch.sort(ties(3, 9)).values
    values = torch.tensor([[0.0, 1.0, 3.5], [NAN, 2.0, -1.0], [4.0, 3.0, 1.0]])
    native(lambda s, v: torch.searchsorted(s, v), seq, values)
    native(lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True), seq, values)
    raw = torch.randn(12)
    sorter = torch.argsort(raw)
    native(lambda s, v, o: torch.searchsorted(s, v, sorter=o), raw, torch.randn(2, 5), sorter)
    native(lambda s: torch.searchsorted(s, 0.25), torch.sort(torch.randn(7)).values)
    native(lambda s, v: torch.bucketize(v, s), torch.sort(torch.randn(7)).values, torch.randn(9))


@pytest.mark.parametrize("bad", [9, -1])
def test_searchsorted_sorter_out_of_range_raises_the_cpus_error(bad):
    """A sorter index outside the sequence raised IndexError (the gather's bounds check); the
    CPU raises RuntimeError 'sorter index out of range'."""
    seq, values, sorter = torch.tensor([1.0, 3.0, 5.0, 7.0]), torch.tensor([4.0]), \
        torch.tensor([0, 1, 2, bad])
    with pytest.raises(RuntimeError, match="sorter index out of range"):
        torch.searchsorted(seq, values, sorter=sorter)
    got = torch.searchsorted(seq.to("wse"), values.to("wse"), sorter=sorter.to("wse"))
    with pytest.raises(RuntimeError, match="sorter index out of range"):
        got.cpu()


def test_cummax_cummin_ties_and_nan():
    x = ties(3, 15)
    x[1, 4] = NAN
    native(lambda t: torch.cummax(t, dim=1), x)
    native(lambda t: torch.cummin(t, dim=0), x)
    native(lambda t: torch.cummax(t, dim=0), ties(9, 2, dtype=torch.int32))


@pytest.mark.parametrize("reduction", ["sum", "prod", "mean", "amax", "amin", "max", "min"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_with_duplicates(reduction, include_self):
    """(max and min: the CPU's kernel takes them as amax and amin; the meta kernel refused.)"""
    torch.manual_seed(0)
    x, src = torch.randn(4, 6), torch.randn(5, 6)
    index = torch.randint(0, 4, (5, 6))
    native(lambda a, i, s: a.scatter_reduce(0, i, s, reduction, include_self=include_self),
           x, index, src)
    xi, srci = ties(4, 6, high=9, dtype=torch.int64), ties(5, 6, high=9, dtype=torch.int64)
    native(lambda a, i, s: a.scatter_reduce(1, i, s, reduction, include_self=include_self),
           xi, index[:4, :4], srci)


_SUMS = {
    "index_add dim 0": lambda x, i, s: x.index_add(0, i, s),
    "index_add last dim": lambda x, i, s: x.t().index_add(1, i, s.t()),
    "index_add 1-d": lambda x, i, s: x[:, 0].index_add(0, i, s[:, 0]),
    "index_add alpha 2": lambda x, i, s: x.index_add(0, i, s, alpha=2),
    "index_add 3-d dim 1": lambda x, i, s: x[None].index_add(1, i, s[None]),
    "scatter_add": lambda x, i, s: x.scatter_add(0, i[:, None].expand(s.shape), s),
    "scatter add by a number": lambda x, i, s: x.scatter(
        0, i[:, None].expand(s.shape), 0.002, reduce="add"),
    "scatter_reduce sum": lambda x, i, s: x.scatter_reduce(0, i[:, None].expand(s.shape), s,
                                                           "sum", include_self=False),
    "scatter_reduce mean": lambda x, i, s: x.scatter_reduce(0, i[:, None].expand(s.shape), s,
                                                            "mean"),
    "index_put accumulate": lambda x, i, s: x.index_put((i,), s, accumulate=True),
    "put accumulate": lambda x, i, s: x.put(i, s[:, 0], accumulate=True),
    "index_reduce mean": lambda x, i, s: x.index_reduce(0, i, s, "mean"),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", _SUMS)
def test_half_precision_sums_into_one_element_round_as_the_cpu(name, dtype):
    """64 additions of 0.002 to 1.0: ATen's scatter kernels (and index_add where it is one)
    sum half-precision values in float32, 1.125 in bfloat16; index_put, put, index_reduce and
    index_add's other shapes round at each addition, 1.0. wse rounded at each everywhere."""
    x = torch.ones(2, 3, dtype=dtype)
    source = torch.full((64, 3), 0.002, dtype=dtype)
    index = torch.ones(64, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # index_reduce is in beta
        native(_SUMS[name], x, index, source)


def test_index_reduce_put_take():
    torch.manual_seed(0)
    x = torch.randn(5, 3)
    index = torch.tensor([0, 4, 0, 2])
    native(lambda a, i, s: a.index_reduce(0, i, s, "amax", include_self=False), x, index,
           torch.randn(4, 3))
    native(lambda a, i, s: a.put(i, s, accumulate=True), x, torch.tensor([0, -1, 0, 7]),
           torch.randn(4))
    native(lambda a, i: a.take(i), x, torch.tensor([[14, -15], [3, 3]]))


def test_mask_index_put_without_a_sync_when_values_broadcast():
    torch.manual_seed(0)
    x, mask = torch.randn(6, 4), torch.tensor([True, False, True, True, False, False])
    out = native(lambda t, m, v: t.index_put((m,), v), x, mask, torch.randn(4))
    assert lazydev.metrics.counters().get("syncs", 0) <= 1       # only the comparison's read
    put = torch.ops.aten.index_put.default
    native(lambda t, m: put(t, [None, m[:4]], torch.tensor(2.0), True), x, mask)
    native(lambda t, m, v: t.index_put((m,), v), x, mask, torch.randn(3, 4))   # one per row
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x.to("wse").index_put((mask.to("wse"),), torch.randn(2, 4).to("wse"))
    assert out.shape == x.shape


def test_a_uint8_mask_assigned_in_place_is_a_mask():
    """a[uint8 mask] = rows: ATen's deprecated uint8 mask (wse's in-place plan read it as row
    positions 1 and 0, writing both rows)."""
    for mask, values in (([1, 0], [9, 8, 7]), ([[1, 0, 1], [0, 1, 1]], [9, 8, 7, 6])):
        got = {}
        for d in ("cpu", "wse"):
            a = torch.arange(6, device=d).reshape(2, 3)
            with warnings.catch_warnings():      # the CPU's deprecation warning
                warnings.simplefilter("ignore")
                a[torch.tensor(mask, dtype=torch.uint8, device=d)] = torch.tensor(values,
                                                                                  device=d)
            got[d] = a
        assert_same(got["wse"], got["cpu"])


def test_mask_index_and_nonzero_unique():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    native(lambda t: t[t > 0], x)
    native(lambda t: t[:, t[0] > 0], x)
    native(torch.nonzero, ties(3, 4, 2, high=2))
    native(lambda t: torch.unique(t, return_inverse=True, return_counts=True), ties(7, 3))
    native(torch.unique, torch.tensor([2.0, NAN, 1.0, NAN, 2.0]))
    with pytest.raises(IndexError):
        torch.randn(4, 5).to("wse")[torch.ones(5, dtype=torch.bool).to("wse")]


def test_histc_edges_nan_and_data_range():
    x = torch.tensor([0.0, 1.0, 2.5, 10.0, 10.5, -0.5, NAN, 9.999])
    native(lambda t: torch.histc(t, bins=4, min=0, max=10), x)
    native(lambda t: torch.histc(t, bins=3), torch.tensor([1.0, 2.0, 2.0, 7.0]))
    native(lambda t: torch.histc(t, bins=3), torch.tensor([5.0, 5.0]))       # min == max
    with pytest.raises(RuntimeError):
        torch.histc(x.to("wse"), bins=3)                           # data range has a NaN


@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_empty_segments_and_backward(reduction):
    torch.manual_seed(0)
    data = torch.randn(7, 2)
    data[3, 1] = 0.0
    lengths = torch.tensor([3, 0, 4])
    fn = torch.ops.aten.segment_reduce.default
    native(lambda d, n: fn(d, reduction, lengths=n), data, lengths)
    native(lambda d, n: fn(d, reduction, lengths=n, initial=1.5), data, lengths)

    def grad(d, n):
        d = d.clone().requires_grad_(True)
        fn(d, reduction, lengths=n, unsafe=True).sum().backward()
        return d.grad
    native(grad, data, lengths)


def test_segment_reduce_checks_its_lengths():
    fn = torch.ops.aten.segment_reduce.default
    with pytest.raises(RuntimeError):
        fn(torch.randn(5).to("wse"), "sum", lengths=torch.tensor([2, 2]).to("wse"))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_empty_bags_padding_and_grad(mode):
    torch.manual_seed(0)
    weight = torch.randn(8, 3)
    indices, offsets = torch.tensor([1, 2, 4, 4, 7, 2]), torch.tensor([0, 0, 2, 6])

    def run(w, i, o):
        w = w.clone().requires_grad_(True)
        out = F.embedding_bag(i, w, o, mode=mode, padding_idx=4)
        out.sum().backward()
        return out, w.grad
    native(run, weight, indices, offsets)


def test_randint_like_draws_what_the_cpu_draws():
    torch.manual_seed(3)
    expected = torch.randint_like(torch.empty(4, 5), 2, 9)
    torch.manual_seed(3)
    actual = torch.randint_like(torch.empty(4, 5).to("wse"), 2, 9)
    assert_same(actual, expected)
    assert lazydev.metrics.counters()["fallbacks"] == {}


def _into(make, *outs):
    """make(d, outs) on both devices with out= tensors `outs` (shape, dtype): what it returns
    and what the out= tensors hold afterwards."""
    results = {}
    for d in ("cpu", "wse"):
        held = [torch.full(shape, 7, dtype=dtype, device=d) for shape, dtype in outs]
        returned = make(d, *held)
        results[d] = (returned, held)
    return results


@pytest.mark.parametrize("case", ["max", "sort", "aminmax", "min, other sizes"])
def test_ops_writing_a_tuple_of_out_tensors(case):
    """torch.max(x, 0, out=(v, i)): wse failed ('WseTensor is not an instance of sequence')."""
    x = lambda d: torch.tensor([[0.6, 1.7, 3.0], [2.5, -0.5, 3.0]], device=d)  # noqa: E731
    make, outs = {
        "max": (lambda d, v, i: torch.max(x(d), 0, out=(v, i)),
                [((3,), torch.float32), ((3,), torch.int64)]),
        "sort": (lambda d, v, i: torch.sort(x(d), 1, out=(v, i)),
                 [((2, 3), torch.float32), ((2, 3), torch.int64)]),
        "aminmax": (lambda d, lo, hi: torch.aminmax(x(d), dim=1, out=(lo, hi)),
                    [((2,), torch.float32), ((2,), torch.float32)]),
        "min, other sizes": (lambda d, v, i: torch.min(x(d), 1, keepdim=True, out=(v, i)),
                             [((0,), torch.float32), ((5,), torch.int64)]),
    }[case]
    lazydev.metrics.reset()
    results = _into(make, *outs)
    if case != "min, other sizes":      # out= tensors to resize run on the CPU
        assert lazydev.metrics.counters()["fallbacks"] == {}
    (cpu_ret, cpu_outs), (wse_ret, wse_outs) = results["cpu"], results["wse"]
    assert type(wse_ret) is type(cpu_ret) and len(wse_ret) == len(cpu_ret)
    for w, c, held in zip(wse_ret, cpu_ret, wse_outs):
        assert w is held                          # the out= tensors themselves are returned
        assert_same(w, c)
    for w, c in zip(wse_outs, cpu_outs):
        assert_same(w, c)


@pytest.mark.parametrize("op", [torch.sum, torch.prod, torch.cumsum, torch.cumprod])
def test_sums_into_integer_out_tensors_cast_the_input_first(op):
    """ATen sums a float tensor into a long out= tensor in long: [0.6, 2.5] sums to 0 + 2."""
    shape = (2,) if op in (torch.sum, torch.prod) else (2, 2)
    results = _into(lambda d, o: op(torch.tensor([[0.6, 1.7], [2.5, -0.5]], device=d), 0, out=o),
                    (shape, torch.int64))
    assert_same(results["wse"][1][0], results["cpu"][1][0])
