"""Sparse tensors on wse: host-resident, every op on them runs through the CPU fallback."""
import io

import pytest
import torch

import lazydev
from conftest import assert_same
from lazydev.tensor.sparse import WseSparseTensor

LAYOUTS = [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc]


def fallbacks():
    return lazydev.metrics.counters()["fallbacks"]


def dense(*shape):
    torch.manual_seed(0)
    d = torch.randn(*shape)
    d[d.abs() < 0.5] = 0
    return d


def leaf(t, device):
    return t.detach().to(device).requires_grad_()


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_a_move_to_wse_and_back_is_a_copy_with_the_layout(layout):
    cpu = dense(4, 5).to_sparse(layout=layout)
    expected = cpu.clone()
    w = cpu.to("wse")
    assert isinstance(w, WseSparseTensor) and w.device == torch.device("wse", 0)
    assert (w.layout, w.is_sparse, w.is_sparse_csr) == (cpu.layout, cpu.is_sparse, cpu.is_sparse_csr)
    assert (w._nnz(), w.sparse_dim(), w.dense_dim()) == (cpu._nnz(), cpu.sparse_dim(), cpu.dense_dim())
    cpu.values().mul_(2)              # the source changes after the move: w keeps its copy
    back = w.cpu()
    assert back.layout == layout and back.device.type == "cpu"
    assert_same(back, expected)
    assert fallbacks() == {}          # moves and metadata queries run nothing on the CPU


def test_to_sparse_and_to_dense_round_trip():
    d = dense(4, 5)
    w = d.to("wse")
    for layout in LAYOUTS:
        s = w.to_sparse(layout=layout)
        assert isinstance(s, WseSparseTensor)
        assert_same(s, d.to_sparse(layout=layout))
        back = s.to_dense()
        assert type(back) is lazydev.WseTensor      # a dense result is an ordinary wse tensor
        assert_same(back * 2 + 1, d * 2 + 1)
    assert fallbacks()["aten._to_dense.default"] == 3
    assert fallbacks()["aten._to_sparse.default"] == 3


def test_accessors_match_the_cpu():
    coo, csr = dense(4, 5).to_sparse(), dense(4, 5).to_sparse_csr()
    w_coo, w_csr = coo.to("wse"), csr.to("wse")
    assert_same(w_coo.indices(), coo.indices())
    assert_same(w_coo.values(), coo.values())
    assert w_coo.is_coalesced()
    assert_same(w_csr.crow_indices(), csr.crow_indices())
    assert_same(w_csr.col_indices(), csr.col_indices())
    assert_same(w_csr.values(), csr.values())
    assert fallbacks()["aten.values.default"] == 2


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_sparse_times_dense_runs_through_the_fallback(layout):
    s, m = dense(4, 5).to_sparse(layout=layout), torch.randn(5, 3)
    assert_same(s.to("wse") @ m.to("wse"), s @ m)
    assert_same(m.t().to("wse") @ s.to("wse").t(), m.t() @ s.t())   # the sparse one on the right
    assert_same(torch.sparse.mm(s.to("wse"), m.to("wse")), torch.sparse.mm(s, m))
    assert fallbacks()["aten.mm.default"] >= 2


def test_elementwise_and_in_place_ops():
    d = dense(4, 5)
    s, w = d.to_sparse(), d.to_sparse().to("wse")
    assert_same(w + w, s + s)
    w.mul_(3)
    assert_same(w, s * 3)
    assert fallbacks()["aten.mul_.Tensor"] == 1


def test_backward_through_sampled_addmm():
    mask, a, b = dense(4, 4).to_sparse_csr(), torch.randn(4, 3), torch.randn(3, 4)

    def run(device):
        m, x, y = leaf(mask, device), leaf(a, device), leaf(b, device)
        out = torch.sparse.sampled_addmm(m, x, y, beta=0.5, alpha=2.0)
        out.to_dense().sum().backward()
        return out, m.grad, x.grad, y.grad
    assert_same(run("wse"), run("cpu"))
    assert fallbacks()["aten.sparse_sampled_addmm.default"] == 1


def test_backward_to_a_sparse_leaf_and_a_sparse_embedding():
    s, m = dense(4, 5).to_sparse(), torch.randn(5, 3)

    def run(device):
        x, y = leaf(s, device), leaf(m, device)
        (torch.sparse.mm(x, y) ** 2).sum().backward()
        return x.grad, y.grad
    assert_same(run("wse"), run("cpu"))
    emb, idx = torch.nn.Embedding(10, 3, sparse=True), torch.tensor([[1, 2, 2], [0, 9, 1]])

    def step(device):
        e = torch.nn.Embedding(10, 3, sparse=True).to(device)
        e.load_state_dict(emb.state_dict())
        e(idx.to(device)).pow(2).sum().backward()
        torch.optim.SGD(e.parameters(), lr=0.1).step()
        return e.weight.grad, e.weight
    assert_same(step("wse"), step("cpu"))


def test_making_sparse_tensors_on_wse():
    coo, csr = dense(4, 5).to_sparse(), dense(4, 5).to_sparse_csr()
    assert_same(torch.sparse_coo_tensor(coo.indices(), coo.values(), coo.shape, device="wse"), coo)
    assert_same(torch.sparse_csr_tensor(csr.crow_indices(), csr.col_indices(), csr.values(),
                                        csr.shape, device="wse"), csr)
    for layout in LAYOUTS:
        assert_same(torch.zeros(3, 4, layout=layout, device="wse"),
                    torch.zeros(3, 4, layout=layout))
        assert_same(torch.zeros_like(torch.ones(3, 4, device="wse"), layout=layout),
                    torch.zeros_like(torch.ones(3, 4), layout=layout))


def test_printing_and_saving():
    s = dense(4, 5).to_sparse()
    w = s.to("wse")
    assert repr(w) == repr(s).replace("size=", "device='wse:0', size=")
    assert "device='wse:0'" in repr(s.to_sparse_csr().to("wse"))
    buf = io.BytesIO()
    torch.save(w, buf)
    buf.seek(0)
    assert_same(torch.load(buf), s)       # saved as a CPU tensor, as dense wse tensors are
