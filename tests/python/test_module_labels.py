"""Module labels (by_module): native module hooks, one call into the core per module call event,
sessions reached per thread, modules named once per measurement."""

import json
import threading

import pytest
import torch
from torch import nn

import torchscan
from torchscan import _hooks, _labels
from torchscan._native import ops

X = torch.randn(4, 8)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.block(x))


# addmm: 2 FLOPs per multiply-add of the 4x8 @ 8x8 product; the bias add is not counted
# (PyTorch's flop-counter convention, docs/formulas.md).
LINEAR = 2 * 4 * 8 * 8
HEAD = 2 * 4 * 8 * 2
RELU = 4 * 8


def global_hooks() -> tuple[int, int]:
    module = nn.modules.module
    return len(module._global_forward_pre_hooks), len(module._global_forward_hooks)


def test_labels_by_identity_with_hand_computed_values():
    net = Net()
    report = torchscan.measure_flops(lambda: net(X))
    assert report["by_module"] == {
        "Net": LINEAR + RELU + HEAD,
        "Net.block": LINEAR + RELU,
        "Net.block.fc": LINEAR,
        "Net.block.act": RELU,
        "Net.head": HEAD,
    }
    named = torchscan.measure_flops(lambda: net(X), modules=net)
    assert named["by_module"] == report["by_module"]


def test_the_hooks_are_native_and_removed_after_the_measurement():
    before = global_hooks()
    seen = []

    def workload():
        seen.append(nn.modules.module._global_forward_pre_hooks.get(_labels._PRE_HOOK_KEY))
        Net()(X)

    torchscan.measure_flops(workload)
    assert seen == [_labels._module_pre_hook]
    assert _labels._native_pre is _hooks.pre and _labels._native_post is _hooks.post
    assert global_hooks() == before
    assert not _labels.labelling()


def test_modules_outside_the_roots_are_passed_over():
    net, other = Net(), Net()
    report = torchscan.measure_flops(lambda: (net(X), other(X)), modules=net.block)
    assert report["by_module"] == {"Block": LINEAR + RELU, "Block.fc": LINEAR, "Block.act": RELU}
    assert report["total"]["value"] == 2 * (LINEAR + RELU + HEAD)
    assert torchscan.measure_flops(lambda: net(X), modules=[])["by_module"] == {}


def test_nested_sessions_label_the_same_calls_each_by_its_own_names():
    net = Net()
    with torchscan.count_flops(modules=net.block) as outer:
        inner = torchscan.measure_flops(lambda: net(X))
        net.head(X)
    assert inner["by_module"]["Net.block.fc"] == LINEAR
    assert outer.report()["by_module"] == {"Block": LINEAR + RELU, "Block.fc": LINEAR, "Block.act": RELU}
    assert outer.report()["total"]["value"] == inner["total"]["value"] + HEAD


def test_a_child_that_raises_inside_its_parent_does_not_keep_the_parents_work():
    class Failing(nn.Module):
        def forward(self, x):
            raise ValueError("no")

    class Parent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.failing = Failing()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            try:
                self.failing(x)
            except ValueError:
                pass
            return torch.relu(self.fc(x))

    report = torchscan.measure_flops(lambda: Parent()(X))
    assert report["by_module"] == {"Parent": LINEAR + RELU, "Parent.failing": 0, "Parent.fc": LINEAR}


def test_other_threads_module_calls_are_not_labelled_into_the_session():
    net, other = Net(), Net()
    started, release = threading.Event(), threading.Event()

    def background():
        started.set()
        release.wait(timeout=30)
        other(X)

    thread = threading.Thread(target=background)
    thread.start()
    started.wait(timeout=30)

    def workload():
        release.set()
        thread.join(timeout=30)
        net(X)

    report = torchscan.measure_flops(workload, threads="all")
    # The background thread's work is counted (threads="all") but labels no module of its own.
    assert report["total"]["value"] == 2 * (LINEAR + RELU + HEAD)
    assert report["by_module"]["Net"] == LINEAR + RELU + HEAD
    assert set(report["by_module"]) == {"Net", "Net.block", "Net.block.fc", "Net.block.act", "Net.head"}


def test_many_module_calls_in_one_measurement():
    act = nn.ReLU()
    x = torch.randn(4)
    report = torchscan.measure_flops(lambda: [act(x) for _ in range(5000)])
    assert report["by_module"] == {"ReLU": 5000 * 4}
    assert report["operator_calls"] == {"aten.relu": 5000}


