"""nn ops compiled natively: pooling, resampling, convolution, batch norm, losses and their
backwards (tensor/vjp.py, pool.py, conv.py, norm.py, pairwise.py, sampling.py, ctc.py).

Each test compares values and gradients with eager CPU and asserts that nothing ran through
the CPU fallback; a few check the machinery itself (the vjp trace cache, out= ops, float
summation order, the generated C's rounding)."""
import pytest
import torch
import torch.nn.functional as F

import lazydev
from conftest import assert_same, refuse_decompositions
from lazydev.tensor import vjp


def fallbacks():
    return lazydev.metrics.counters()["fallbacks"]


def run_both(fn, *inputs):
    """fn's outputs and the gradients of their sum, on the CPU and on wse, compared."""
    results = []
    for device in ("cpu", "wse"):
        xs = [x.detach().to(device).requires_grad_(x.requires_grad) for x in inputs]
        out = fn(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        total = sum(o.sum() for o in outs if o.dtype.is_floating_point)
        grads = torch.autograd.grad(total, [x for x in xs if x.requires_grad])
        results.append([o.detach() for o in outs] + list(grads))
    for a, e in zip(results[1], results[0]):
        assert_same(a, e)
    assert fallbacks() == {}


def leaf(*shape):
    return torch.randn(*shape).requires_grad_()


@pytest.mark.parametrize("kwargs", [dict(), dict(ceil_mode=True, count_include_pad=False),
                                    dict(stride=1, padding=1, divisor_override=3)])
def test_avg_pool(kwargs):
    run_both(lambda x: F.avg_pool2d(x, 3, **kwargs), leaf(2, 3, 7, 8))
    run_both(lambda x: F.avg_pool3d(x, 2, **kwargs), leaf(1, 2, 5, 4, 5))


@pytest.mark.parametrize("shape,kwargs", [
    ((4, 3, 28, 28), dict(kernel_size=2)),                 # tiling windows
    ((2, 3, 7, 9), dict(kernel_size=2)),                   # a remainder row and column
    ((2, 2, 8, 8), dict(kernel_size=(2, 4))),
    ((2, 3, 7, 9), dict(kernel_size=2, ceil_mode=True)),   # partial windows
    ((2, 3, 9, 9), dict(kernel_size=3, stride=2, padding=1)),  # overlapping windows add up
    ((3, 9, 11), dict(kernel_size=(3, 2), stride=(1, 2), dilation=2)),  # 3-d input, dilated
])
def test_max_pool2d_backward(shape, kwargs):
    x = torch.randn(*shape)
    x.view(-1, shape[-1])[0, :4] = 5.0    # ties: the first maximum gets the gradient
    run_both(lambda t: F.max_pool2d(t, **kwargs).pow(2), x.requires_grad_())


@pytest.mark.parametrize("shape,args", [((1, 2, 3, 1), ((1, 2), 1, (0, 1), (1, 2))),
                                        ((2, 1, 3, 4), ((2, 2), 1, (1, 1), (3, 3))),
                                        ((1, 1, 5), (2, 1, 1, 2))])
def test_max_pool_windows_of_padding_only(shape, args):
    """A dilated window can tap padding only: the CPU gives -inf and, as index, its first row
    and column stepped into the input; wse read another element (index -1 wrapped)."""
    pool = F.max_pool2d if len(shape) == 4 else F.max_pool1d
    x = torch.randn(*shape)
    assert_same(pool(x.to("wse"), *args, return_indices=True), pool(x, *args, return_indices=True))
    if shape[-1] > 1:       # (in [1, 2, 3, 1], the index of one such window is past the end)
        finite = lambda t: torch.where(torch.isfinite(t), t, 0.0).square()    # noqa: E731
        run_both(lambda t: finite(pool(t, *args)), torch.randn(*shape).requires_grad_())


def test_adaptive_pools_uneven_windows():
    run_both(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), leaf(2, 3, 7, 9))
    run_both(lambda x: F.adaptive_avg_pool3d(x, (2, 3, 4)), leaf(2, 5, 7, 6))
    run_both(lambda x: F.max_pool3d(x, 2, return_indices=True), leaf(1, 2, 4, 5, 6))


