"""torch.compile: compiled code is counted as it runs, its tracing never is.

Backends that run ATen operators (``eager``, ``aot_eager``) count exactly what eager mode counts,
from the first call on; inductor's generated kernels cannot be seen, and each run of an inductor
graph is reported. torchscan adds no graph break and no recompile.

The reference network is Sequential(Linear(8, 16), GELU(), LayerNorm(16), Linear(16, 4)) on
x = [2, 8]; the constants below are its pieces, computed by hand from the shapes.
"""

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import torchscan

# torch.compile warns that global module hooks (torchscan's, while a measurement runs) also fire
# for the OptimizedModule wrapper; torchscan labels the wrapper as the module it wraps.
pytestmark = pytest.mark.filterwarnings("ignore:Using `torch.compile\\(module\\)` when there are global hooks")

BACKENDS = ["eager", "aot_eager"]

MM1 = 2 * 2 * 8 * 16  # addmm [2,8] @ [8,16] = 512 (the product)
BIAS1 = 2 * 16  # its bias added to the [2,16] output (the bias convention) = 32
GELU = 2 * 16  # one per element of [2,16] = 32
LAYER_NORM = 5 * 2 * 16  # five per element of [2,16] = 160
MM2 = 2 * 2 * 16 * 4  # addmm [2,16] @ [16,4] = 256
BIAS2 = 2 * 4  # its bias added to the [2,4] output = 8
FORWARD = MM1 + BIAS1 + GELU + LAYER_NORM + MM2 + BIAS2  # 1000
SUM = 2 * 4  # the loss: sum of the [2,4] output = 8
# Backward of sum(net(x)) with x not requiring grad: dH2 = dOut[2,4] @ W2[4,16] and
# dW2 = dOut^T[4,2] @ H2[2,16] (256 each), db2 = dOut summed over the batch (8),
# native_layer_norm_backward (ten per element of [2,16]: 320), gelu_backward (32),
# dW1 = dH1^T[16,2] @ x[2,8] (512), db1 = dH1 summed over the batch (32).
BACKWARD_MM = 2 * 2 * 4 * 16 + 2 * 4 * 2 * 16 + 2 * 16 * 2 * 8  # 1024
BACKWARD = BACKWARD_MM + 2 * 4 + 10 * 2 * 16 + 2 * 16 + 2 * 16  # 1416
STEP = FORWARD + SUM + BACKWARD  # 2424
FORWARD_OPS = {"aten.addmm": MM1 + BIAS1 + MM2 + BIAS2, "aten.gelu": GELU, "aten.native_layer_norm": LAYER_NORM}

# AOTAutograd runs the functional, decomposed form of some operators: the same kernels and the same
# FLOPs under another name (eval BatchNorm, MaxPool with its indices, out-of-place gradient sums).
AOT_NAMES = {
    "aten.native_batch_norm": "aten._native_batch_norm_legit_no_training",
    "aten.max_pool2d": "aten.max_pool2d_with_indices",
    "aten.add_": "aten.add",
}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


def convnet():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1, bias=False),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 10, bias=False),
        nn.Softmax(dim=1),
    ).eval()


