"""crawl_module and summary: hand-computed reports, input rules, restoration guarantees."""

import json

import pytest
import torch
import torchvision
from torch import nn
from torch.nn.utils import prune

import torchscan
from torchscan import IncompleteAnalysisError, crawl_module, summary
from torchscan.utils import aggregate_info, format_info


def test_conv2d_report_matches_hand_computed_values():
    report = crawl_module(nn.Conv2d(3, 8, 3), (3, 32, 32))
    [layer] = report["layers"]
    assert (layer["path"], layer["call_index"], layer["name"], layer["depth"], layer["type"]) == (
        "",
        0,
        "conv2d",
        0,
        "Conv2d",
    )
    assert layer["output"] == {
        "kind": "tensor",
        "shape": [1, 8, 30, 30],
        "dtype": "torch.float32",
        "device": "cpu",
        "requires_grad": False,
    }
    assert layer["parameters"] == {"trainable": 224, "frozen": 0, "bytes": 896, "shared": False}
    metrics = layer["metrics"]
    # 7200 outputs x (27 products + 26 adds + bias) = 388_800; 194_400 MACs.
    assert metrics["module_flops"]["value"] == 388_800
    assert metrics["macs"]["value"] == 194_400
    assert metrics["dmas"]["value"] == 201_824
    # 2 per multiply-accumulate and the bias add 1 per output (the bias convention): 396_000.
    assert metrics["operator_flops"]["value"] == 2 * 7200 * 27 + 7200 == 396_000
    assert (metrics["receptive_field"]["value"], metrics["effective_stride"]["value"]) == (3, 1)
    totals = report["totals"]
    assert totals["module_flops"]["value"] == 388_800
    assert totals["operator_flops"] == report["operator_flops"]["total"]
    assert totals["parameters"]["value"] == 224
    assert report["diagnostics"] == []
    assert report["context"]["model_type"] == "torch.nn.modules.conv.Conv2d"
    assert report["context"]["execution_mode"] == "evaluation_no_grad"
    json.dumps(report)


def test_resnet18_layer_operator_flops_add_up():
    model = torchvision.models.resnet18()
    report = crawl_module(model, (3, 64, 64))
    root = report["layers"][0]
    assert root["path"] == "" and root["metrics"]["operator_flops"]["status"] == "complete"
    assert root["metrics"]["operator_flops"]["value"] == report["totals"]["operator_flops"]["value"]
    by_path = {layer["path"]: layer for layer in report["layers"]}
    conv1 = by_path["conv1"]["metrics"]["operator_flops"]["value"]
    assert conv1 == 2 * 64 * 3 * 49 * 32 * 32  # its own convolution: 2 * C_out * C_in * k^2 * out pixels
    fc = by_path["fc"]["metrics"]["operator_flops"]["value"]
    assert fc == 2 * 512 * 1000 + 1000  # the products and the bias adds
    # Every convolution leaf's operator FLOPs are its own: 2 per multiply-accumulate of its MACs.
    convs = [layer for layer in report["layers"] if layer["type"] == "Conv2d"]
    assert len(convs) == 20
    for conv in convs:
        assert conv["metrics"]["operator_flops"]["value"] == 2 * conv["metrics"]["macs"]["value"], conv["path"]
    assert report["totals"]["module_flops"]["status"] == "complete"
    assert model.training  # restored


def test_shared_module_called_twice_counts_parameters_once():
    shared = nn.Linear(4, 4)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = shared

        def forward(self, x):
            return self.block(self.block(x))

    report = crawl_module(Twice(), (4,))
    calls = [layer for layer in report["layers"] if layer["path"] == "block"]
    assert [c["call_index"] for c in calls] == [0, 1]
    assert calls[0]["parameters"] == {"trainable": 20, "frozen": 0, "bytes": 80, "shared": False}
    assert calls[1]["parameters"] == {"trainable": 0, "frozen": 0, "bytes": 0, "shared": True}
    # Each call is its own layer with its own FLOPs: 4 x (4 products + 3 adds + bias) = 32.
    assert [c["metrics"]["module_flops"]["value"] for c in calls] == [32, 32]
    assert report["totals"]["module_flops"]["value"] == 64


