"""The IR node type (csrc/wse_node.c, Note [Native nodes] in lazydev/trace/ir.py)."""
import gc
import subprocess
import sys

import pytest
import torch

import _lazydev_node
import lazydev
from lazydev.trace.ir import Node, Op, local_key


def _chain(n: int):
    x = Node(Op.DATA, torch.float32, (4, 3), (), 0)
    nodes = [x]
    for i in range(n):
        srcs = tuple(nodes[j] for j in (i, i // 2, i // 3)[:i % 4])
        nodes.append(Node(Op.ADD, torch.float32, (4, 3), srcs, i % 5 or None))
    return nodes


def test_keys_are_the_python_tuple_hash_of_local_key_and_source_keys():
    # Note [IR keys]: key = hash((local_key, *source keys)); C computes it without the tuple.
    for n in _chain(300):
        local = local_key(n.op, n.dtype, n.shape, n.arg)
        assert n.key == hash((local, *[s.key for s in n.src]))
    a = _chain(1)[0]
    for local in (-1, -2, 0, 1, 2**61 - 1, 2**61, -(2**61), 2**63 - 1, -2**63):
        for src in ((), (a,), (a, a)):
            assert Node.make(Op.NEG, torch.float32, (), src, None, local).key == \
                hash((local, *[s.key for s in src]))


def test_nodes_are_immutable_and_not_tracked_by_the_cyclic_gc():
    a, b = _chain(3)[1:3]
    with pytest.raises(AttributeError, match="immutable"):
        b.op = Op.MUL
    with pytest.raises(AttributeError, match="immutable"):
        b.extra = 1
    assert not gc.is_tracked(b)
    assert not gc.is_tracked(b.src) and not gc.is_tracked(b.shape)
    assert b.replace(op=Op.MUL).op is Op.MUL and b.op is Op.ADD
    assert b.numel == 12 and repr(b) == "Node(ADD, float32[4, 3], arg=1, nsrc=1)"


def test_only_exact_tuples_are_untracked_and_every_node_is_counted():
    class Sources(tuple):           # a subclass instance has a __dict__: it can be in a cycle
        pass
    a = _chain(0)[0]
    src = Sources((a,))
    Node.make(Op.NEG, torch.float32, (), src, None, 3)
    assert gc.is_tracked(src)
    before = _lazydev_node.live()
    empty = object.__new__(Node)    # no fields, but allocated and freed like any node
    assert _lazydev_node.live() == before + 1
    with pytest.raises(AttributeError):
        empty.op
    del empty
    assert _lazydev_node.live() == before


def test_sources_must_be_a_tuple_of_nodes():
    with pytest.raises(TypeError, match="must be nodes"):
        Node(Op.NEG, torch.float32, (), (1,))
    with pytest.raises(TypeError, match="tuple"):
        Node(Op.NEG, torch.float32, (), [_chain(0)[0]])


def test_a_deep_chain_of_nodes_is_freed_without_exhausting_the_c_stack():
    code = ("import torch, _lazydev_node; from lazydev.trace.ir import Node, Op\n"
            "x = Node(Op.DATA, torch.float32, (), (), 0)\n"
            "for _ in range(1_000_000): x = Node.make(Op.NEG, torch.float32, (), (x,), None, 7)\n"
            "assert _lazydev_node.live() == 1_000_001\n"
            "del x\n"
            "assert _lazydev_node.live() == 0, _lazydev_node.live()\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_training_steps_do_not_leak_nodes():
    # The GC cannot see nodes, so a reference cycle through one would never be freed: the
    # number of live nodes must not grow once the step's plans and programs are cached.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("wse")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(5, 8).to("wse"), torch.randint(0, 4, (5,)).to("wse")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        lazydev.mark_step()
        return loss.item()
    for _ in range(4):
        step()
    gc.collect()
    before = _lazydev_node.live()
    for _ in range(6):
        step()
    gc.collect()
    assert _lazydev_node.live() == before