class Broken(nn.Module):
    """Linear -> ReLU | graph break | Linear: Dynamo compiles two graphs around the break."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16, bias=False)
        self.fc2 = nn.Linear(16, 4, bias=False)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        torch._dynamo.graph_break()
        return self.fc2(h)


BROKEN_FORWARD = MM1 + 2 * 16 + MM2  # 800: the two products and the ReLU on [2,16]
# dH = dOut @ W2 (256), dW2 (256), threshold_backward (32), dW1 (512); no bias.
BROKEN_STEP = BROKEN_FORWARD + SUM + (MM2 + MM2 + 2 * 16 + MM1)  # 1864

MODELS = {"mlp": (mlp, (2, 8)), "convnet": (convnet, (2, 3, 8, 8))}


def measure(workload, **kwargs):
    return torchscan.measure_flops(workload, **kwargs)


def counted(workload, **kwargs):
    report = measure(workload, **kwargs)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []
    return report


def inference(model, x):
    def workload():
        with torch.no_grad():
            model(x)

    return workload


def training_step(net, model, x):
    """Grads set to None (on the eager module, which owns the parameters), forward through
    `model` (the module or its compiled wrapper), sum, backward."""

    def workload():
        net.zero_grad(set_to_none=True)
        model(x).sum().backward()

    return workload


def workload_of(kind, net, model, x):
    return inference(model, x) if kind == "inference" else training_step(net, model, x)


def as_aot_runs(by_operator):
    renamed = {}
    for op, flops in by_operator.items():
        renamed[AOT_NAMES.get(op, op)] = renamed.get(AOT_NAMES.get(op, op), 0) + flops
    return renamed


def assert_counts_as_eager(report, eager, backend):
    assert report["diagnostics"] == []
    for key in ("total", "by_category", "by_phase", "by_module", "by_module_status"):
        assert report[key] == eager[key], key
    assert report["by_operator"] == (eager["by_operator"] if backend == "eager" else as_aot_runs(eager["by_operator"]))


def is_user_label(label, root):
    return label == root or label.startswith(root + ".")


def assert_user_labels_only(by_module, root):
    for label in by_module:
        assert not any(s in label for s in ("_orig_mod", "OptimizedModule", "<lambda>")), label
    assert all(is_user_label(label, root) for label in by_module), by_module


# Tracing is not counted: backends that run ATen operators count exactly what eager mode counts.


@pytest.mark.parametrize("kind", ["inference", "training"])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_model_counts_what_eager_mode_counts_from_the_first_call(backend, model, kind):
    make, shape = MODELS[model]
    net, x = make(), torch.randn(*shape)
    eager = counted(workload_of(kind, net, net, x))
    if model == "mlp":
        assert eager["total"]["value"] == (FORWARD if kind == "inference" else STEP)
    # Compiled before the measurement, first called (traced on fake tensors, compiled) inside it.
    compiled = torch.compile(net, backend=backend)
    for _ in range(3):
        assert_counts_as_eager(measure(workload_of(kind, net, compiled, x)), eager, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_mlp_counts_the_hand_computed_operators(backend):
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net, backend=backend)
    with_grad = counted(training_step(net, compiled, x))
    assert with_grad["by_phase"]["forward"]["value"] == FORWARD + SUM
    assert with_grad["by_phase"]["backward"]["value"] == BACKWARD
    assert with_grad["by_category"]["matmul"] == MM1 + BIAS1 + MM2 + BIAS2 + BACKWARD_MM
    no_grad = counted(inference(compiled, x))
    assert no_grad["by_operator"] == FORWARD_OPS  # nothing renamed: addmm, gelu, native_layer_norm
    assert no_grad["total"]["value"] == FORWARD


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["inference", "training"])
@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_compiled_hf_bert_counts_what_eager_mode_counts(backend, kind):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        attn_implementation="eager",
    )
    # No pooler: its output is unused by the loss, so eager autograd skips its backward while
    # AOTAutograd's joint graph would run it on a zero gradient (real, but different, work).
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, 64, (2, 8))

    def run(m):
        def workload():
            if kind == "inference":
                with torch.no_grad():
                    m(input_ids=ids)
            else:
                model.zero_grad(set_to_none=True)
                m(input_ids=ids).last_hidden_state.sum().backward()

        return workload

    eager = counted(run(model))
    assert "BertModel.encoder.layer.1.attention.self.query" in eager["by_module"]
    compiled = torch.compile(model, backend=backend)
    for _ in range(2):
        report = measure(run(compiled))
        if backend == "inductor":
            assert_inductor_counts_as_eager(report, eager)
        else:
            assert_counts_as_eager(report, eager, backend)


class Positions(nn.Module):
    """Makes a tensor on its input's device, as a language model makes its cache positions: the
    ATen graph names the device (`arange(8, device=cpu)`), which the meta-device replay that
    prices the graph must not follow."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        positions = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
        return self.fc(x * positions)


# mul on [2,8] (16), addmm [2,8] @ [8,4] (128) and its bias into [2,4] (8); backward (x needs no
# gradient): dW = dOut^T[4,2] @ H[2,8] (128) and db over the batch (8), after the loss's sum (8).
POSITIONS_FORWARD = 2 * 8 + 2 * 2 * 8 * 4 + 2 * 4  # 152
POSITIONS_STEP = POSITIONS_FORWARD + 2 * 4 + 2 * 4 * 2 * 8 + 2 * 4  # 296


