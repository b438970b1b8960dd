"""Module labels (by_module), both ways: by the interpreter's frames (the default where the build
supports it: no hook, module calls cost nothing) and by native module hooks (one call into the core
per module call event, sessions reached per thread); modules named once per measurement. Every
test runs both ways (``mode``)."""

import json
import threading

import pytest
import torch
from torch import nn

import torchscan
from torchscan import _hooks, _labels
from torchscan._native import ops
from torchscan.utils import format_flops

X = torch.randn(4, 8)
FRAMES = _hooks.frames_supported()


@pytest.fixture(autouse=True, params=["frames", "hooks"])
def mode(request, monkeypatch):
    if request.param == "frames" and not FRAMES:
        pytest.skip("this build labels by hooks only (frames need CPython 3.11)")
    monkeypatch.setenv("TORCHSCAN_MODULE_LABELS", request.param)
    return request.param


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


# addmm: 2 FLOPs per multiply-add of the 4x8 @ 8x8 product, plus one add per output element for
# the bias (the bias convention, docs/formulas.md).
LINEAR = 2 * 4 * 8 * 8 + 4 * 8
HEAD = 2 * 4 * 8 * 2 + 4 * 2
RELU = 4 * 8
# by_module of one Net call.
NET_LABELS = {
    "Net": LINEAR + RELU + HEAD,
    "Net.block": LINEAR + RELU,
    "Net.block.fc": LINEAR,
    "Net.block.act": RELU,
    "Net.head": HEAD,
}


def global_hooks() -> tuple[int, int]:
    module = nn.modules.module
    return len(module._global_forward_pre_hooks), len(module._global_forward_hooks)


def test_labels_by_identity_with_hand_computed_values():
    net = Net()
    report = torchscan.measure_flops(lambda: net(X))
    assert report["by_module"] == NET_LABELS
    named = torchscan.measure_flops(lambda: net(X), modules=net)
    assert named["by_module"] == report["by_module"]


def test_the_hooks_are_native_and_removed_after_the_measurement(mode):
    before = global_hooks()
    seen = []

    def workload():
        seen.append(nn.modules.module._global_forward_pre_hooks.get(_labels._PRE_HOOK_KEY))
        Net()(X)

    torchscan.measure_flops(workload)
    # Labelling by frames installs no hook at all.
    assert seen == [None if mode == "frames" else _labels._module_pre_hook]
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


def test_a_child_that_raises_inside_its_parent_does_not_keep_the_parents_work(mode):
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
    expected = {"Parent": LINEAR + RELU, "Parent.failing": 0, "Parent.fc": LINEAR}
    if mode == "frames":
        del expected["Parent.failing"]  # it raised before any operator ran in it: no frame seen
    assert report["by_module"] == expected


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
    code = nn.Module._call_impl.__code__
    assert len(table) == 7 and table[0] == 3 and all(table[1:])
    with pytest.raises(ImportError, match=r"module hooks \(ABI 3\) do not match its native library \(ABI 4\)"):
        _hooks.bind([4, *table[1:]], lambda session, module: False, nn.Module, str, code)
    with pytest.raises(ImportError, match="has 4 entries, expected 7"):
        _hooks.bind(table[:4], lambda session, module: False, nn.Module, str, code)
    with pytest.raises(TypeError, match="name_unnamed and escape_name must be callable"):
        _hooks.bind(table, 3, nn.Module, str, code)
    with pytest.raises(TypeError, match="code"):
        _hooks.bind(table, lambda session, module: False, nn.Module, str, "not code")
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


def test_crawl_module_and_measure_flops_share_one_hook_driver(mode):
    net = Net()
    module = nn.modules.module
    flags = dict(module._global_forward_hooks_with_kwargs)
    with torchscan.count_flops(modules=net) as counter:
        report = torchscan.crawl_module(net, args=(X,))
        assert _labels._recorders == ()  # the crawl's recorder is gone, the labels stay
        if mode == "hooks":
            assert module._global_forward_pre_hooks[_labels._PRE_HOOK_KEY] is _labels._module_pre_hook
        else:  # labels by frames need no hook
            assert _labels._PRE_HOOK_KEY not in module._global_forward_pre_hooks
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


# ---- both ways give one report (and where they differ, by design) ----


def test_a_module_that_runs_no_operator_is_listed_only_by_hooks(mode):
    net = nn.Sequential(nn.Linear(8, 8), nn.Identity(), nn.ReLU())
    report = torchscan.measure_flops(lambda: net(X))
    expected = {"Sequential": LINEAR + RELU, "Sequential.0": LINEAR, "Sequential.2": RELU}
    if mode == "hooks":
        expected["Sequential.1"] = 0  # its call started and ended; no frame shows it to an operator
    assert report["by_module"] == expected