def test_nested_outputs_and_kwargs_only_calls():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, *, x, scale):
            y = self.fc(x) * scale
            return {"out": (y, [None, y])}

    x = torch.randn(1, 3)
    report = crawl_module(Net(), kwargs={"x": x, "scale": 2.0})
    assert report["inputs"]["source"] == "provided"
    assert report["inputs"]["args"] == []
    assert report["inputs"]["kwargs"]["scale"] == {"kind": "scalar", "type": "float"}
    out = report["layers"][0]["output"]
    assert out["kind"] == "mapping" and out["items"][0]["key"] == "out"
    assert out["items"][0]["value"]["items"][1]["items"][0] == {"kind": "none"}
    assert "2.0" not in json.dumps(report["inputs"])


def test_provided_inputs_are_forwarded_unchanged():
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(x)
            return x

    x = torch.randn(2, 2)
    crawl_module(Probe(), args=(x,))
    assert seen[0] is x


def test_structure_mode():
    report = crawl_module(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), (2,), mode="structure")
    assert report["context"]["analysis_mode"] == "structure"
    assert report["totals"]["module_flops"]["method"] == "not_requested"
    assert report["totals"]["operator_flops"]["status"] == "unavailable"
    assert all(set(layer["metrics"]) == {"calls"} for layer in report["layers"])
    assert report["totals"]["parameters"]["value"] == 6


def test_unsupported_leaf_is_partial_and_strict_raises_with_the_report():
    class Custom(nn.Module):
        def forward(self, x):
            return x * 2

    model = nn.Sequential(nn.Linear(2, 2), Custom())
    report = crawl_module(model, (2,))
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == 2 * (2 + 1 + 1)
    codes = {d["code"] for d in report["diagnostics"]}
    assert codes == {"unsupported_module_metric"}
    assert report["diagnostics"][0]["path"] == "1"
    with pytest.raises(IncompleteAnalysisError) as caught:
        crawl_module(model, (2,), strict=True)
    assert str(caught.value) == "Analysis is incomplete for: dmas, macs, module_flops, receptive_field."
    assert caught.value.report["totals"]["module_flops"]["status"] == "partial"


def test_flags_and_hooks_restored_after_an_exception():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(2)

        def forward(self, x):
            self.bn(x)
            raise KeyError("boom")

    model = Boom().train()
    model.bn.eval()
    with pytest.raises(KeyError, match="boom"):
        crawl_module(model, (2,))
    assert model.training and not model.bn.training
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert not model.bn._forward_hooks and not model.bn._forward_pre_hooks


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({}, ValueError, "Exactly one of input_shape or args/kwargs must be provided"),
        ({"input_shape": (2,), "args": (torch.zeros(1, 2),)}, ValueError, "both were given"),
        ({"args": [torch.zeros(1, 2)]}, TypeError, "args must be a tuple, got list"),
        ({"kwargs": [("x", 1)]}, TypeError, "kwargs must be a mapping, got list"),
        ({"kwargs": {1: torch.zeros(1)}}, TypeError, "kwargs keys must be strings, got a key of type int"),
        ({"args": (torch.zeros(1, 2),), "dtype": torch.float64}, ValueError, "dtype and device apply only"),
        ({"input_shape": 2}, TypeError, "input_shape must be a tuple or a non-empty list of tuples, got 2"),
        ({"input_shape": []}, TypeError, "non-empty list of tuples"),
        ({"input_shape": (2.0,)}, TypeError, "Every input_shape dimension must be an integer, got 2.0"),
        ({"input_shape": (-2,)}, ValueError, "cannot be negative, got -2"),
        ({"input_shape": [(2,)], "dtype": [torch.float32, torch.float64]}, ValueError, r"\(2 != 1\)"),
        ({"input_shape": (2,), "dtype": ["float32"]}, TypeError, "Every dtype value must be a torch.dtype, got str"),
        ({"input_shape": (2,), "mode": "fast"}, ValueError, "mode must be 'full' or 'structure', got 'fast'"),
        ({"input_data": torch.zeros(1, 2)}, TypeError, "input_data"),
    ],
)
def test_bad_inputs(kwargs, error, message):
    model = nn.Linear(2, 2)
    with pytest.raises(error, match=message):
        crawl_module(model, **kwargs)
    assert not model._forward_hooks and model.training