def test_fractional_max_pool_uses_the_cpu_generator_draws():
    torch.manual_seed(0)
    samples = torch.rand(2, 3, 2)
    run_both(lambda x, u: F.fractional_max_pool2d(x, 2, output_size=(4, 3), _random_samples=u),
             leaf(2, 3, 9, 7), samples)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic", "area"])
def test_interpolate_backward_is_traced_once(mode):
    vjp._GRAPHS.clear()
    for _ in range(2):
        run_both(lambda x: F.interpolate(x, size=(5, 7), mode=mode), leaf(2, 3, 4, 3))
    assert len(vjp._GRAPHS) == 1        # one trace per (op, argument metadata), then replayed


def test_antialiased_resize():
    run_both(lambda x: F.interpolate(x, size=(3, 11), mode="bilinear", antialias=True),
             leaf(2, 2, 9, 6))


def test_replicate_pad_shrink_and_margin_losses():
    run_both(lambda x: F.pad(x, (2, 1, 1, 3), mode="replicate"), leaf(2, 3, 4, 5))
    run_both(lambda x: F.softshrink(x, 0.5) + F.hardshrink(x, 0.3), leaf(20))
    target = torch.tensor([1, 0, 3])
    run_both(lambda x: F.multi_margin_loss(x, target.to(x.device)), leaf(3, 4))


@pytest.mark.parametrize("conv", [
    lambda x, w: F.conv3d(x, w, padding=1, stride=(1, 2, 1)),
    lambda x, w: F.conv_transpose3d(x, w.transpose(0, 1), stride=2, output_padding=1),
])
def test_conv3d_and_transposed(conv):
    run_both(conv, leaf(2, 4, 5, 6, 5), leaf(6, 4, 3, 3, 2))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_conv1d_backward_of_a_transposed_input(dtype):
    """A half conv's backward is traced on contiguous stand-ins: replayed on a transposed input
    (an embedding's (B, T, D) as (B, D, T)) whose output has length 1, a view in it raised."""
    run_both(lambda x, w, b: F.conv1d(x.transpose(1, 2), w, b),
             *(t.to(dtype).detach().requires_grad_() for t in (leaf(2, 3, 3), leaf(4, 3, 3),
                                                                leaf(4))))


@pytest.mark.parametrize("act", [F.silu, F.mish])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_silu_and_mish_gradients_are_rounded_once(act, dtype):
    """Note [Half-type backward composites]: their backward composites ran in the half type
    (half of a bfloat16 SiLU's gradient off, 3% past tolerance)."""
    g = torch.Generator().manual_seed(0)
    x, up = ((torch.randn(4096, generator=g) * 3).to(dtype) for _ in range(2))
    grads = []
    for d in ("cpu", "wse"):
        xd = x.detach().to(d).requires_grad_()
        act(xd).backward(up.to(d))
        grads.append(xd.grad)
    assert_same(grads[1], grads[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_group_norm_of_a_half_input_with_float_weights(dtype):
    """A half model that keeps its norm layers in float32: the CPU keeps mean and rstd in
    float32 and computes the gradients in float; wse kept them in the half type and its
    backward rounded there (the float32 weight gradient 1e4 times further from exact)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(16, 8, 64, generator=g) * 3 + 1).to(dtype)
    up = torch.randn(16, 8, 64, generator=g).to(dtype)
    w, b = 1 + 0.3 * torch.randn(8, generator=g), 0.3 * torch.randn(8, generator=g)
    got = []
    for d in ("cpu", "wse"):
        ts = [t.detach().to(d).requires_grad_() for t in (x, w, b)]
        out = F.group_norm(ts[0], 4, ts[1], ts[2])
        out.backward(up.to(d))
        got.append([out] + [t.grad for t in ts])
    assert_same(got[1], got[0])


def test_convert_conv2d_weight_memory_format_keeps_the_weights():
    """It does w.clone(memory_format=channels_last).resize_(size, memory_format=channels_last):
    wse's clone is row-major, and the new strides over it permuted the weights (convolutions
    off by up to 2.4, no error)."""
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 8, 8)
    want = conv(x)
    moved = torch.nn.utils.convert_conv2d_weight_memory_format(conv.to("wse"),
                                                               torch.channels_last)
    assert moved.weight.is_contiguous(memory_format=torch.channels_last)
    assert_same(moved(x.to("wse")), want)


@pytest.mark.parametrize("bias", [False, True])
def test_bf16_conv2d_gradients_are_rounded_once(bias):
    """The vjp of the half-type im2col matmuls summed the input gradient's columns in bfloat16:
    8% of a conv2d's input gradient was off beyond tolerance. It is computed in float and
    rounded once, as the CPU's kernel does."""
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).bfloat16() for s in ((4, 8, 16, 16), (8, 8, 3, 3),
                                                                  (8,)))
    inputs = (x, w, b) if bias else (x, w)
    run_both(lambda *a: F.conv2d(*a, padding=1), *(t.requires_grad_() for t in inputs))