def _nested(depth: int) -> nn.Module:
    class Level(nn.Module):
        def __init__(self, inner: nn.Module | None) -> None:
            super().__init__()
            self.inner = inner
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            x = self.fc(x)
            return self.inner(x) if self.inner is not None else x

    level: nn.Module | None = None
    for _ in range(depth):
        level = Level(level)
    assert level is not None
    return level


def test_deep_nesting_labels_every_level():
    # More module calls open at once than a frame walk reads at first (64): the walk grows.
    depth = 150
    net = _nested(depth)
    report = torchscan.measure_flops(lambda: net(X))
    paths = ["Level" + ".inner" * level for level in range(depth)]
    assert report["by_module"] == {
        **{path: (depth - level) * LINEAR for level, path in enumerate(paths)},
        **{path + ".fc": LINEAR for path in paths},
    }


def test_a_measurement_inside_a_module_call_labels_what_hooks_would():
    # The calls open when the measurement starts never started for hooks; by frames the session
    # would see them, so it labels by hooks then: one report either way.
    seen = {}

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = Net()

        def forward(self, x):
            seen["all"] = torchscan.measure_flops(lambda: self.net(x))
            seen["named"] = torchscan.measure_flops(lambda: self.net(x), modules=self)
            return x

    outer = Outer()
    outer(X)
    expected = NET_LABELS
    assert seen["all"]["by_module"] == expected
    # Outer's call was open before: not labelled (hooks never saw it start).
    assert seen["named"]["by_module"] == {"Outer." + path.replace("Net", "net", 1): v for path, v in expected.items()}


def test_modules_built_during_the_workload_are_named_when_first_called():
    class Maker(nn.Module):
        def forward(self, x):
            fresh = nn.Linear(8, 8)  # a module no one named before: a root of its own
            return torch.relu(fresh(x))

    maker = Maker()
    report = torchscan.measure_flops(lambda: maker(X))
    assert report["by_module"] == {"Maker": LINEAR + RELU, "Linear": LINEAR}


def _spy_naming(monkeypatch) -> list[str]:
    named: list[str] = []
    real = _hooks.name_tree

    def spy(handle, root, name):
        named.append(name)
        return real(handle, root, name)

    monkeypatch.setattr(_hooks, "name_tree", spy)
    return named


def test_a_model_is_named_once_at_its_first_operator(monkeypatch):
    # By frames, the first operator finds four calls open that nobody named: the outermost is
    # named, which names the others (naming each in turn named the tree once per level).
    named = _spy_naming(monkeypatch)
    net = nn.Sequential(nn.Sequential(Net()))
    report = torchscan.measure_flops(lambda: net(X))
    assert named == ["Sequential"]
    total = NET_LABELS["Net"]
    inner = {path.replace("Net", "Sequential.0.0", 1): v for path, v in NET_LABELS.items()}
    assert report["by_module"] == {"Sequential": total, "Sequential.0": total, **inner}


class _Chained(nn.Module):
    """Calls the next module of a chain that is not its submodule, before its own layer."""

    def __init__(self, following: nn.Module | None) -> None:
        super().__init__()
        object.__setattr__(self, "following", following)  # not registered: a root of its own
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x if self.following is None else self.following(x))


def test_calls_open_around_the_first_operator_that_no_tree_holds_are_each_named(monkeypatch):
    # Twelve calls open at the first operator, none inside another's tree: each is named as a
    # root, outermost first, more of them than the rounds that name one at a time.
    named = _spy_naming(monkeypatch)
    chain = None
    for i in reversed(range(12)):
        chain = type(f"Link{i}", (_Chained,), {})(chain)
    report = torchscan.measure_flops(lambda: chain(X))
    assert named == [f"Link{i}" for i in range(12)]
    assert report["by_module"] == {
        **{f"Link{i}": (12 - i) * LINEAR for i in range(12)},
        **{f"Link{i}.fc": LINEAR for i in range(12)},
    }


def test_training_step_and_zoo_model_report_the_same_both_ways(monkeypatch):
    torchvision = pytest.importorskip("torchvision")
    net = torchvision.models.resnet18(num_classes=10)
    x = torch.randn(2, 3, 32, 32)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    tokens = torch.randn(2, 5, 16)

    def step():
        net(x).sum().backward()
        layer(tokens).sum().backward()

    reports = {}
    for way in ("frames", "hooks"):
        monkeypatch.setenv("TORCHSCAN_MODULE_LABELS", way)
        net.zero_grad(set_to_none=True)
        layer.zero_grad(set_to_none=True)
        reports[way] = torchscan.measure_flops(step)
    assert reports["frames"]["by_module"] == reports["hooks"]["by_module"]
    assert reports["frames"]["total"] == reports["hooks"]["total"]