def test_generated_input_dtypes():
    class Probe(nn.Module):
        def forward(self, a, b, c):
            self.seen = (a, b, c)
            return a

    probe = Probe()
    crawl_module(probe, [(2,), (3,), (1,)], dtype=[torch.float64, torch.int64, torch.bool])
    a, b, c = probe.seen
    assert (a.shape, a.dtype, b.dtype, c.dtype) == ((1, 2), torch.float64, torch.int64, torch.bool)
    assert int(b.sum()) == 0 and bool(c.all())


def test_summary_prints_the_table_and_returns_the_report(capsys):
    report = summary(nn.Conv2d(3, 8, 3), (3, 32, 32))
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    # The table the torchscan command prints: parameters and buffers apart, each call's operator
    # FLOPs (2 x 8 x 27 x 30 x 30 = 388,800 and the bias adds 8 x 30 x 30 = 7,200), the root
    # named by its type (as by_module labels it).
    assert lines[1] == "Layer   Type    Output Shape    Param #  Buffers  Trainable    FLOPs"
    assert lines[3] == "Conv2d  Conv2d  (1, 8, 30, 30)      224        0  True       396,000"
    assert report["operator_flops"]["by_module"] == {"Conv2d": 396_000}
    # torchscan 0.2's footer lines: 8 x 27 weights and 8 biases, all trainable.
    assert lines[5:8] == ["Trainable params: 224", "Non-trainable params: 0", "Total params: 224"]
    assert "Model size (params + buffers): 0.00 MB (parameters 0.00 MB, buffers 0.00 MB; 1 MB = 10^6 bytes)" in lines
    assert "Module-formula FLOPs (torchscan 0.2's method): 388.80 kFLOPs" in lines
    # The kernels' count: 2 per multiply-accumulate and 1 per bias add.
    assert "Operator FLOPs (the kernels that ran, the FLOPs column): 396.00 kFLOPs" in lines
    assert report["totals"] == crawl_module(nn.Conv2d(3, 8, 3), (3, 32, 32))["totals"]


def test_summary_at_a_depth_counts_what_each_row_holds(capsys):
    # torchscan 0.2's summary(max_depth=...) printed 0 for a container (own parameters only).
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), nn.Linear(3, 2, bias=False))
    model[1].weight.requires_grad_(False)
    summary(model, (4,), max_depth=1)
    lines = capsys.readouterr().out.splitlines()
    # Linear(4, 3): 12 weights + 3 biases; Linear(3, 2) without bias: 6 frozen weights;
    # 2 x 12 and 2 x 6 FLOPs, 3 bias adds, 3 for the ReLU.
    assert lines[3].split() == ["Sequential", "Sequential", "(1,", "2)", "21", "0", "Partly", "42"]
    # The bias adds' 3 and the ReLU's 3 FLOPs (one per element) in its Sequential's.
    assert lines[4].split() == ["├─0", "Sequential", "(1,", "3)", "15", "0", "True", "30"]
    assert lines[5].split() == ["├─1", "Linear", "(1,", "2)", "6", "0", "False", "12"]
    assert lines[6].startswith("=")
    assert lines[7:10] == ["Trainable params: 15", "Non-trainable params: 6", "Total params: 21"]