def test_conv_transpose_groups_dilation():
    run_both(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(3, 2), padding=(1, 2),
                                                output_padding=(2, 1), groups=2, dilation=2),
             leaf(2, 4, 5, 4), leaf(4, 3, 3, 2), leaf(6))


def test_conv_weight_gradient_with_an_inf_input_matches_the_cpu():
    """The direct backward weight (csrc/wse_conv.c) multiplies the zero gradient of lanes
    past the row's end by inputs; an inf input there gave NaN where torch's gradient is
    finite. An inf in the last column is read only by taps that reach it."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 3, 10, 10, generator=g)
    x[0, 1, 4, 9] = float("inf")
    w = torch.randn(8, 3, 3, 3, generator=g)

    def weight_grad(device):
        wd = w.clone().to(device).requires_grad_()
        F.conv2d(x.to(device), wd, padding=1).sum().backward()
        return wd.grad.cpu()
    got, want = weight_grad("wse"), weight_grad("cpu")
    assert want.isinf().any() and not want.isnan().any()
    assert_same(got, want)


def test_grid_sampler_3d_matches_the_kernel_summation():
    grid = (torch.rand(2, 3, 4, 5, 3) * 2.4 - 1.2).requires_grad_()
    for padding in ("zeros", "border", "reflection"):
        run_both(lambda x, g: F.grid_sample(x, g, padding_mode=padding, align_corners=False),
                 leaf(2, 6, 5, 6, 7), grid)


def test_distances_and_bilinear():
    run_both(lambda a, b: torch.cdist(a, b, p=1.5), leaf(2, 5, 3), leaf(2, 4, 3))
    run_both(lambda a, b: torch.cdist(a, b), leaf(30, 3), leaf(4, 3))    # the matmul form
    run_both(lambda a: F.pdist(a, p=float("inf")), leaf(6, 4))
    run_both(F.bilinear, leaf(3, 4), leaf(3, 5), leaf(2, 4, 5), leaf(2))


def test_batch_norm_variants():
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    for training in (True, False):
        stats = [torch.randn(3), torch.rand(3) + 0.5]
        wse_stats = [s.to("wse") for s in stats]
        cpu = torch.ops.aten._native_batch_norm_legit(x, w, b, *stats, training, 0.1, 1e-5)
        out = torch.ops.aten._native_batch_norm_legit(
            x.to("wse"), w.to("wse"), b.to("wse"), *wse_stats, training, 0.1, 1e-5)
        assert_same(list(out), list(cpu))       # eval mode: empty save_mean/save_invstd too
        assert_same(wse_stats, stats)           # running statistics updated in place
    assert fallbacks() == {}


def test_layer_norm_weight_grad_of_size_one_dim():
    run_both(lambda x, w, b: F.layer_norm(x, (1,), w, b), leaf(3, 1), leaf(1), leaf(1))


def test_rrelu_draws_as_the_cpu_kernel():
    x = torch.randn(40)
    results = []
    for device in ("cpu", "wse"):
        torch.manual_seed(5)
        y = F.rrelu(x.to(device), 0.1, 0.3, training=True)
        results.append((y.cpu(), torch.rand(3)))   # and leaves the generator in the same state
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
    assert fallbacks() == {}


def test_ctc_loss():
    torch.manual_seed(0)
    log_probs = torch.randn(12, 3, 6).log_softmax(2).requires_grad_()
    targets = torch.randint(1, 6, (3, 5))
    run_both(lambda lp: F.ctc_loss(lp, targets.to(lp.device), [12, 10, 9], [5, 3, 4],
                                   reduction="none"), log_probs)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lengths_on", ["cpu", "wse"])
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss_with_lengths_as_tensors(reduction, lengths_on, concatenated):
    """Lengths as tensors, on the CPU as in PyTorch's own example: reduction="mean" divided
    the wse loss by the CPU lengths and raised DeviceMismatch."""
    torch.manual_seed(0)
    log_probs = torch.randn(12, 3, 6).log_softmax(2).requires_grad_()
    targets = torch.randint(1, 6, (3, 5))
    il, tl = torch.tensor([12, 10, 9]), torch.tensor([5, 3, 4])
    if concatenated:
        targets = torch.cat([targets[i, :n] for i, n in enumerate(tl.tolist())])

    def loss(lp):
        dev = lp.device if lengths_on == "wse" else "cpu"
        return F.ctc_loss(lp, targets.to(lp.device), il.to(dev), tl.to(dev),
                          reduction=reduction)
    run_both(loss, log_probs)


def test_out_variant_and_custom_op_run_natively():
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    out = torch.empty(3, 2).to("wse")
    torch.mm(a.to("wse"), b.to("wse"), out=out)
    assert_same(out, a @ b)
    chunked = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2, chunking_method="auto")
    for reduction in ("mean", "none"):      # two custom ops, the second with a traced backward
        run_both(lambda x, w: F.linear_cross_entropy(
            x, w, torch.tensor([1, 0, 2]).to(x.device), reduction=reduction, options=chunked),
            leaf(3, 4), leaf(5, 4))


def test_seqsum_adds_in_order_in_float():
    from lazydev.tensor.sampling import seqsum
    torch.manual_seed(0)
    t = torch.randn(3, 300) * 100
    expected = torch.zeros(3)
    for i in range(t.shape[1]):
        expected = expected + t[:, i]           # float32, left to right
    assert torch.equal(seqsum(t.to("wse"), 1).cpu(), expected)


def test_generated_c_rounds_each_operation():
    # (c + 1) * 22 - 1 rounds twice on the CPU; an fma would round once.
    c = torch.tensor([0.47814083099365234, 0.1, -0.3])
    assert torch.equal((((c.to("wse") + 1) * 22 - 1) / 2).cpu(), ((c + 1) * 22 - 1) / 2)


def test_node_keys_tell_minus_one_from_minus_two():
    # CPython hashes -1 like -2; replicate padding's two index aranges once shared one node.
    from lazydev.trace.ir import Node, Op
    a, b = (Node(Op.CONST, torch.int64, (), (), v) for v in (-1, -2))
    assert a.key != b.key
    x = torch.randn(2, 3, 4, 5)
    assert_same(F.pad(x.to("wse"), (2, 1, 1, 3), mode="replicate"),
                F.pad(x, (2, 1, 1, 3), mode="replicate"))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_weight_norm_backward(dim):
    """_weight_norm_interface_backward is the vjp of its forward (it ran on the CPU: a sync in
    every step of a weight-normed model)."""
    torch.manual_seed(0)
    v, g_shape = torch.randn(4, 3, 5), [1, 1, 1]
    g_shape[dim] = v.shape[dim]
    g = torch.rand(g_shape) + 0.5
    run_both(lambda v, g: torch._weight_norm(v, g, dim), v.requires_grad_(), g.requires_grad_())


@pytest.mark.parametrize("idx", [[3], [[0, 4, 0], [2, 4, 1]], 2], ids=["1d", "2d", "0d"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_embedding_lookups_and_gradients_are_the_cpus(idx, dtype):
    """aten.embedding lowered to one row gather (trace/lower_nn.py) for 0-, 1- and 2-d indices
    of either index dtype, rows of padding_idx getting no gradient; a weight that is not 2-d
    raises the CPU's error."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(5, 3, generator=g)
    up = torch.randn(torch.tensor(idx).shape + (3,), generator=g)
    outs = []
    for d in ("cpu", "wse"):
        w = weight.to(d, copy=True).requires_grad_()
        out = F.embedding(torch.tensor(idx, dtype=dtype, device=d), w, padding_idx=0)
        (out * up.to(d)).sum().backward()
        outs.append((out.detach().cpu(), w.grad.cpu()))
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
    assert fallbacks() == {}
    with pytest.raises(RuntimeError, match="'weight' must be 2-D"):
        F.embedding(torch.tensor(idx, device="wse"), torch.zeros(5, 3, 2, device="wse"))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5])
