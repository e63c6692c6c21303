"""Bad input on wse raises what the CPU raises: the same exception class and message, at the
call (these errors depend on shapes, dtypes and arguments, not on values)."""
import pytest
import torch

import lazydev

_CASES = {
    "max of nothing": lambda d: torch.ones(0, device=d).max(),
    "max over an empty dim": lambda d: torch.ones(0, 3, device=d).max(0),
    "min over an empty last dim": lambda d: torch.ones(2, 0, device=d).min(-1, keepdim=True),
    "amax of nothing": lambda d: torch.ones(0, device=d).amax(),
    "amax over an empty dim": lambda d: torch.ones(0, 3, device=d).amax(0),
    "amin, negative dim": lambda d: torch.ones(0, 3, device=d).amin(-2),
    "argmax of nothing": lambda d: torch.ones(0, device=d).argmax(),
    "argmin over an empty dim": lambda d: torch.ones(2, 0, device=d).argmin(-1),
    "aminmax of nothing": lambda d: torch.ones(0, device=d).aminmax(),
    "aminmax over an empty dim": lambda d: torch.ones(0, device=d).aminmax(dim=0),
    "integer mean": lambda d: torch.tensor([1, 2], device=d).mean(),
    "int ** -1": lambda d: torch.tensor([2, 3], device=d) ** -1,
    "int pow_ -2": lambda d: torch.tensor([2, 3], device=d).pow_(-2),
    "bool ** -1": lambda d: torch.tensor([True], device=d) ** -1,
    "mm of mismatched shapes": lambda d: torch.ones(2, 3, device=d) @ torch.ones(2, 3, device=d),
    "softmax dim 2 of 2-d": lambda d: torch.ones(2, 3, device=d).softmax(2),
    "half softmax dim -3": lambda d: torch.ones(2, 3, device=d).half().softmax(-3),
    "sort dim 2 of 2-d": lambda d: torch.ones(2, 3, device=d).sort(2),
    "reflect pad wider than the input": lambda d: torch.nn.functional.pad(
        torch.ones(1, 2, 3, device=d), (4, 4), mode="reflect"),
    # dtypes the CPU's kernels refuse to mix (the meta kernels do not check)
    "float64 batch into nn.Linear": lambda d: torch.nn.Linear(3, 2).to(d)(
        torch.ones(4, 3, dtype=torch.float64, device=d)),
    "float64 @ float32": lambda d: torch.ones(5, 2, 3, dtype=torch.float64, device=d)
    @ torch.ones(3, 4, device=d),
    "addmm float64 bias": lambda d: torch.addmm(torch.ones(2, dtype=torch.float64, device=d),
                                                torch.ones(2, 3, device=d),
                                                torch.ones(3, 2, device=d)),
    "mv": lambda d: torch.mv(torch.ones(2, 3, device=d, dtype=torch.float64),
                             torch.ones(3, device=d)),
    "layer_norm float64 weight": lambda d: torch.nn.functional.layer_norm(
        torch.ones(2, 3, device=d), (3,), torch.ones(3, dtype=torch.float64, device=d)),
    "batch_norm float64 stats": lambda d: torch.nn.functional.batch_norm(
        torch.ones(2, 3, device=d), torch.ones(3, dtype=torch.float64, device=d),
        torch.ones(3, device=d)),
    "nll_loss float64 weight": lambda d: torch.nn.functional.nll_loss(
        torch.ones(2, 3, device=d), torch.tensor([0, 1], device=d),
        weight=torch.ones(3, dtype=torch.float64, device=d)),
    "x[i] = float64 into float32": lambda d: torch.ones(3, device=d).__setitem__(
        torch.tensor([0], device=d), torch.ones(1, dtype=torch.float64, device=d)),
    "index_add float64 source": lambda d: torch.ones(3, device=d).index_add_(
        0, torch.tensor([0], device=d), torch.ones(1, dtype=torch.float64, device=d)),
    "embedding float indices": lambda d: torch.nn.functional.embedding(
        torch.ones(2, device=d), torch.ones(5, 3, device=d)),
    "index_select float index": lambda d: torch.ones(3, device=d).index_select(
        0, torch.ones(2, device=d)),
    "one_hot int32 classes": lambda d: torch.nn.functional.one_hot(
        torch.ones(3, dtype=torch.int32, device=d)),
    "masked_scatter with a uint8 mask": lambda d: torch.ones(3, device=d).masked_scatter(
        torch.ones(3, dtype=torch.uint8, device=d), torch.ones(3, device=d)),
    # arguments the meta kernels check and lazydev's own decompositions did not
    "adaptive_max_pool2d of one size": lambda d: torch.nn.functional.adaptive_max_pool2d(
        torch.ones(1, 2, 4, 4, device=d), (2,)),
    "avg_pool2d pad over half the window": lambda d: torch.nn.functional.avg_pool2d(
        torch.ones(1, 1, 5, 5, device=d), 2, 1, 2),
    "avg_pool2d divisor 0": lambda d: torch.nn.functional.avg_pool2d(
        torch.ones(1, 1, 5, 5, device=d), 2, divisor_override=0),
    "avg_pool1d negative pad": lambda d: torch.nn.functional.avg_pool1d(
        torch.ones(1, 1, 5, device=d), 2, 1, -1),
    "index_add source of another shape": lambda d: torch.ones(3, 4, device=d).index_add(
        0, torch.zeros(2, dtype=torch.long, device=d), torch.ones(2, 5, device=d)),
    "index_add source of a lower rank": lambda d: torch.zeros(3, 2, device=d).index_add(
        0, torch.tensor([0, 1], device=d), torch.tensor([1.0, 2.0], device=d)),
    # and the CPU's convolution checks, which no meta kernel makes
    "conv2d negative padding": lambda d: torch.nn.functional.conv2d(
        torch.ones(1, 1, 4, 4, device=d), torch.ones(1, 1, 2, 2, device=d), padding=(-1, 0)),
    "conv3d dilation 0": lambda d: torch.nn.functional.conv3d(
        torch.ones(1, 1, 4, 4, 4, device=d), torch.ones(1, 1, 2, 2, 2, device=d), dilation=0),
    "conv_transpose1d of a 1-d weight": lambda d: torch.nn.functional.conv_transpose1d(
        torch.ones(1, 2, 5, device=d), torch.ones(2, device=d)),
    "conv1d groups=3 with 2 output channels": lambda d: torch.nn.functional.conv1d(
        torch.ones(2, 6, 5, device=d), torch.ones(2, 2, 2, device=d), groups=3),
    "conv2d bias of 3 for 4 channels": lambda d: torch.nn.functional.conv2d(
        torch.ones(1, 2, 5, 5, device=d), torch.ones(4, 2, 3, 3, device=d),
        torch.ones(3, device=d)),
    "conv_transpose2d bias of 2 for 6 channels": lambda d: torch.nn.functional.conv_transpose2d(
        torch.ones(1, 6, 5, 5, device=d), torch.ones(6, 2, 3, 3, device=d),
        torch.ones(2, device=d), groups=3),
    # out= tensors of another dtype, which some kernels refuse and others cast into
    "gather out= float64": lambda d: torch.gather(
        torch.zeros(3, device=d), 0, torch.tensor([0, 1], device=d),
        out=torch.zeros(2, dtype=torch.float64, device=d)),
    "amax out= int32": lambda d: torch.amax(torch.zeros(3, 2, device=d), 0,
                                            out=torch.zeros(2, dtype=torch.int32, device=d)),
    "mul out= int64": lambda d: torch.mul(torch.zeros(2, device=d), 2,
                                          out=torch.zeros(2, dtype=torch.int64, device=d)),
    "argmax of bools": lambda d: torch.ones(3, dtype=torch.bool, device=d).argmax(),
    "topk of bools": lambda d: torch.ones(3, dtype=torch.bool, device=d).topk(2),
    "relu of bools": lambda d: torch.relu(torch.ones(2, dtype=torch.bool, device=d)),
    "cdist of integers": lambda d: torch.cdist(torch.ones(2, 3, dtype=torch.long, device=d),
                                               torch.ones(2, 3, dtype=torch.long, device=d)),
    "soft_margin_loss of integers": lambda d: torch.nn.functional.soft_margin_loss(
        torch.ones(2, dtype=torch.long, device=d), torch.ones(2, dtype=torch.long, device=d)),
    # found by bug hunts (session 28); each computed a value on wse, or read out of bounds
    "copy_ of a shape that does not broadcast": lambda d: torch.zeros(2, 3, device=d).copy_(
        torch.arange(2.0, device=d)),
    "copy_ of a longer 1-d tensor": lambda d: torch.zeros(4, device=d).copy_(
        torch.arange(3.0, device=d)),
    "copy_ of a CPU tensor of another shape": lambda d: torch.zeros(2, 4, device=d).copy_(
        torch.zeros(3, 4)),
    "copy_ of a tensor with more dims": lambda d: torch.zeros(4, device=d).copy_(
        torch.zeros(1, 4, device=d)),
    "copy_ into a view": lambda d: torch.zeros(4, 8, device=d)[::2].copy_(
        torch.zeros(2, 4, device=d)),
    "long add_ float": lambda d: torch.tensor([1, 2], device=d).add_(1.5),
    "long += float tensor": lambda d: torch.tensor([1, 2], device=d).__iadd__(
        torch.full((2,), 0.5, device=d)),
    "bool add_ 1": lambda d: torch.tensor([True, False], device=d).add_(1),
    "float add_ complex": lambda d: torch.tensor([1.0, 2.0], device=d).add_(1j),
    "long sqrt_": lambda d: torch.tensor([1, 4], device=d).sqrt_(),
    "long clamp_ float": lambda d: torch.tensor([1, 4], device=d).clamp_(min=1.5),
    "long div_": lambda d: torch.tensor([1, 4], device=d).div_(2),
    "long mul_ 0-dim CPU float": lambda d: torch.tensor([1, 4], device=d).mul_(torch.tensor(1.5)),
    "foreach add_ float into long": lambda d: torch._foreach_add_(
        [torch.tensor([1, 2], device=d)], 1.5),
    "float & int": lambda d: torch.tensor([1.5], device=d) & 1,
    "float | long tensor": lambda d: torch.tensor([1.5], device=d) | torch.tensor([1], device=d),
    "float << 1": lambda d: torch.tensor([1.5], device=d) << 1,
    "float bitwise_xor_": lambda d: torch.tensor([1.5], device=d).bitwise_xor_(1),
    "long - bool": lambda d: torch.tensor([1, 2], device=d) - torch.tensor([True, False],
                                                                         device=d),
    "gelu of long": lambda d: torch.nn.functional.gelu(torch.tensor([1, -2, 3], device=d)),
    "softmax of long": lambda d: torch.tensor([1, -2, 3], device=d).softmax(0),
    "log_softmax of uint8": lambda d: torch.tensor([1, 3], dtype=torch.uint8,
                                                   device=d).log_softmax(0),
    "var of long": lambda d: torch.tensor([1, -2, 3], device=d).var(),
    "std of bool": lambda d: torch.tensor([True, False], device=d).std(),
    "abs of bool": lambda d: torch.tensor([True, False], device=d).abs(),
    "lerp of long": lambda d: torch.lerp(torch.tensor([1, 2], device=d),
                                         torch.tensor([3, 4], device=d), 0.5),
    # bool has no order or sums on the CPU (wse computed them)
    "cumsum(dtype=bool)": lambda d: torch.ones(3, device=d).cumsum(0, dtype=torch.bool),
    "cumprod(dtype=bool)": lambda d: torch.ones(3, device=d).cumprod(0, dtype=torch.bool),
    "median of bool over a dim": lambda d: torch.ones(3, dtype=torch.bool, device=d).median(0),
    "nanmedian of bool": lambda d: torch.ones(3, dtype=torch.bool, device=d).nanmedian(),
    "searchsorted in bool": lambda d: torch.searchsorted(
        torch.tensor([False, True], device=d), torch.tensor([True], device=d)),
    "clamp(min=False) of bool": lambda d: torch.ones(3, dtype=torch.bool, device=d).clamp(
        min=False),
    "clamp of bool by bool tensors": lambda d: (lambda b: b.clamp(b, b))(
        torch.ones(3, dtype=torch.bool, device=d)),
    # index_put_ of a number under one uint8 mask is masked_fill_, which refuses uint8 (wse
    # read the mask as row positions 1 and 0, and filled everything)
    "a[uint8 mask] = number": lambda d: torch.arange(6, device=d).reshape(2, 3).__setitem__(
        torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.uint8, device=d), -1),
    "mvlgamma of bool": lambda d: torch.mvlgamma(torch.tensor([True], device=d), 1),
    "bool ** bool tensor": lambda d: (lambda b: b ** b)(torch.ones(3, dtype=torch.bool,
                                                                   device=d)),
    "searchsorted in a 0-d tensor": lambda d: torch.searchsorted(torch.tensor(1.0, device=d),
                                                               torch.tensor([1.0], device=d)),
    "searchsorted of a number in a 0-d tensor": lambda d: torch.searchsorted(
        torch.tensor(1.0, device=d), 1.0),
    "bucketize by 2-d boundaries": lambda d: torch.bucketize(torch.tensor([1.0], device=d),
                                                             torch.ones(1, 2, device=d)),
    "index_add of a 0-d source": lambda d: torch.zeros(3, device=d).index_add(
        0, torch.tensor([1], device=d), torch.tensor(2.0, device=d)),
    "index_add of a 1-d source into 2-d": lambda d: torch.zeros(2, 3, device=d).index_add(
        0, torch.tensor([1], device=d), torch.ones(3, device=d)),
    # numbers ATen converts with checked_convert: an overflow raises (wse wrapped)
    "int8 fill_(300)": lambda d: torch.zeros(2, dtype=torch.int8, device=d).fill_(300),
    "half clamp(min=1e10)": lambda d: torch.ones(2, dtype=torch.half, device=d).clamp(min=1e10),
    "half fill_(7e4)": lambda d: torch.ones(2, dtype=torch.half, device=d).fill_(7e4),
    "uint8 full 300": lambda d: torch.full((2,), 300, dtype=torch.uint8, device=d),
    "int8 full_like 300": lambda d: torch.full_like(torch.zeros(2, dtype=torch.int8, device=d),
                                                    300),
    "uint8 new_full 256": lambda d: torch.zeros(2, device=d).new_full((2,), 256,
                                                                      dtype=torch.uint8),
    "uint8 masked_fill_ 256": lambda d: torch.zeros(2, dtype=torch.uint8, device=d).masked_fill_(
        torch.tensor([True, False], device=d), 256),
    "float fill_(1e300)": lambda d: torch.zeros(2, device=d).fill_(1e300),
    "long scatter of inf": lambda d: torch.zeros(3, dtype=torch.long, device=d).scatter(
        0, torch.tensor([1], device=d), float("inf")),
    "uint8 index_fill_ 300": lambda d: torch.zeros(3, dtype=torch.uint8, device=d).index_fill_(
        0, torch.tensor([1], device=d), 300),
    "half ** 70000": lambda d: torch.ones(2, dtype=torch.half, device=d) ** 70000,
    "uint8 ** 300": lambda d: torch.ones(2, dtype=torch.uint8, device=d) ** 300,
    # bool has no subtraction, and a bool alpha needs a bool result (wse computed them)
    "1 - mask": lambda d: 1 - torch.tensor([True, False], device=d),
    "True - x": lambda d: True - torch.ones(2, device=d),
    "x.add(x, alpha=True)": lambda d: (lambda x: x.add(x, alpha=True))(torch.ones(2, device=d)),
    "sub(x, 1, alpha=True)": lambda d: torch.sub(torch.ones(2, device=d), 1, alpha=True),
    "x.sub_(x, alpha=True)": lambda d: (lambda x: x.sub_(x, alpha=True))(torch.ones(2, device=d)),
    "fmod of bools": lambda d: (lambda m: torch.fmod(m, m))(torch.tensor([True], device=d)),
    "remainder of bools": lambda d: (lambda m: m % m)(torch.tensor([True], device=d)),
    # mixed dtypes the CPU's kernels refuse (wse promoted them)
    "heaviside(f32, f64)": lambda d: torch.heaviside(torch.ones(3, device=d),
                                                     torch.ones(3, dtype=torch.float64, device=d)),
    "linalg.cross(f32, f64)": lambda d: torch.linalg.cross(
        torch.ones(2, 3, device=d), torch.ones(2, 3, dtype=torch.float64, device=d)),
    # indices the CPU refuses (wse wrote somewhere: x[[1.7]] = v wrote row 1)
    "setitem by a float index": lambda d: torch.zeros(4, 5, device=d).__setitem__(
        torch.tensor([1.7], device=d), 1.0),
    "index_put_ with too many indices": lambda d: torch.zeros(4, 5, device=d).index_put_(
        (torch.tensor([0], device=d),) * 3, torch.tensor(1.0, device=d)),
    "setitem by indices that do not broadcast": lambda d: torch.zeros(4, 5, device=d).__setitem__(
        (torch.tensor([0, 1], device=d), torch.tensor([0, 1, 2], device=d)), 1.0),
    # no floating kernel for bitwise ops, whichever operand makes the result floating (wse
    # compiled `|` of floats and failed the whole step at the sync)
    "bitwise_or(uint8, -2.5)": lambda d: torch.bitwise_or(
        torch.tensor([1, 2], dtype=torch.uint8, device=d), -2.5),
    "uint8 & float tensor": lambda d: torch.tensor([1, 2], dtype=torch.uint8, device=d) & (
        torch.tensor([1.0, 2.0], device=d)),
    # an index past its axis: the CPU's message names the axis (wse's did not)
    "x[[0], [7]]": lambda d: torch.zeros(4, 5, device=d)[torch.tensor([0], device=d),
                                                         torch.tensor([7], device=d)].cpu(),
    "x[:, :0][:, [0]]": lambda d: torch.zeros(4, 5, device=d)[:, :0][
        :, torch.tensor([0], device=d)].cpu(),
    # an alpha of another kind than an integral result; a selection along an empty axis
    "add(bool, True, alpha=0.5)": lambda d: torch.add(torch.tensor([True, False], device=d),
                                                      True, alpha=0.5),
    "add(long, long, alpha=0.5)": lambda d: torch.add(torch.arange(2, device=d),
                                                      torch.arange(2, device=d), alpha=0.5),
    "index_select along a 0-size dim": lambda d: torch.index_select(
        torch.zeros(0, 3, 0, device=d), 2, torch.tensor([0, 0], device=d)),
    # float-only math of integers (compiled, wse failed the whole step at the sync)
    "nextafter of int32": lambda d: (lambda x: torch.nextafter(x, x))(
        torch.tensor([1, 2], dtype=torch.int32, device=d)),
    "hypot of uint8": lambda d: (lambda x: torch.hypot(x, x))(
        torch.tensor([3, 4], dtype=torch.uint8, device=d)),
    # no integer kernel for rounding to decimals (wse gave zeros)
    "round(decimals=-1) of int64": lambda d: torch.tensor([45, -95], device=d).round(decimals=-1),
    "round_(decimals=1) of int16": lambda d: torch.tensor([45], dtype=torch.int16,
                                                          device=d).round_(decimals=1),
    # a float below 0 overflows an unsigned dtype (an integer wraps); wse wrapped it too
    "uint8 masked_fill -1.0": lambda d: torch.ones(2, dtype=torch.uint8, device=d).masked_fill(
        torch.tensor([True, False], device=d), -1.0),
    "uint8 fill_(-0.5)": lambda d: torch.ones(2, dtype=torch.uint8, device=d).fill_(-0.5),
    "uint8 full -1.0": lambda d: torch.full((2,), -1.0, dtype=torch.uint8, device=d),
    "half threshold value -1e9": lambda d: torch.nn.functional.threshold(
        torch.ones(3, dtype=torch.half, device=d), 1.0, -1e9),
    # an in-place op reading another view of the memory it writes (the CPU would read it
    # half-written; wse computed as if the input were cloned)
    "x.add_(x.t())": lambda d: (lambda x: x.add_(x.t()))(torch.ones(2, 2, device=d)),
    "x[1:].add_(x[:-1])": lambda d: (lambda x: x[1:].add_(x[:-1]))(torch.ones(6, device=d)),
    "y[2:10].copy_(y[0:8])": lambda d: (lambda y: y[2:10].copy_(y[:8]))(torch.ones(12, device=d)),
    "x.copy_(x.t())": lambda d: (lambda x: x.copy_(x.t()))(torch.ones(2, 2, device=d)),
    "x.addcmul_(x.t(), x)": lambda d: (lambda x: x.addcmul_(x.t(), x))(torch.ones(2, 2, device=d)),
    # an indexed write reading the memory it writes (ATen's assert_no_overlap; wse computed as
    # if the input were cloned)
    "x[[0, 1]] = x[2]": lambda d: (lambda x: x.__setitem__(torch.tensor([0, 1], device=d), x[2]))(
        torch.ones(6, 5, device=d)),
    "x.index_copy_(0, i, x[1:2])": lambda d: (lambda x: x.index_copy_(
        0, torch.tensor([0], device=d), x[1:2]))(torch.ones(6, 5, device=d)),
    "x.scatter_add_(0, i, x)": lambda d: (lambda x: x.scatter_add_(
        0, torch.tensor([[1, 0, 2]], device=d), x))(torch.ones(4, 3, device=d)),
    "gather(x, 0, i, out=x[:1])": lambda d: (lambda x: torch.gather(
        x, 0, torch.tensor([[1, 0, 2]], device=d), out=x[:1]))(torch.ones(4, 3, device=d)),
    "add out= overlapping an input": lambda d: (lambda y: torch.add(y[:6], y[6:], out=y[3:9]))(
        torch.ones(12, device=d)),
    # memory formats and strides the CPU refuses (wse's results are row-major, but these were
    # taken)
    "empty 3-d channels_last": lambda d: torch.empty(3, 2, 2, memory_format=torch.channels_last,
                                                     device=d),
    "empty preserve_format": lambda d: torch.empty(3, 2, memory_format=torch.preserve_format,
                                                   device=d),
    "3-d to channels_last": lambda d: torch.ones(3, 2, 2, device=d).to(
        memory_format=torch.channels_last),
    "zeros_like 3-d channels_last": lambda d: torch.zeros_like(
        torch.ones(3, 2, 2, device=d), memory_format=torch.channels_last),
    "empty_strided negative stride": lambda d: torch.empty_strided((2, 3), (-1, 2), device=d),
    # an empty batch: wse failed reshaping it
    "ctc_loss of an empty batch": lambda d: torch.nn.functional.ctc_loss(
        torch.zeros(5, 0, 4, device=d), torch.zeros(0, 3, dtype=torch.long, device=d),
        torch.zeros(0, dtype=torch.long, device=d), torch.zeros(0, dtype=torch.long, device=d)),
    # class targets are Long or Byte: an int32 one was taken
    "cross_entropy int32 target": lambda d: torch.nn.functional.cross_entropy(
        torch.ones(4, 5, device=d), torch.tensor([0, 1, 2, 3], dtype=torch.int32, device=d)),
    "nll_loss 2d int32 target": lambda d: torch.nn.functional.nll_loss(
        torch.ones(2, 3, 2, 2, device=d), torch.zeros(2, 2, 2, dtype=torch.int32, device=d)),
}