@pytest.mark.parametrize("kind", ["inference", "training"])
@pytest.mark.parametrize("backend", [*BACKENDS, pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_model_that_makes_tensors_on_its_device_counts_what_eager_mode_counts(backend, kind):
    net, x = Positions(), torch.randn(2, 8)
    eager = counted(workload_of(kind, net, net, x))
    assert eager["total"]["value"] == (POSITIONS_FORWARD if kind == "inference" else POSITIONS_STEP)
    assert eager["by_module"]["Positions.fc"] == eager["total"]["value"] - 2 * 8 - (0 if kind == "inference" else 8)
    compiled = torch.compile(net, backend=backend)
    for _ in range(2):
        report = measure(workload_of(kind, net, compiled, x))
        if backend == "inductor":
            assert_inductor_counts_as_eager(report, eager)
        else:
            assert_counts_as_eager(report, eager, backend)


@pytest.mark.parametrize("kind", ["inference", "training"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_model_with_a_graph_break_counts_what_eager_mode_counts(backend, kind):
    net, x = Broken(), torch.randn(2, 8)
    eager = counted(workload_of(kind, net, net, x))
    assert eager["total"]["value"] == (BROKEN_FORWARD if kind == "inference" else BROKEN_STEP)
    compiled = torch.compile(net, backend=backend)
    for _ in range(3):
        assert_counts_as_eager(measure(workload_of(kind, net, compiled, x)), eager, backend)
    assert sum(counters["graph_break"].values()) == 1  # the break is real: two graphs
    assert counters["stats"]["unique_graphs"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_fullgraph_compiled_model_counts_what_eager_mode_counts(backend):
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net, backend=backend, fullgraph=True)
    for _ in range(2):
        assert counted(training_step(net, compiled, x))["total"]["value"] == STEP
        assert counted(inference(compiled, x))["total"]["value"] == FORWARD


def test_fullgraph_refusing_a_graph_break_propagates_and_leaves_nothing_behind():
    net, x = Broken(), torch.randn(2, 8)
    compiled = torch.compile(net, backend="aot_eager", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported):
        measure(inference(compiled, x))
    assert torch.ops.torchscan.live_sessions() == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_model_compiled_and_run_before_the_measurement_counts_what_eager_mode_counts(backend):
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net, backend=backend)
    training_step(net, compiled, x)()  # compiled (forward and backward) outside any measurement
    inference(compiled, x)()  # and the no_grad variant
    assert counted(training_step(net, compiled, x))["total"]["value"] == STEP
    assert counted(inference(compiled, x))["total"]["value"] == FORWARD
    with torchscan.count_flops() as counter:
        training_step(net, compiled, x)()
    assert counter.report()["total"]["value"] == STEP


# torch.cond traces both branches on fake tensors and runs one.


def test_torch_cond_counts_only_the_branch_that_ran():
    a, b = torch.randn(2, 3), torch.randn(3, 4)

    def workload(pred):
        return lambda: torch.cond(pred, lambda x, y: torch.mm(x, y), lambda x, y: torch.mm(x, y).relu(), (a, b))

    for _ in range(2):  # the first call traces both branches
        true = counted(workload(torch.tensor(True)))
        assert true["total"]["value"] == 2 * 2 * 3 * 4  # the mm only: 48
        assert true["operator_calls"] == {"aten.mm": 1}
        false = counted(workload(torch.tensor(False)))
        assert false["total"]["value"] == 2 * 2 * 3 * 4 + 2 * 4  # mm, then relu on [2,4]: 56


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4, bias=False)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.fc(t), lambda t: self.fc(t).relu(), (x,))


# x = -1 everywhere: sum over [2,3] (6), gt on the scalar (1), then the false branch: the product
# [2,3] @ [3,4] (48) and the relu on [2,4] (8).
GATE = 6 + 1 + 2 * 2 * 3 * 4 + 2 * 4  # 63


def gate_runner(how):
    net = Gate()
    return net, net if how == "uncompiled" else torch.compile(net, backend=how)


@pytest.mark.parametrize("how", ["uncompiled", *BACKENDS])
def test_torch_cond_in_a_module_counts_the_branch_that_ran(how):
    _, model = gate_runner(how)
    x = -torch.ones(2, 3)
    for _ in range(2):
        report = counted(inference(model, x))
        assert report["total"]["value"] == GATE
        assert report["by_module"]["Gate"] == GATE


@pytest.mark.parametrize(
    "how",
    [
        "uncompiled",
        "eager",
        "aot_eager",
    ],
)
def test_torch_cond_branches_get_no_label_of_their_own(how):
    _, model = gate_runner(how)
    report = counted(inference(model, -torch.ones(2, 3)))
    assert report["by_module"] == {"Gate": GATE}


# Module labels: the compiled wrapper is labelled as the module it wraps.


@pytest.mark.parametrize("roots", ["all", "compiled"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_module_takes_the_label_of_the_module_it_wraps(backend, roots):
    net, x = mlp(), torch.randn(2, 8)
    eager = counted(inference(net, x))
    assert eager["by_module"]["Sequential"] == FORWARD
    compiled = torch.compile(net, backend=backend)
    for _ in range(3):
        report = counted(inference(compiled, x), modules=None if roots == "all" else compiled)
        # The children Dynamo inlined get their eager labels too.
        assert report["by_module"] == eager["by_module"]
        assert eager["by_module"]["Sequential.2"] == LAYER_NORM
        assert_user_labels_only(report["by_module"], "Sequential")


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_training_step_labels_only_the_users_modules(backend):
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net, backend=backend)
    for _ in range(3):
        assert_user_labels_only(counted(training_step(net, compiled, x))["by_module"], "Sequential")


@pytest.mark.parametrize("roots", ["all", "compiled"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_training_step_gives_the_root_its_eager_value(backend, roots):
    net, x = mlp(), torch.randn(2, 8)
    eager = counted(training_step(net, net, x))
    # Forward and backward of the module; the loss sum runs outside it.
    assert eager["by_module"]["Sequential"] == STEP - SUM == 2416
    compiled = torch.compile(net, backend=backend)
    for _ in range(3):
        report = counted(training_step(net, compiled, x), modules=None if roots == "all" else compiled)
        assert report["by_module"]["Sequential"] == STEP - SUM


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_model_with_a_graph_break_keeps_its_root_label(backend):
    net, x = Broken(), torch.randn(2, 8)
    compiled = torch.compile(net, backend=backend)
    for _ in range(2):
        report = counted(inference(compiled, x))
        assert report["by_module"]["Broken"] == BROKEN_FORWARD
        assert_user_labels_only(report["by_module"], "Broken")


class Net(nn.Module):
    """A module of the user's own (Dynamo compiles its forward; torch.nn's own modules called
    from a compiled-in-place container run as they are)."""

    def __init__(self):
        super().__init__()
        self.body = mlp()

    def forward(self, x):
        return self.body(x).relu()


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
@pytest.mark.parametrize("module", ["container", "own"])
def test_module_compiled_in_place_is_labelled_as_in_eager_mode(backend, module):
    net, x = (mlp() if module == "container" else Net()), torch.randn(2, 8)
    eager = counted(training_step(net, net, x))
    net.compile(backend=backend)
    for _ in range(2):
        report = counted(training_step(net, net, x))
        assert report["total"] == eager["total"]
        assert report["by_module"] == eager["by_module"]
    root = "Sequential" if module == "container" else "Net.body"
    assert report["by_module"][f"{root}.2"] == LAYER_NORM + 10 * 2 * 16  # forward and backward


# No graph break, no recompile: Dynamo's counters are the same with and without torchscan.


def dynamo_counts():
    return sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


def loop_counts(net, x, backend, how, in_place=False):
    """Three forwards of a freshly compiled `net` (wrapped, or `in_place`: `net.compile()`):
    plain, each one measured (with or without `modules`), or all in one count_flops block;
    Dynamo's (graph breaks, unique graphs)."""
    torch._dynamo.reset()
    counters.clear()
    if in_place:
        net.compile(backend=backend)
        compiled = net
    else:
        compiled = torch.compile(net, backend=backend)
    if how == "plain":
        for _ in range(3):
            compiled(x)
    elif how == "block":
        with torchscan.count_flops():
            for _ in range(3):
                compiled(x)
    else:
        for _ in range(3):
            measure(lambda: compiled(x), modules=compiled if how == "each_labelled" else None)
    return dynamo_counts()


@pytest.mark.parametrize("model", ["mlp", "broken"])
@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_torchscan_adds_no_graph_break_and_no_recompile(backend, model):
    net, x = (mlp() if model == "mlp" else Broken()), torch.randn(2, 8)
    plain = loop_counts(net, x, backend, "plain")
    assert plain == ((0, 1) if model == "mlp" else (1, 2))  # the model's own breaks and graphs
    for how in ("each", "each_labelled", "block"):
        assert loop_counts(net, x, backend, how) == plain, how


@pytest.mark.parametrize("labels", ["frames", "hooks"])
@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_a_model_compiled_in_place_gets_no_graph_break_from_either_way_of_labelling(backend, labels, monkeypatch):
    # Labelling by frames names a module at the first operator of its call, which may run in an
    # eager frame of the compiled region (Dynamo's callback set): the naming is never traced.
    monkeypatch.setenv("TORCHSCAN_MODULE_LABELS", labels)
    x = torch.randn(2, 8)
    plain = loop_counts(mlp(), x, backend, "plain", in_place=True)
    for how in ("each", "each_labelled", "block"):
        assert loop_counts(mlp(), x, backend, how, in_place=True) == plain, how


@pytest.mark.parametrize("model", ["mlp", "broken"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_measuring_a_model_compiled_and_run_outside_does_not_recompile_it(backend, model):
    net, x = (mlp() if model == "mlp" else Broken()), torch.randn(2, 8)
    compiled = torch.compile(net, backend=backend)
    training_step(net, compiled, x)()
    before = dynamo_counts()
    measure(training_step(net, compiled, x))
    assert dynamo_counts() == before
    measure(training_step(net, compiled, x), modules=compiled)
    with torchscan.count_flops(modules=[compiled]):
        training_step(net, compiled, x)()
    assert dynamo_counts() == before
    training_step(net, compiled, x)()  # and again outside, once the hooks are gone
    assert dynamo_counts() == before


# Inductor: each graph is priced when it is compiled (AOTAutograd's ATen graph, replayed on the
# meta device with its module paths) and counted each time it runs.

# AOTAutograd's functional names for the operators the models here run in place or with running
# statistics (training-mode BatchNorm updates them in place in eager mode).
INDUCTOR_NAMES = {**AOT_NAMES, "aten.relu_": "aten.relu"}


def as_inductor_runs(by_operator, training_batch_norm=False):
    names = dict(INDUCTOR_NAMES)
    if training_batch_norm:
        names["aten.native_batch_norm"] = "aten._native_batch_norm_legit_functional"
    renamed = {}
    for op, flops in by_operator.items():
        renamed[names.get(op, op)] = renamed.get(names.get(op, op), 0) + flops
    return renamed


def assert_inductor_counts_as_eager(report, eager, training_batch_norm=False):
    assert report["diagnostics"] == [], report["diagnostics"]
    for key in ("total", "by_category", "by_phase", "by_module", "by_module_status"):
        assert report[key] == eager[key], key
    assert report["by_operator"] == as_inductor_runs(eager["by_operator"], training_batch_norm)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["inference", "training"])
@pytest.mark.parametrize("model", MODELS)
def test_inductor_counts_what_eager_mode_counts_with_module_labels(model, kind):
    make, shape = MODELS[model]
    net, x = make(), torch.randn(*shape)
    eager = counted(workload_of(kind, net, net, x))
    if model == "mlp":
        assert eager["total"]["value"] == (FORWARD if kind == "inference" else STEP)
        assert eager["by_module"]["Sequential.2"] == (LAYER_NORM if kind == "inference" else LAYER_NORM + 10 * 2 * 16)
    compiled = torch.compile(net)  # inductor; compiled (and priced) by the first measured call
    for _ in range(2):
        assert_inductor_counts_as_eager(measure(workload_of(kind, net, compiled, x)), eager)


@pytest.mark.slow
def test_inductor_mlp_counts_the_hand_computed_operators():
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net)
    step = counted(training_step(net, compiled, x))
    assert step["total"]["value"] == STEP
    assert step["by_phase"]["forward"]["value"] == FORWARD + SUM
    assert step["by_phase"]["backward"]["value"] == BACKWARD
    assert step["by_module"]["Sequential.1"] == GELU + 2 * 16  # gelu and gelu_backward on [2,16]
    assert step["by_module"]["Sequential.0"] == MM1 + BIAS1 + 2 * 16 * 2 * 8 + 2 * 16  # addmm, dW1, db1
    no_grad = counted(inference(compiled, x))
    assert no_grad["by_operator"] == FORWARD_OPS
    assert no_grad["operator_calls"] == {"aten.addmm": 2, "aten.gelu": 1, "aten.native_layer_norm": 1}

    def twice():
        inference(compiled, x)()
        inference(compiled, x)()

    assert counted(twice)["total"]["value"] == 2 * FORWARD
    with torchscan.count_flops() as counter:  # the context-manager form counts alike
        training_step(net, compiled, x)()
        inference(compiled, x)()
    assert counter.report()["total"]["value"] == STEP + FORWARD
    assert counter.report()["by_module"]["Sequential.2"] == 2 * LAYER_NORM + 10 * 2 * 16


@pytest.mark.slow
def test_inductor_model_compiled_and_run_before_the_measurement_is_counted():
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net)
    training_step(net, compiled, x)()  # compiled and priced outside any measurement
    inference(compiled, x)()
    assert counted(training_step(net, compiled, x))["total"]["value"] == STEP
    assert counted(inference(compiled, x))["by_module"]["Sequential"] == FORWARD


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["inference", "training"])
def test_inductor_model_with_a_graph_break_counts_what_eager_mode_counts(kind):
    net, x = Broken(), torch.randn(2, 8)
    eager = counted(workload_of(kind, net, net, x))
    compiled = torch.compile(net)
    for _ in range(2):
        report = measure(workload_of(kind, net, compiled, x))
        assert_inductor_counts_as_eager(report, eager)
    assert report["by_module"]["Broken.fc2"] == (MM2 if kind == "inference" else 3 * MM2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["inference", "training"])
@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_compiled_torchvision_resnet_counts_what_eager_mode_counts(backend, kind):
    torchvision = pytest.importorskip("torchvision")
    # Training-mode BatchNorm (running statistics updated), residual sums, a module (relu)
    # called twice per block, adaptive pooling, flatten.
    net, x = torchvision.models.resnet18(num_classes=10), torch.randn(2, 3, 32, 32)
    eager = counted(workload_of(kind, net, net, x))
    assert eager["by_module"]["ResNet.layer1.0.relu"] == 2 * (2 * 64 * 8 * 8) * (1 if kind == "inference" else 2)
    compiled = torch.compile(net, backend=backend)
    for _ in range(2):
        report = measure(workload_of(kind, net, compiled, x))
        assert report["diagnostics"] == []
        for key in ("total", "by_category", "by_phase", "by_module", "by_module_status"):
            assert report[key] == eager[key], key
        renamed = as_inductor_runs(eager["by_operator"], training_batch_norm=True)
        assert report["by_operator"] == (eager["by_operator"] if backend == "eager" else renamed)


@pytest.mark.slow
def test_inductor_training_resnet_block_counts_batch_norm_and_gradient_sums_as_eager():
    torchvision = pytest.importorskip("torchvision")
    # A residual block in training mode: BatchNorm updates its running statistics (AOTAutograd's
    # functional form), and the block's input gets two gradients, summed between modules.
    net = torchvision.models.resnet.BasicBlock(4, 4)
    x = torch.randn(2, 4, 6, 6)
    eager = counted(training_step(net, net, x))
    compiled = torch.compile(net)
    for _ in range(2):
        assert_inductor_counts_as_eager(measure(training_step(net, compiled, x)), eager, training_batch_norm=True)


@pytest.mark.slow
def test_inductor_graph_that_cannot_be_priced_is_reported_not_dropped():
    net, x = mlp(), torch.randn(2, 8)
    compiled = torch.compile(net, dynamic=True)  # symbolic sizes: one price would not fit every run
    report = measure(inference(compiled, x))
    assert report["total"]["status"] == "partial"
    assert report["total"]["value"] is None
    # GELU and LayerNorm are fused into generated code; the two addmm are still dispatched.
    assert report["total"]["known_value"] == MM1 + BIAS1 + MM2 + BIAS2
    diagnostics = [d for d in report["diagnostics"] if d["code"] == "uncounted_compiled_code"]
    assert len(diagnostics) == 1 and "ran 1 time(s)" in diagnostics[0]["message"]


@pytest.mark.slow
def test_inductor_call_that_raises_counts_only_the_calls_that_completed():
    net = mlp()
    compiled = torch.compile(net)
    inference(compiled, torch.randn(2, 8))()

    def bad():
        with torch.no_grad():
            compiled(torch.randn(2, 8))  # priced and counted
            try:
                compiled(torch.randn(3, 7))  # recompiles for the new shape, then raises
            except Exception:
                pass

    report = measure(bad)
    assert report["total"]["value"] == FORWARD


def test_a_custom_aot_autograd_backend_is_priced_and_labelled():
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    compiled_graphs = []

    def compiler(gm, example_inputs):
        compiled_graphs.append(gm)
        return make_boxed_func(gm.forward)

    net, x = mlp(), torch.randn(2, 8)
    eager = counted(training_step(net, net, x))
    compiled = torch.compile(net, backend=aot_autograd(fw_compiler=compiler))
    for _ in range(2):
        assert_counts_as_eager(measure(training_step(net, compiled, x)), eager, "aot_eager")
    assert len(compiled_graphs) == 2  # its forward and backward graphs, compiled once


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 16), nn.GELU())
        self.b = nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.utils.checkpoint.checkpoint(self.a, x, use_reentrant=False))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_checkpointing_inside_a_compiled_region_is_never_undercounted(backend):
    net, x = Checkpointed(), torch.randn(2, 8, requires_grad=True)
    eager = counted(training_step(net, net, x))
    compiled = torch.compile(net, backend=backend)
    for _ in range(2):
        report = measure(training_step(net, compiled, x))
        if backend == "aot_eager":
            # Counted as it runs: its partitioner's recomputation included (it may recompute a
            # little more than eager mode's checkpoint), never the joint graph's smaller price.
            assert report["total"]["status"] == "complete"
            assert report["total"]["value"] >= eager["total"]["value"]
            # ... without the labels of the modules inside the region, which the report says.
            assert [d["code"] for d in report["diagnostics"]] == ["unlabelled_compiled_code"]
        else:  # not priced: reported, never a smaller "complete" total
            assert report["total"]["status"] == "partial"
            assert [d["code"] for d in report["diagnostics"]] == ["uncounted_compiled_code"]


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = mlp()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.inner(x))