@pytest.mark.parametrize(
    "options",
    [{}, {"max_depth": 1}, {"max_depth": 0, "wrap_mode": "end"}, {"receptive_field": True, "effective_rf_stats": True}],
)
def test_summary_draws_what_format_info_draws_of_the_report(options, capsys):
    # summary has the table drawn by the native call that assembles the report (no second trip
    # through JSON); it is the table format_info draws of the returned report.
    model = nn.Sequential(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    report = summary(model, (3, 8, 8), **options)
    printed = capsys.readouterr().out
    assert printed == format_info(report, **options) + "\n"


def test_aggregate_info_and_format_info():
    report = crawl_module(nn.Sequential(nn.Sequential(nn.Linear(2, 2)), nn.ReLU()), (2,))
    assert [layer["depth"] for layer in aggregate_info(report, 1)["layers"]] == [0, 1, 1]
    with pytest.raises(ValueError, match="max_depth must be non-negative, got -1"):
        aggregate_info(report, -1)
    with pytest.raises(ValueError, match="max_depth 5 is higher than the module depth"):
        aggregate_info(report, 5)
    table = format_info(report, receptive_field=True, effective_rf_stats=True)
    assert "Effective padding" in table.splitlines()[1]
    assert "|    └─0" in table
    with pytest.raises(ValueError, match="wrap_mode must be"):
        format_info(report, wrap_mode="start")


def test_reports_are_deterministic():
    model = torchvision.models.resnet18()
    torch.manual_seed(0)
    first = json.dumps(crawl_module(model, (3, 32, 32)))
    torch.manual_seed(0)
    assert json.dumps(crawl_module(model, (3, 32, 32))) == first


def test_module_type_export():
    assert torchscan.crawl_module is crawl_module


class _ReshapesInPlace(nn.Module):
    """fc1's output is reshaped in place before fc2 sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.fc2 = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc1(x)
        y.unsqueeze_(0)
        return self.fc2(y)


def test_inputs_are_described_as_the_forward_receives_them():
    report = crawl_module(_ReshapesInPlace(), args=(torch.rand(3, 4),))
    layers = {layer["path"]: layer for layer in report["layers"]}
    assert layers["fc1"]["output"]["shape"] == [3, 6]
    assert layers["fc2"]["input"]["args"][0]["shape"] == [1, 3, 6]
    assert layers["fc2"]["metrics"]["module_flops"]["value"] == 2 * 3 * 6 * 2

    # A user's pre-hook replaces the argument: the layer records what its forward was given.
    model = nn.Sequential(nn.Linear(4, 4))
    handle = model[0].register_forward_pre_hook(lambda module, args: (args[0].expand(5, 4),))
    try:
        report = crawl_module(model, args=(torch.rand(1, 4),))
    finally:
        handle.remove()
    assert report["layers"][1]["input"]["args"][0]["shape"] == [5, 4]
    assert report["layers"][0]["input"]["args"][0]["shape"] == [1, 4]


class _CallsInAnotherThread(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.here = nn.Linear(4, 4)
        self.there = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import threading

        worker = threading.Thread(target=self.there, args=(x,))
        worker.start()
        worker.join()
        return self.here(x)


def test_module_calls_from_other_threads_are_not_recorded():
    # Neither their layer calls nor their operators (sessions observe their own thread); the
    # other thread's arithmetic is reported missing, so the operator total is partial.
    report = crawl_module(_CallsInAnotherThread(), args=(torch.rand(2, 4),))
    assert [layer["path"] for layer in report["layers"]] == ["", "here"]
    flops = report["totals"]["operator_flops"]
    assert (flops["status"], flops["known_value"]) == ("partial", 2 * 2 * 4 * 4 + 2 * 4)  # products, bias adds
    assert any(d["code"] == "unfollowed_threads" for d in report["diagnostics"])


def test_lazy_modules_are_counted_as_their_forward_leaves_them():
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyConv2d(4, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(5))
    report = crawl_module(model, (2, 6, 6))
    assert all(metric["status"] == "complete" for metric in report["totals"].values()), report["diagnostics"]
    by_path = {layer["path"]: layer for layer in report["layers"]}
    # Conv 2 -> 4, 3x3: 4 x 2 x 9 + 4 = 76; Linear 4 x 4 x 4 = 64 -> 5: 320 + 5 = 325.
    assert by_path["0"]["parameters"]["trainable"] == 76
    assert by_path["3"]["parameters"]["trainable"] == 325
    assert report["totals"]["parameters"]["value"] == 76 + 325
    # The forward materialized them, as any forward does (the documented choice): plain layers now.
    assert type(model[0]) is nn.Conv2d and type(model[3]) is nn.Linear
    assert summary(nn.Sequential(nn.LazyLinear(3)), (4,))["totals"]["parameters"]["value"] == 15


def test_a_parameter_replaced_in_the_first_forward_is_counted():
    # torchinfo's own test `uninitialized_tensor`: the forward assigns a new Parameter in place
    # of the UninitializedParameter (not materialized in place): 128 parameters, as torchinfo says.
    class UninitializedParameterModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.param = nn.UninitializedParameter()

        def init_param(self):
            self.param = nn.Parameter(torch.zeros(128))

        def forward(self, x):
            self.init_param()
            return x

    report = crawl_module(UninitializedParameterModel(), (2, 2))
    assert report["totals"]["parameters"]["value"] == 128
    assert report["totals"]["trainable_parameters"]["value"] == 128
    assert report["totals"]["parameter_bytes"]["value"] == 128 * 4
    assert report["layers"][0]["parameters"]["trainable"] == 128
    assert "uninitialized_parameters" not in {d["code"] for d in report["diagnostics"]}


def test_a_parameter_left_uninitialized_is_unavailable_not_a_crash():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.unused = nn.parameter.UninitializedParameter()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)

    report = crawl_module(Holder(), args=(torch.randn(2, 3),))
    assert report["totals"]["parameters"]["status"] == "unavailable"
    assert {d["code"] for d in report["diagnostics"]} == {"uninitialized_parameters"}
    # The layer that holds it has no count; the others are counted.
    assert report["layers"][0]["parameters"]["trainable"] is None
    assert report["layers"][1]["parameters"]["trainable"] == 12
    # Nothing left behind.
    assert not torch.nn.modules.module._global_forward_pre_hooks


def test_training_mode_sees_auxiliary_heads_and_leaves_the_model_as_found():
    torch.manual_seed(0)
    model = torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=False, num_classes=10).eval()
    state = {key: value.clone() for key, value in model.state_dict().items()}
    x = torch.randn(1, 3, 224, 224)
    trained = crawl_module(model, args=(x,), training=True)
    evaluated = crawl_module(model, args=(x,))
    assert trained["context"]["execution_mode"] == "training_no_grad"
    assert evaluated["context"]["execution_mode"] == "evaluation_no_grad"
    # The auxiliary classifiers run in training only.
    assert "aux1.fc1" in {layer["path"] for layer in trained["layers"]}
    assert "aux1" not in {layer["path"] for layer in evaluated["layers"]}
    assert all(trained["totals"][k]["status"] == "complete" for k in ("module_flops", "operator_flops", "macs"))
    assert trained["totals"]["operator_flops"]["value"] > evaluated["totals"]["operator_flops"]["value"]
    # BatchNorm's running statistics (and its batch counter) are as they were, and so is the flag.
    assert all(torch.equal(value, model.state_dict()[key]) for key, value in state.items())
    assert model.training is False


def test_training_mode_dropout_and_batch_norm_follow_and_random_state_is_restored():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Dropout2d(0.5)).train()
    x = torch.randn(2, 3, 6, 6)
    generator = torch.get_rng_state()
    report = crawl_module(model, args=(x,), training=True)
    assert torch.equal(torch.get_rng_state(), generator)
    assert model.training is True and torch.equal(model[1].running_mean, torch.zeros(4))
    dropout = report["layers"][3]["metrics"]
    # [2, 4, 4, 4]: 8 channel noises rescaled, 128 elements multiplied (what ATen runs).
    assert dropout["module_flops"]["value"] == dropout["operator_flops"]["value"] == 8 + 128
    with pytest.raises(TypeError, match="training must be a bool"):
        crawl_module(model, args=(x,), training="yes")


def test_torchscript_submodules_are_named_as_unseen_never_counted_complete():
    torch.manual_seed(0)

    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.jit.script(nn.Sequential(nn.Linear(3, 3), nn.ReLU()))
            self.head = nn.Linear(3, 1)

        def forward(self, x):
            return self.head(self.encoder(x))

    report = crawl_module(Wrapper(), args=(torch.randn(2, 3),))
    # The scripted encoder's Linear runs inside TorchScript: no module hook sees it, so the
    # module-formula totals are partial (the head's 2 x (2 x 3 - 1) + 2 = 12 known) ...
    totals = report["totals"]
    assert (totals["module_flops"]["status"], totals["module_flops"]["known_value"]) == ("partial", 12)
    assert {(d["code"], d["path"]) for d in report["diagnostics"]} == {("scripted_module", "encoder")}
    assert {d["metric"] for d in report["diagnostics"]} == {"module_flops", "macs", "dmas"}
    # ... while parameters and the operators it runs are counted: addmm 2x3x3 and 2x3x1 (x 2)
    # with their bias adds (6 and 2), the ReLU's 6.
    assert totals["parameters"]["value"] == 12 + 4
    assert totals["operator_flops"] == {**totals["operator_flops"], "status": "complete", "value": 36 + 6 + 12 + 2 + 6}
    with pytest.raises(IncompleteAnalysisError):
        crawl_module(Wrapper(), args=(torch.randn(2, 3),), strict=True)


def test_a_scripted_root_says_why_its_module_metrics_are_unavailable():
    scripted = torch.jit.script(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)))
    report = crawl_module(scripted, args=(torch.randn(2, 3),))
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    assert {d["code"] for d in report["diagnostics"]} == {"scripted_module"}
    assert report["totals"]["parameters"]["value"] == 16 + 10


def test_a_scripted_model_lists_its_submodule_tree_with_their_parameters(capsys):
    inner = nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2))
    scripted = torch.jit.script(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), inner))
    report = summary(scripted, args=(torch.randn(2, 3),))
    layers = [(r["path"], r["depth"], r["type"], r.get("scripted", False)) for r in report["layers"]]
    # The tree as nn.Module.named_modules walks it, under the original class names (not
    # RecursiveScriptModule); only the root's call is seen.
    assert layers == [
        ("", 0, "Sequential", False),
        ("0", 1, "Linear", True),
        ("1", 1, "ReLU", True),
        ("2", 1, "Sequential", True),
        ("2.0", 2, "Linear", True),
        ("2.1", 2, "BatchNorm1d", True),
    ]
    owned = {r["path"]: (r["parameters"]["trainable"], r["buffers"]["elements"]) for r in report["layers"]}
    # Linear(3, 4): 12 + 4; Linear(4, 2): 8 + 2; BatchNorm1d(2): 4 parameters, 2 + 2 + 1 buffers.
    assert owned == {"": (0, 0), "0": (16, 0), "1": (0, 0), "2": (0, 0), "2.0": (10, 0), "2.1": (4, 5)}
    assert sum(trainable for trainable, _ in owned.values()) == report["totals"]["parameters"]["value"] == 30
    member = report["layers"][1]
    assert "input" not in member and "output" not in member
    assert member["metrics"]["calls"]["status"] == "unavailable"
    assert "operator_flops" not in member["metrics"], "what the scripted code runs is counted on its caller"
    root_flops, total_flops = report["layers"][0]["metrics"]["operator_flops"], report["totals"]["operator_flops"]
    assert root_flops["value"] == total_flops["value"] and root_flops["status"] == "complete"
    assert {(d["code"], d["path"]) for d in report["diagnostics"]} == {("scripted_module", "")}
    table = capsys.readouterr().out
    assert "├─0         Linear       ?                  16" in table
    assert "|    └─1    BatchNorm1d  ?                   4        5  True           -" in table


# ---- pruning (torch.nn.utils.prune) ----


class _LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 120)
        self.fc2 = nn.Linear(120, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def _pruned_lenet():
    torch.manual_seed(0)
    model = _LeNet()
    prune.l1_unstructured(model.conv1, "weight", amount=0.5)  # 75 of 150 weights kept
    prune.l1_unstructured(model.fc1, "weight", amount=0.75)  # 7,680 of 30,720 kept
    prune.l1_unstructured(model.fc1, "bias", amount=3)  # 117 of 120 biases kept
    # Pruned twice: a PruningContainer, whose mask is the product (40% of 1,200 kept).
    prune.random_unstructured(model.fc2, "weight", amount=0.2)
    prune.random_unstructured(model.fc2, "weight", amount=0.5)
    return model


def test_a_pruned_lenet_reports_dense_and_unmasked_counts(capsys):
    model = _pruned_lenet()
    hooks = {name: dict(m._forward_pre_hooks) for name, m in model.named_modules()}
    masks = {name: buffer.clone() for name, buffer in model.named_buffers()}
    report = summary(model, (1, 28, 28))
    layers = {r["path"]: r for r in report["layers"]}
    # Dense: the contract's count of the parameters (weight_orig, bias_orig) as registered.
    dense = {"conv1": 156, "conv2": 2416, "fc1": 30840, "fc2": 1210}
    assert {p: layers[p]["parameters"]["trainable"] for p in dense} == dense
    assert report["totals"]["parameters"]["value"] == sum(dense.values()) == 34622
    # Unmasked: conv1 75 + 6 biases; fc1 7,680 + 117; fc2 480 + 10; conv2 is not pruned.
    effective = {p: layers[p]["parameters"].get("effective") for p in dense}
    assert effective == {"conv1": 81, "conv2": None, "fc1": 7797, "fc2": 490}
    assert report["totals"]["effective_parameters"]["value"] == 81 + 2416 + 7797 + 490
    # MACs: one per weight element per position it is applied at. conv1 6x24x24 outputs x 25;
    # conv2 16x8x8 x 150; fc1 30,720; fc2 1,200. Unmasked: in proportion to the weights kept.
    macs = {p: layers[p]["metrics"]["macs"]["value"] for p in dense}
    assert macs == {"conv1": 86400, "conv2": 153600, "fc1": 30720, "fc2": 1200}
    kept = {p: layers[p]["metrics"].get("effective_macs", {}).get("value") for p in dense}
    assert kept == {"conv1": 43200, "conv2": None, "fc1": 7680, "fc2": 480}
    assert report["totals"]["effective_macs"]["value"] == 43200 + 153600 + 7680 + 480
    assert report["totals"]["macs"]["value"] == sum(macs.values())
    assert not report["diagnostics"]
    table = capsys.readouterr().out
    # 156 parameters, 81 kept; the 150-element mask buffer in its column.
    assert "├─conv1  Conv2d  (1, 6, 24, 24)        156 (81 unmasked)      150  True" in table
    assert "Unmasked params (pruning masks applied): 10,784" in table
    assert "Unmasked module-formula MACs (pruning masks applied): 204.96 kMACs" in table
    # The model is left as found: its pruning hooks and masks.
    assert {name: dict(m._forward_pre_hooks) for name, m in model.named_modules()} == hooks
    assert all(torch.equal(buffer, masks[name]) for name, buffer in model.named_buffers())


def test_compare_reports_sees_what_pruning_removes():
    torch.manual_seed(0)
    model = _LeNet()
    before = crawl_module(model, (1, 28, 28))
    prune.l1_unstructured(model.fc1, "weight", amount=0.5)
    after = crawl_module(model, (1, 28, 28))
    diff = torchscan.compare_reports(before, after)
    assert diff["totals"]["effective_parameters"]["delta"] == -15360
    assert diff["totals"]["effective_macs"]["delta"] == -15360
    assert diff["totals"]["parameters"]["delta"] == 0
    assert diff["totals"]["macs"]["delta"] == 0
    # Without masks the effective totals are the dense ones.
    assert before["totals"]["effective_parameters"]["value"] == before["totals"]["parameters"]["value"]
    assert before["totals"]["effective_macs"]["value"] == before["totals"]["macs"]["value"]


def test_a_pruned_module_without_a_weight_proportional_formula_says_so():
    model = nn.Sequential(nn.Linear(4, 4), nn.PReLU(4))
    prune.l1_unstructured(model[1], "weight", amount=0.5)
    report = crawl_module(model, (4,))
    layer = report["layers"][2]
    assert layer["parameters"]["effective"] == 2
    assert layer["metrics"]["effective_macs"]["status"] == "unavailable"
    assert [(d["code"], d["path"]) for d in report["diagnostics"]] == [("pruned_module_macs", "1")]
    assert report["totals"]["effective_macs"]["status"] == "partial"
    with pytest.raises(IncompleteAnalysisError):
        crawl_module(model, (4,), strict=True)


def test_a_pruned_module_called_twice_counts_its_mask_once():
    shared = nn.Linear(4, 4, bias=False)
    prune.l1_unstructured(shared, "weight", amount=0.25)  # 12 of 16 kept
    report = crawl_module(nn.Sequential(shared, nn.ReLU(), shared), (4,))
    calls = [r for r in report["layers"] if r["path"] == "0"]
    assert [(c["parameters"]["trainable"], c["parameters"]["effective"]) for c in calls] == [(16, 12), (0, 0)]
    assert [c["metrics"]["effective_macs"]["value"] for c in calls] == [12, 12]
    assert report["totals"]["effective_parameters"]["value"] == 12


class _Branch(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.proj = shared

    def forward(self, x):
        return self.proj(x)


class _SharedUnderThreeNames(nn.Module):
    def __init__(self):
        super().__init__()
        shared = nn.Linear(3, 3)
        self.enc, self.dec, self.direct = _Branch(shared), _Branch(shared), shared

    def forward(self, x):
        return self.direct(self.dec(self.enc(x)))


def test_a_module_under_several_names_is_listed_under_its_caller():
    report = crawl_module(_SharedUnderThreeNames(), args=(torch.randn(2, 3),))
    calls = [(layer["path"], layer["call_index"], layer.get("aliases")) for layer in report["layers"]]
    assert calls == [
        ("", 0, None),
        ("enc", 0, None),
        ("enc.proj", 0, ["dec.proj", "direct"]),
        ("dec", 0, None),
        ("dec.proj", 0, ["enc.proj", "direct"]),
        ("direct", 0, ["enc.proj", "dec.proj"]),
    ]
    # Its 12 parameters are counted once, at the first call; the others are marked shared.
    by_path = {layer["path"]: layer for layer in report["layers"]}
    assert by_path["enc.proj"]["parameters"]["trainable"] == 12
    assert by_path["direct"]["parameters"] == {"trainable": 0, "frozen": 0, "bytes": 0, "shared": True}
    assert report["totals"]["parameters"]["value"] == 12
    # Each call's operators are its own: 2 x 2 x 3 x 3 each and 2 x 3 bias adds.
    assert by_path["dec.proj"]["metrics"]["operator_flops"]["value"] == 36 + 6
    assert by_path["dec"]["metrics"]["operator_flops"]["value"] == 36 + 6


def test_a_lazy_layer_is_marked_in_the_report_and_the_table(capsys):
    report = summary(nn.Sequential(nn.LazyLinear(3), nn.ReLU()), (4,))
    assert report["layers"][1]["lazy"] is True
    assert "lazy" not in report["layers"][2]
    assert "Linear (lazy)" in capsys.readouterr().out