def test_embedding_max_norm_renormalises_the_rows_it_reads(norm_type):
    """nn.Embedding(max_norm=...) renormalises the named rows of its weight in place
    (embedding_renorm_ ran on the CPU); a row named twice is scaled once."""
    torch.manual_seed(0)
    weight = torch.randn(10, 4) * 2
    idx = torch.tensor([[1, 2, 2], [7, 1, 0]])
    outs = []
    for d in ("cpu", "wse"):
        w = weight.to(d, copy=True).requires_grad_()
        out = F.embedding(idx.to(d), w, max_norm=1.0, norm_type=norm_type)
        out.square().sum().backward()
        outs.append((out.detach().cpu(), w.detach().cpu(), w.grad.cpu()))
    assert not torch.equal(outs[0][1], weight)          # rows were renormalised
    torch.testing.assert_close(outs[1], outs[0])
    assert fallbacks() == {}


@pytest.mark.parametrize("idx", [[11], [-11]])
def test_embedding_max_norm_index_errors_are_the_cpus(idx):
    """embedding_renorm_ selects each row (its own message for an index out of range)."""
    errors = []
    for d in ("cpu", "wse"):
        with pytest.raises(IndexError) as e:
            F.embedding(torch.tensor(idx, device=d), torch.randn(10, 4, device=d),
                        max_norm=1.0).cpu()
        errors.append(str(e.value))
    assert errors[1] == errors[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_half_precision_softmax_is_lowered_in_float_and_rounded_once(monkeypatch, dtype, log):
    """Note [Half-precision in float] in trace/lower_nn.py: softmax and log_softmax of float16 and
    bfloat16, and their backward ops, are lowered (computed in float, rounded once), not left to
    torch's decompositions, which dispatched a dozen ops each call. Each op on the same inputs
    as the CPU's (a last-bit difference in a forward output grows in a backward that cancels),
    values as there, nothing on the CPU fallback."""
    aten = torch.ops.aten
    fwd, bwd = ((aten._log_softmax.default, aten._log_softmax_backward_data.default) if log
                else (aten._softmax.default, aten._softmax_backward_data.default))
    refuse_decompositions(monkeypatch, fwd, bwd)
    g = torch.Generator().manual_seed(0)
    x, grad = (torch.randn(64, 37, generator=g).to(dtype) for _ in range(2))
    out = fwd(x, 1, False)
    assert_same(fwd(x.to("wse"), 1, False), out)
    assert_same(bwd(grad.to("wse"), out.to("wse"), 1, dtype), bwd(grad, out, 1, dtype))
    assert fallbacks() == {}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_half_precision_gelu_is_lowered_in_float_and_rounded_once(monkeypatch, dtype,
                                                                  approximate):
    """Note [Half-precision in float]: GELU of float16 and bfloat16 and its backward (the exact
    one; tanh's backward stays with the decomposition) are lowered, not decomposed; each on the
    CPU's inputs, values as there, nothing on the CPU fallback."""
    aten = torch.ops.aten
    refuse_decompositions(monkeypatch, aten.gelu.default)
    if approximate == "none":
        refuse_decompositions(monkeypatch, aten.gelu_backward.default)
    g = torch.Generator().manual_seed(0)
    x, grad = ((torch.randn(64, 37, generator=g) * 3).to(dtype) for _ in range(2))
    assert_same(aten.gelu(x.to("wse"), approximate=approximate),
                aten.gelu(x, approximate=approximate))
    assert_same(aten.gelu_backward(grad.to("wse"), x.to("wse"), approximate=approximate),
                aten.gelu_backward(grad, x, approximate=approximate))
    assert fallbacks() == {}


@pytest.mark.parametrize("beta", [1, 0.5, 0])
def test_addmm_family_with_alpha_zero_skips_the_product(beta):
    """As BLAS (the CPU): alpha=0 ignores mat1 @ mat2, NaNs and all; wse gave NaN."""
    i, nan = torch.randn(3, 5), torch.full((3, 4), float("nan"))
    b, v = torch.randn(4, 5), torch.randn(4)
    cases = [(torch.addmm, (i, nan, b)), (torch.addmm, (i[0], nan, b)),
             (torch.addmv, (i[:, 0], nan, v)),
             (torch.addbmm, (i, nan.expand(2, 3, 4), b.expand(2, 4, 5)))]
    for f, args in cases:
        got = f(*(a.to("wse") for a in args), beta=beta, alpha=0)
        assert_same(got, f(*args, beta=beta, alpha=0))
    assert fallbacks() == {}


def test_convolution_arguments_the_cpu_refuses_are_refused():
    """A float32 input with a float64 weight, and a transposed convolution's output_padding
    not below its stride or its dilation, were computed (the meta kernel checks neither)."""
    x, x1 = torch.randn(1, 2, 5, 5), torch.randn(1, 2, 5)
    cases = [(F.conv2d, (x, torch.randn(3, 2, 3, 3, dtype=torch.float64)), {},
              "expected scalar type Float but found Double"),
             (F.conv1d, (x1, torch.randn(3, 2, 3)), {"bias": torch.randn(3).double()},
              r"bias type \(double\) should be the same"),
             (F.conv_transpose2d, (x, torch.randn(2, 3, 3, 3)), {"output_padding": (0, 1)},
              "output padding must be smaller"),
             (F.conv_transpose1d, (x1, torch.randn(2, 3, 2)), {"stride": 2, "output_padding": 2},
              "output padding must be smaller")]
    for f, args, kw, message in cases:
        with pytest.raises(RuntimeError, match=message):
            f(*args, **kw)
        with pytest.raises(RuntimeError, match=message):
            wkw = {k: v.to("wse") if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
            f(*(a.to("wse") for a in args), **wkw).cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_smooth_l1_backward_is_the_cpu_kernels(dtype):
    """The decomposition's sign() made the gradient at a NaN difference 0 (CPU: NaN), and with
    beta=0 the gradient at a zero difference 0 (CPU: -norm * grad)."""
    x = torch.tensor([float("nan"), 1.0, 0.5, 0.0, -2.0, 3.0, -0.25, 0.0], dtype=dtype)
    y = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, float("nan")], dtype=dtype)
    for beta in (0.0, 0.5, 1.0):
        for reduction in ("none", "mean", "sum"):
            run_both(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=beta),
                     x.clone().requires_grad_(), y)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