@pytest.mark.parametrize("kind", ["inference", "training"])
def test_unpriced_aot_eager_graph_is_counted_and_its_missing_module_labels_are_reported(kind):
    net, x = Outer(), torch.randn(2, 8)
    eager = counted(workload_of(kind, net, net, x))
    inner = net.inner
    net.inner = torch.compile(inner, backend="aot_eager", dynamic=True)  # symbolic sizes: unpriced
    try:
        report = measure(workload_of(kind, net, net, x))
    finally:
        net.inner = inner
    # Its operators count as they run: the same total, phases and categories as eager mode.
    for key in ("total", "by_phase", "by_category"):
        assert report[key] == eager[key], key
    # The compiled module's call is open around the graph: its count and its parent's are
    # eager's; the modules inside it ran no call, and the report says so (never "complete").
    for label in ("Outer", "Outer.inner", "Outer.head"):
        assert report["by_module"][label] == eager["by_module"][label], label
    # The first Linear: its product and bias add (and in training its weight gradient and its
    # bias gradient's sum over the batch, 32).
    assert eager["by_module"]["Outer.inner.0"] == MM1 + BIAS1 + (0 if kind == "inference" else MM1 + 32)
    assert not any(label.startswith("Outer.inner.") for label in report["by_module"])
    assert report["by_module_status"]["Outer.inner"] == "partial"
    assert report["by_module_status"]["Outer.head"] == "complete"
    assert [d["code"] for d in report["diagnostics"]] == ["unlabelled_compiled_code"]
    runs = 1 if kind == "inference" else 2  # a training step runs its forward and backward graphs
    assert f"ran {runs} time(s)" in report["diagnostics"][0]["message"]


def inplace_activations():
    # In-place activations whose gradient AOTAutograd cannot tie to its forward operator (their
    # functional form is traced under another sequence number), beside one it can (relu_).
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, bias=False),
        nn.Hardswish(inplace=True),
        nn.Conv2d(4, 4, 1, bias=False),
        nn.Hardsigmoid(inplace=True),
        nn.Conv2d(4, 2, 1, bias=False),
        nn.ReLU(inplace=True),
    )


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_compiled_training_step_gives_in_place_activation_gradients_to_their_modules(backend):
    net, x = inplace_activations(), torch.randn(1, 3, 6, 6)
    eager = counted(training_step(net, net, x))
    # Each activation on [1,4,4,4] (or [1,2,4,4]): its forward and its backward, one per element.
    assert eager["by_module"]["Sequential.1"] == 2 * 64
    assert eager["by_module"]["Sequential.3"] == 2 * 64
    assert eager["by_module"]["Sequential.5"] == 2 * 32
    compiled = torch.compile(net, backend=backend)
    for _ in range(2):
        report = measure(training_step(net, compiled, x))
        for key in ("total", "by_phase", "by_category", "by_module", "by_module_status"):
            assert report[key] == eager[key], key