@pytest.mark.parametrize("name", _CASES)
def test_bad_input_raises_the_cpu_error(name):
    with pytest.raises(Exception) as cpu:
        _CASES[name]("cpu")
    with pytest.raises(Exception) as wse:
        _CASES[name]("wse")
    assert (type(wse.value), str(wse.value)) == (type(cpu.value), str(cpu.value))
    lazydev.mark_step()


@pytest.mark.parametrize("make", [
    lambda d: torch.tensor([2, 3, 1, -1], device=d) ** torch.tensor([-1, 2, -1, -3], device=d),
    lambda d: torch.pow(2, torch.tensor([-1, 2], device=d)),
    lambda d: torch.tensor([2, 4], device=d) ** -1.0,
    lambda d: torch.ones(0, 3, device=d).amax(1),
    lambda d: torch.ones(0, 2, device=d).logsumexp(0),
    # mixes the CPU allows: asked once, then recorded as before
    lambda d: torch.nn.functional.layer_norm(torch.ones(2, 3, device=d, dtype=torch.bfloat16),
                                             (3,), torch.ones(3, device=d) * 2),
    lambda d: torch.nn.functional.batch_norm(
        torch.arange(6.0, device=d).view(2, 3).bfloat16(), torch.zeros(3, device=d),
        torch.ones(3, device=d), torch.ones(3, device=d), torch.zeros(3, device=d)),
    lambda d: torch.nn.functional.embedding(torch.tensor([2, 0], dtype=torch.int32, device=d),
                                            torch.arange(15.0, device=d).view(5, 3)),
    lambda d: torch.add(torch.arange(2.0, device=d), 1,
                        out=torch.zeros(2, dtype=torch.float64, device=d)),
    lambda d: torch.nn.functional.conv_transpose2d(
        torch.arange(50.0, device=d).view(1, 2, 5, 5), torch.ones(2, 3, 3, 3, device=d),
        torch.ones(6, device=d), groups=2),
    # torch._decomp's addcmul refuses a float value for ints (ValueError); the CPU casts it
    lambda d: torch.tensor([1, 2], device=d).addcmul(torch.tensor([1, 2], device=d),
                                                     torch.tensor([3, 4], device=d), value=2.5),
    # bool clamped by ints and raised to a long tensor's power: int64 results the CPU allows
    lambda d: torch.tensor([True, False], device=d).clamp(0, 1),
    lambda d: torch.tensor([2, 3], device=d) ** torch.tensor([True, False], device=d),
    # asked of zeros, the CPU divided a long by zero: ask it with ones
    lambda d: torch.fmod(torch.tensor([True, False], device=d), torch.tensor([3, 2], device=d))],
    ids=range(14))