def test_an_unknown_way_of_labelling_is_a_value_error(monkeypatch):
    monkeypatch.setenv("TORCHSCAN_MODULE_LABELS", "sometimes")
    with pytest.raises(ValueError, match="TORCHSCAN_MODULE_LABELS must be 'frames' or 'hooks', got 'sometimes'"):
        torchscan.measure_flops(lambda: Net()(X))
    assert not _labels.labelling()


def test_a_replaced_module_call_path_still_labels(monkeypatch):
    # A tool that replaces nn.Module._call_impl with its own copy (a tracer rebuilding it from
    # its source): the frames walker would not know the copy's code; labels come from hooks.
    import types

    original = nn.Module._call_impl
    code = original.__code__.replace()  # equal, not the same object
    copy = types.FunctionType(code, original.__globals__, original.__name__, original.__defaults__)
    monkeypatch.setattr(nn.Module, "_call_impl", copy)
    net = Net()
    report = torchscan.measure_flops(lambda: net(X))
    assert report["by_module"] == NET_LABELS
    assert not _labels.labelling()


class Unused(nn.Module):
    """fc, Linear(3, 4), called; unused, Linear(3, 5), never called: 3*5 + 5 = 20 parameters;
    noop holds a parameter and is called, but runs no operator; holder holds a parameter and
    is never called, its child `inner` Linear(3, 2) is (by the root, directly); attn, a
    MultiheadAttention, never called (its out_proj inside it is not listed); lazy, never called,
    its size unknown (not listed)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.unused = nn.Linear(3, 5)
        self.noop = NoOperator()
        self.holder = Holder()
        self.attn = nn.MultiheadAttention(4, 2)
        self.lazy = nn.LazyLinear(2)

    def forward(self, x):
        return self.noop(self.fc(x)), self.holder.inner(x)


class NoOperator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(2))

    def forward(self, x):
        return x


class Holder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(2))
        self.inner = nn.Linear(3, 2)


def test_named_modules_list_the_modules_that_made_no_call(mode):
    model, x = Unused(), torch.randn(1, 3)
    # fc: 2*3*4 = 24 multiply-adds' FLOPs + 4 bias adds = 28; inner: 2*3*2 = 12 + 2 = 14; 42.
    report = torchscan.measure_flops(lambda: model(x), modules=model)
    assert report["total"]["value"] == 42
    # Frames cannot tell noop's call, which ran no operator, from no call: it is listed; hooks
    # give its call an entry (0). holder made no call (its child was called directly): hooks
    # list it; by frames its child's entry keeps it out (it ran no operator, that we can tell).
    listed = {
        "frames": ["Unused.unused", "Unused.noop", "Unused.attn"],
        "hooks": ["Unused.unused", "Unused.holder", "Unused.attn"],
    }[mode]
    assert report["uncalled_modules"] == listed
    # The listed Linear holds 3*5 + 5 = 20 parameters.
    modules = {f"Unused.{path}": module for path, module in model.named_modules() if path}
    assert sum(p.numel() for p in modules["Unused.unused"].parameters()) == 20
    # format_flops gives it a row of 0 FLOPs, no status.
    lines = format_flops(report, "module").splitlines()[3:]
    rows = {line.split()[0]: line.split()[1:] for line in lines if not line.startswith("Phases")}
    assert rows["unused"] == ["0", "0.0%"] and rows["Unused"] == ["42", "100.0%", "complete"]

    # count_flops lists the same; the total is unchanged.
    with torchscan.count_flops(modules=model) as counter:
        model(x)
    counted = counter.report()
    assert counted["uncalled_modules"] == listed and counted["total"]["value"] == 42
    # Without `modules=` nothing is listed and the total is the same.
    plain = torchscan.measure_flops(lambda: model(x))
    assert "uncalled_modules" not in plain and plain["total"]["value"] == 42


def test_named_modules_list_nothing_when_every_module_ran(mode):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    report = torchscan.measure_flops(lambda: model(torch.randn(1, 3)), modules=model)
    # 2*3*4 = 24 + 4 bias adds + 4 ReLU comparisons = 32 (ReLU: 1 per element).
    assert report["total"]["value"] == 32 and "uncalled_modules" not in report