def test_threshold_of_integers_is_exact_and_checks_its_numbers(dtype):
    """F.threshold of an int tensor compared in float (2**24 + 1 became 2**24, INT_MAX
    INT_MIN), and a threshold out of the dtype's range was not refused."""
    info = torch.iinfo(dtype)
    x = torch.tensor([info.max, info.min, 5, 0, 1, 2 ** 24 + 1 if info.bits > 16 else 3],
                     dtype=dtype)
    for threshold, value in ((0.5, -2.0 if info.min else 9.0), (1.5, 7), (2, 4), (-2.7, 1)):
        try:
            want = F.threshold(x, threshold, value)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="without overflow"):
                F.threshold(x.to("wse"), threshold, value).cpu()
            assert "without overflow" in str(e)
            continue
        assert_same(F.threshold(x.to("wse"), threshold, value), want)
    if info.bits < 64:
        with pytest.raises(RuntimeError, match="without overflow"):
            F.threshold(x.to("wse"), 2 ** 40, 0)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multi_margin_loss_of_an_unbatched_input(reduction):
    """torch._decomp's forward gave reduction='none' of a 1-d input shape [1], not ATen's ():
    backward with the CPU's gradient shape failed."""
    run_both(lambda x: F.multi_margin_loss(x, torch.tensor(3, device=x.device),
                                           reduction=reduction), leaf(5))
    run_both(lambda x: F.multi_margin_loss(x, torch.tensor([3, 0], device=x.device), p=2,
                                           reduction=reduction), leaf(2, 5))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_ctc_loss_of_an_unbatched_input(reduction):
    """log_probs [T, C], 1-d targets and 0-dim lengths: a batch of one, as ATen makes it (wse
    iterated over the 0-dim lengths and raised an unrelated size error)."""
    lp = torch.randn(12, 6).log_softmax(1)
    for il in (12, 9):
        def loss(x, lengths_on=None):
            dev = lengths_on or x.device
            return F.ctc_loss(x, torch.tensor([1, 2, 3, 4], device=x.device),
                              torch.tensor(il, device=dev), torch.tensor(4, device=dev),
                              reduction=reduction)
        run_both(loss, lp.clone().requires_grad_())
        assert_same(loss(lp.to("wse"), "cpu"), loss(lp))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_logit_of_half_types_rounds_as_the_cpu(dtype):
    """ATen's kernel clamps to eps and 1 - eps rounded to the dtype (logit(1.0, eps=1e-6) is inf
    in half; wse gave 13.8) and rounds 1 - x and the odds to it."""
    torch.manual_seed(0)
    x = torch.cat([torch.rand(2000), torch.tensor([0.0, 1.0, -0.5, 1.5, float("nan"), 0.9999])])
    x = x.to(dtype)
    for eps in (None, 0.0, 1e-6, 1e-3, 0.25):
        assert_same(torch.logit(x.to("wse"), eps), torch.logit(x, eps))


def test_max_pool3d_and_adaptive_max_pool_pick_as_the_cpu():
    """torch._decomp's max_pool3d let a padding position win a window of -inf (a negative
    index; backward raised), and it and the adaptive max pools took a window's first NaN where
    the CPU takes the last."""
    x = torch.full((1, 1, 3, 3, 3), float("-inf"))
    run_both(lambda t: F.max_pool3d(t, 2, 2, 1, return_indices=True), x.requires_grad_())
    torch.manual_seed(0)
    y = torch.randn(2, 2, 5, 4, 6)
    y[0, 0, 1, 1, 1] = y[0, 0, 1, 1, 2] = y[1, 1, 4, 3, 5] = float("nan")
    for f in (lambda t: F.max_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0), (1, 1, 2), True,
                                     return_indices=True),
              lambda t: F.adaptive_max_pool3d(t, (2, 3, 4), return_indices=True),
              lambda t: F.adaptive_max_pool2d(t[:, :, 1], (3, 4), return_indices=True),
              lambda t: F.adaptive_max_pool1d(t[:, :, 1, 1], 4, return_indices=True)):
        assert_same(f(y.to("wse")), f(y))