def test_the_same_calls_with_good_input_compute(make):
    """What the CPU allows (a negative exponent tensor: 2 ** -1 == 0) stays allowed."""
    want = make("cpu")
    got = make("wse").cpu()
    assert make("wse").cpu().equal(got)          # again, from the remembered verdict
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_a_masked_scatter_reading_what_it_writes_gives_the_cpu_loops_values():
    """x.masked_scatter_(x > 0, x) reads values the CPU's loop has already overwritten; wse
    computed it as if x were cloned first."""
    got = {}
    for d in ("cpu", "wse"):
        x = torch.tensor([-1.0, 2.0, 3.0, -4.0, 5.0, 6.0], device=d)
        got[d] = x.masked_scatter_(x > 0, x).cpu()
    torch.testing.assert_close(got["wse"], got["cpu"], atol=0, rtol=0)


def test_a_float_alpha_accepted_for_floats_is_refused_for_an_integral_result():
    """The CPU's verdict was kept under the checked argument's dtype only (alpha's): after
    add(x_float, y, alpha=0.5), add(mask, True, alpha=0.5) went through."""
    torch.add(torch.ones(2, device="wse"), 1.0, alpha=0.5)
    with pytest.raises(RuntimeError, match="argument alpha must not be a floating point"):
        torch.add(torch.tensor([True, False], device="wse"), True, alpha=0.5)