def test_the_hook_table_is_checked_when_it_is_bound():
    table = ops.module_hooks()
    assert len(table) == 5 and table[0] == 2 and all(table[1:])
    with pytest.raises(ImportError, match=r"module hooks \(ABI 2\) do not match its native library \(ABI 3\)"):
        _hooks.bind([3, *table[1:]], lambda session, module: False, nn.Module, str)
    with pytest.raises(ImportError, match="has 4 entries, expected 5"):
        _hooks.bind(table[:4], lambda session, module: False, nn.Module, str)
    with pytest.raises(TypeError, match="name_unnamed and escape_name must be callable"):
        _hooks.bind(table, 3, nn.Module, str)
    # The failed binds left the hooks as they were.
    assert torchscan.measure_flops(lambda: Net()(X))["by_module"]["Net.head"] == HEAD


def test_hooks_called_without_a_module_raise_type_error():
    with pytest.raises(TypeError, match="the module is missing"):
        _hooks.pre()
    with pytest.raises(TypeError, match="the module is missing"):
        _hooks.post()


def test_a_tree_is_named_as_named_modules_names_it():
    shared = nn.Linear(8, 8)
    net = nn.Sequential(shared, nn.ReLU(), shared)  # one module at two paths: named once per parent
    holder = nn.Module()
    holder.add_module("missing", None)  # skipped
    holder.add_module("net", net)
    wrapped = torch.compile(Net(), backend="eager")  # a compiled wrapper names its module
    handle = ops.open_session('{"modules": "named"}')
    try:
        named = _hooks.name_tree(handle, holder, "Holder")
        assert named == {id(m): m for m in holder.modules()}
        assert _hooks.name_tree(handle, wrapped, "Net") == {id(wrapped): wrapped} | {
            id(m): m for m in wrapped._orig_mod.modules()
        }
    finally:
        ops.discard_session(handle)
    report = torchscan.measure_flops(lambda: net(X))
    assert report["by_module"] == {"Sequential": 2 * LINEAR + RELU, "Sequential.0": 2 * LINEAR, "Sequential.1": RELU}


def test_naming_in_a_closed_session_is_an_error():
    handle = ops.open_session('{"modules": "named"}')
    ops.discard_session(handle)
    with pytest.raises(RuntimeError, match=f"naming the modules of session {handle} failed"):
        _hooks.name_tree(handle, Net(), "Net")


def test_crawl_module_and_measure_flops_share_one_hook_driver():
    net = Net()
    module = nn.modules.module
    flags = dict(module._global_forward_hooks_with_kwargs)
    with torchscan.count_flops(modules=net) as counter:
        report = torchscan.crawl_module(net, args=(X,))
        assert _labels._recorders == ()  # the crawl's recorder is gone, the labels stay
        assert module._global_forward_pre_hooks[_labels._PRE_HOOK_KEY] is _labels._module_pre_hook
    # The crawl's layer records and the outer count see the same calls.
    assert [layer["path"] for layer in report["layers"]] == ["", "block", "block.fc", "block.act", "head"]
    assert report["totals"]["operator_flops"]["value"] == LINEAR + RELU + HEAD
    assert counter.report()["by_module"]["Net.block.fc"] == LINEAR
    assert counter.report()["total"]["value"] == LINEAR + RELU + HEAD
    assert dict(module._global_forward_hooks_with_kwargs) == flags
    assert _labels._PRE_HOOK_KEY not in module._global_forward_pre_hooks


def test_the_module_operators_reject_bad_input():
    with pytest.raises(ValueError, match='modules must be "named" or "all", got "some"'):
        ops.open_session('{"modules": "some"}')
    with pytest.raises(RuntimeError, match="unknown torchscan session handle 12345"):
        ops.end_session(12345)
    with pytest.raises(RuntimeError, match="unknown torchscan session handle 12345"):
        ops.enter_modules(12345, [1, 2])
    handle = ops.open_session('{"modules": "named"}')
    try:
        with pytest.raises(ValueError, match="count must not be negative, got -1"):
            ops.exit_modules(handle, -1)
        with pytest.raises(ValueError, match="invalid module names: 2 modules but 1 labels"):
            ops.name_modules(handle, [1, 2], "Net")
        # No module call is open in a session that has run none.
        assert ops.open_module_calls(handle) == 0
    finally:
        report = json.loads(ops.end_session(handle))
    assert report["total"]["value"] == 0
    with pytest.raises(RuntimeError, match=f"unknown torchscan session handle {handle}"):
        ops.open_module_calls(handle)