def test_a_masked_fill_by_setitem_lets_no_other_index_put_of_its_dtypes_through():
    """x[mask] = -2.5 of a long x is the CPU's masked_fill, which casts; the verdict was kept
    for its dtypes, and x[[1]] = float values (refused by the CPU) was then truncated."""
    for d in ("cpu", "wse"):
        x = torch.zeros(4, 5, dtype=torch.int64, device=d)
        x[x > 50] = torch.tensor(-2.5, device=d)
        with pytest.raises(RuntimeError, match="Index put requires the source and destination"):
            x[torch.tensor([1], device=d)] = torch.full((5,), 2.5, device=d)
        assert x.cpu().eq(0).all()


@pytest.mark.parametrize("make", [
    lambda d: torch.randn(-1, device=d), lambda d: torch.empty(2, -3, device=d),
    lambda d: torch.empty_strided((-1, 2), (2, 1), device=d),
    lambda d: torch.ones(2, device=d).new_empty((-2,))], ids=range(4))
def test_a_negative_size_raises_the_cpu_error_and_leaves_the_trace_whole(make):
    """torch.randn(-1, device="wse") made a storage of -1 elements before failing: while its
    traceback lived (a notebook keeps the last one), every mark_step failed on it."""
    with pytest.raises(RuntimeError) as cpu:
        make("cpu")
    with pytest.raises(RuntimeError) as wse:
        make("wse")
    assert str(wse.value) == str(cpu.value)      # (`wse` keeps the failed call's frames alive)
    y = torch.ones(3, device="wse") * 2
    lazydev.mark_step()
    assert y.cpu().tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("make", [
    lambda d: (lambda x: x.add_(x))(torch.arange(4.0, device=d)),
    lambda d: (lambda x: (x[::2].add_(x[1::2]), x)[1])(torch.arange(12.0, device=d)),
    lambda d: (lambda x: (x[:6].add_(x[6:]), x)[1])(torch.arange(12.0, device=d)),
    lambda d: (lambda x: (x[:, 0].add_(x[:, 1]), x)[1])(torch.arange(4.0, device=d).view(2, 2)),
    lambda d: (lambda x: x.copy_(x))(torch.arange(4.0, device=d))], ids=range(5))
def test_in_place_ops_on_views_the_cpu_allows_compute(make):
    """The same view, disjoint views, and views with gaps (which ATen does not judge) are
    written as on the CPU."""
    assert make("wse").cpu().tolist() == make("cpu").tolist()


def test_a_refused_op_loses_no_other_value():
    """`float & 1` recorded a node the C compiler then refused at the sync, and every other
    value pending in that step was lost with it."""
    a = torch.ones(3, device="wse") * 2
    with pytest.raises(NotImplementedError):
        torch.tensor([1.5], device="wse") & 1
    assert a.cpu().tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int32, torch.int16,
                                   torch.int64])
def test_negating_a_negative_constant_compiles(dtype):
    """fill_(-1) then neg_() in one trace generated `(--1.0)`, a decrement: a CompileError."""
    x = torch.zeros(3, dtype=dtype, device="wse")
    x.fill_(-1)
    x.neg_()
    y = torch.zeros(3, dtype=dtype, device="wse").fill_(-2).abs_()
    assert x.cpu().tolist() == [1, 1, 1] and y.cpu().tolist() == [2, 2, 2]



@pytest.mark.parametrize("layout", [torch.jagged, torch.strided], ids=str)
def test_a_nested_tensor_of_wse_tensors_says_it_is_not_supported(layout):
    """torch.nested of wse tensors failed inside PyTorch's symbolic sizes (jagged:
    AttributeError: 'NestedIntNode' object has no attribute 'add') or an internal assert
    (strided: "NestedTensorImpl doesn't support sizes"); it now says what to do."""
    x = torch.randn(2, 4, 8, device="wse")
    with pytest.raises(NotImplementedError, match="nested tensors are not supported on wse"):
        torch.nested.nested_tensor([x[0, :2], x[1, :4]], layout=layout)
    torch.testing.assert_close((x * 2).cpu(), x.cpu() * 2)


def test_a_random_draw_the_host_has_no_memory_for_leaves_the_next_sync_whole():
    """torch.rand(2**37, device='wse') fails on the host; its tensor, made by empty and held by
    the exception's frames, stayed pending, and the next sync of unrelated values ran out of
    device memory computing its zeros."""
    with pytest.raises(RuntimeError, match="allocate") as failed:
        torch.rand(2 ** 37, device="wse")
    y = torch.arange(3.0).to("wse") * 2
    assert y.tolist() == [0.0, 2.0, 4.0]
    del failed
