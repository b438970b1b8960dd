"""measure_flops's behaviour: completeness, custom operators, errors, isolation, threads."""

import json
import threading

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import torchscan
from helpers import fcm_comparable, fcm_total

# A custom operator with a CPU kernel of its own and no formula (defined once per process).
_LIB = torch.library.Library("torchscan_test", "DEF")
_LIB.define("scale_rows(Tensor x, int factor) -> Tensor")
_LIB.impl("scale_rows", lambda x, factor: x * factor, "CPU")


def resnet18():
    return torchvision.models.resnet18(weights=None)


def training_step(model, x):
    """Zero the gradients, then forward and backward of a sum loss."""

    def step():
        model.zero_grad()
        model(x).sum().backward()

    return step


def test_resnet18_forward_is_complete_and_matches_pytorch():
    model = resnet18().eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        report = torchscan.measure_flops(lambda: model(x))
        pytorch = fcm_total(lambda: model(x))
    assert report["total"]["status"] == "complete"
    assert report["diagnostics"] == []
    # FlopCounterMode drops fc's bias add (1 x 1000, the bias convention); the rest agrees.
    assert pytorch == 3_628_146_688
    assert fcm_comparable(report) == pytorch + 1_000
    # Hand check of one leaf: layer1.0.conv1 is 3x3, 64->64 at 56x56: 2*64*64*9*56*56.
    assert report["by_module"]["ResNet.layer1.0.conv1"] == 231_211_008
    # A parent includes its children; the root holds everything.
    assert report["by_module"]["ResNet"] == report["total"]["value"]
    layer1 = report["by_module"]["ResNet.layer1"]
    assert layer1 == report["by_module"]["ResNet.layer1.0"] + report["by_module"]["ResNet.layer1.1"]


def test_resnet18_training_step_is_complete_and_matches_pytorch():
    step = training_step(resnet18().train(), torch.randn(2, 3, 64, 64))
    report = torchscan.measure_flops(step)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert set(report["by_phase"]) == {"forward", "backward"}
    assert report["by_phase"]["forward"]["value"] + report["by_phase"]["backward"]["value"] == report["total"]["value"]
    # fc's bias add on the [2, 1000] output, which FlopCounterMode drops (its bias gradient is a
    # separate sum, a reduction, which neither side's comparable categories hold).
    assert fcm_comparable(report) == fcm_total(step) + 2 * 1_000
    # backward convolutions: input and weight gradients, except the stem's input gradient.
    assert report["operator_calls"]["aten.convolution_backward"] == 20


def test_backward_work_is_attributed_to_the_module_that_ran_forward():
    step = training_step(resnet18().train(), torch.randn(2, 3, 64, 64))
    report = torchscan.measure_flops(step)
    with FlopCounterMode(display=False) as counter:
        step()
    pytorch = counter.get_flop_counts()
    # A convolution leaf: forward 2*2*64*64*9*16*16 = 37_748_736, plus input and weight gradients
    # (what FlopCounterMode counts for it), plus the engine's accumulation of its input gradient
    # with the residual branch's (x feeds conv1 and the skip connection): 2*64*16*16 adds, run
    # between nodes right after conv1's backward and attributed to it.
    conv = report["by_module"]["ResNet.layer1.0.conv1"]
    assert sum(pytorch["ResNet.layer1.0.conv1"].values()) == 3 * 37_748_736
    assert conv == 3 * 37_748_736 + 2 * 64 * 16 * 16
    fc = report["by_module"]["ResNet.fc"]
    # The linear layer: its matrix products (FlopCounterMode's count), its bias's add into the
    # [2, 1000] output (the bias convention) and its bias gradient, the output gradient summed
    # over the batch.
    assert sum(pytorch["ResNet.fc"].values()) == 3 * 2 * 2 * 512 * 1000
    assert fc == 3 * 2 * 2 * 512 * 1000 + 2 * 1000 + 2 * 1000


def test_backward_phase_includes_the_engines_gradient_reductions():
    """The reduction that fits a bias gradient to the bias's shape runs in autograd's engine
    between nodes: it is backward work, not forward."""
    linear = torch.nn.Linear(4, 8)
    x = torch.randn(2, 4)
    y = linear(x).sum()
    report = torchscan.measure_flops(y.backward)
    phases = report["by_phase"]
    # grad weight: mm 2*8*2*4 = 128; grad bias: the sum of the [2,8] output gradient, 16.
    assert report["by_operator"] == {"aten.mm": 128, "aten.sum": 16}
    assert phases["backward"]["value"] == report["total"]["value"] == 144
    # Before the engine starts, backward() only creates the seed gradient (no arithmetic).
    assert phases["forward"]["value"] == 0


def test_custom_operator_without_formula_is_partial_and_named():
    x = torch.randn(3, 4)
    w = torch.randn(4, 5)
    report = torchscan.measure_flops(lambda: torch.ops.torchscan_test.scale_rows(x @ w, 3))
    assert report["total"]["status"] == "partial"
    assert report["total"]["value"] is None
    assert report["total"]["known_value"] == 120  # the matmul
    assert report["by_module_status"] == {}
    [diagnostic] = report["diagnostics"]
    assert diagnostic["code"] == "uncounted_operator"
    assert diagnostic["operator"] == "torchscan_test.scale_rows"
    assert diagnostic["metric"] == "flops"  # as torchscan 0.2 names operator diagnostics
    # Its child (aten::mul inside the kernel) is not taken as the operator's cost.
    assert "aten.mul" not in report["by_operator"]


def test_custom_mapping_completes_the_count():
    x = torch.randn(3, 4)
    seen = []

    def scale_rows_flops(x_shape, factor, *, out_shape):
        seen.append((x_shape, factor, out_shape))
        return x_shape.numel()

    report = torchscan.measure_flops(
        lambda: torch.ops.torchscan_test.scale_rows(x, 3),
        custom_mapping={torch.ops.torchscan_test.scale_rows: scale_rows_flops},
    )
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == 12
    assert report["by_operator"]["torchscan_test.scale_rows"] == 12
    assert report["operator_calls"]["torchscan_test.scale_rows"] == 1
    assert report["by_category"]["custom"] == 12
    assert seen == [(torch.Size([3, 4]), 3, torch.Size([3, 4]))]


def test_custom_mapping_overrides_a_builtin_formula_for_that_call_only():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    report = torchscan.measure_flops(
        lambda: torch.mm(a, b), custom_mapping={torch.ops.aten.mm: lambda a, b, out_shape: 7}
    )
    assert report["total"]["value"] == 7
    assert torchscan.measure_flops(lambda: torch.mm(a, b))["total"]["value"] == 120


def test_custom_formula_errors_are_diagnostics_not_zeroes():
    x = torch.randn(2, 2)

    def broken(*args, out_shape):
        raise ZeroDivisionError

    report = torchscan.measure_flops(
        lambda: torch.ops.torchscan_test.scale_rows(x, 2), custom_mapping={torch.ops.torchscan_test.scale_rows: broken}
    )
    assert report["total"]["status"] == "partial"
    assert report["diagnostics"][0]["code"] == "custom_formula_error"
    assert "ZeroDivisionError" in report["diagnostics"][0]["message"]


@pytest.mark.parametrize(
    "mapping, message",
    [
        ({torch.ops.aten.sin.default: lambda *a, **k: 0}, "not the overload aten.sin.default"),
        ({"aten::sin": lambda *a, **k: 0}, "got str"),
        ({torch.ops.aten.sin: 3}, "must be callable, got int"),
        ([(torch.ops.aten.sin, len)], "custom_mapping must be a mapping, got list"),
    ],
)
def test_custom_mapping_bad_input(mapping, message):
    calls = []
    with pytest.raises(TypeError, match=message):
        torchscan.measure_flops(lambda: calls.append(1), custom_mapping=mapping)
    assert calls == []


@pytest.mark.parametrize("workload", [None, 3, "model", torch.randn(2)])
def test_workload_must_be_callable(workload):
    with pytest.raises(TypeError, match="workload must be a zero-argument callable, got"):
        torchscan.measure_flops(workload)


def test_modules_argument_validation():
    with pytest.raises(TypeError, match=r"modules must be an nn\.Module or an iterable of them, got int"):
        torchscan.measure_flops(lambda: None, modules=3)
    with pytest.raises(TypeError, match=r"modules\[1\] must be an nn.Module, got str"):
        torchscan.measure_flops(lambda: None, modules=[nn.ReLU(), "x"])


def test_workload_runs_once_and_its_exception_propagates_unchanged():
    calls = []
    error = KeyError("boom")
    model = nn.Linear(4, 4)

    def workload():
        calls.append(1)
        model(torch.randn(2, 4))
        raise error

    with pytest.raises(KeyError) as caught:
        torchscan.measure_flops(workload)
    assert caught.value is error
    assert calls == [1]
    # The fixture checks no session or hook is left; the next measurement is correct.
    # 2 x 2 x 4 x 4 and the bias into the 2 x 4 outputs.
    assert torchscan.measure_flops(lambda: model(torch.randn(2, 4)))["by_category"]["matmul"] == 64 + 8


def test_keyboard_interrupt_also_closes_the_session():
    def workload():
        torch.mm(torch.randn(2, 2), torch.randn(2, 2))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        torchscan.measure_flops(workload)


def test_nested_measurements_count_inner_work_in_both():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    inner = {}

    def outer_work():
        torch.mm(a, b)
        inner["report"] = torchscan.measure_flops(lambda: torch.mm(a, b))

    outer = torchscan.measure_flops(outer_work)
    assert inner["report"]["total"]["value"] == 120
    assert outer["total"]["value"] == 240


def test_threads_measuring_at_once_get_their_own_counts():
    barrier = threading.Barrier(4)
    results = {}

    def worker(n):
        a, b = torch.randn(n, 8), torch.randn(8, 8)

        def work():
            barrier.wait()
            for _ in range(50):
                torch.mm(a, b)

        results[n] = torchscan.measure_flops(work)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n, report in results.items():
        assert report["total"]["value"] == 50 * 2 * n * 8 * 8
        assert report["operator_calls"]["aten.mm"] == 50


def test_modules_names_the_roots_to_label():
    encoder, head = nn.Linear(4, 8), nn.Linear(8, 2)
    x = torch.randn(1, 4)
    report = torchscan.measure_flops(lambda: head(encoder(x)), modules=[head])
    # head 2 x 8 x 2 and its bias's 2 adds; the encoder 2 x 4 x 8 and 8.
    assert report["by_module"] == {"Linear": 32 + 2}
    assert report["by_module_status"] == {"Linear": "complete"}
    assert report["total"]["value"] == 64 + 8 + 32 + 2


def test_reports_are_deterministic_and_json_serializable():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    x = torch.randn(1, 3, 8, 8)
    first = torchscan.measure_flops(lambda: model(x))
    second = torchscan.measure_flops(lambda: model(x))
    assert json.dumps(first) == json.dumps(second)
    assert list(first["by_module"]) == sorted(first["by_module"])
    assert first["by_module"]["Sequential.0"] == 2 * 4 * 3 * 9 * 36 + 4 * 36  # and the bias's adds


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_ops_are_usable_from_torchscript():
    @torch.jit.script
    def count(a: torch.Tensor, b: torch.Tensor) -> tuple[str, torch.Tensor]:
        handle = torch.ops.torchscan.open_session("")
        c = torch.mm(a, b)
        torch.ops.torchscan.close_session(handle)
        return torch.ops.torchscan.finish_session(handle, "[]"), c

    text, _ = count(torch.randn(3, 4), torch.randn(4, 5))
    report = json.loads(text)
    assert report["total"]["value"] == 120
    assert report["context"]["torch_version"] == torch.__version__.split("+")[0]


def test_native_errors_map_to_python_exceptions():
    ops = torch.ops.torchscan
    with pytest.raises(RuntimeError, match="unknown torchscan session handle 12345"):
        ops.close_session(12345)
    with pytest.raises(ValueError, match='invalid session configuration: unknown key "bogus"'):
        ops.open_session('{"bogus": 1}')
    handle = ops.open_session("")
    try:
        with pytest.raises(RuntimeError, match="without a matching push_scope"):
            ops.pop_scope(handle)
        with pytest.raises(RuntimeError, match="still open"):
            ops.finish_session(handle, "[]")
        ops.close_session(handle)
        with pytest.raises(ValueError, match="expected 0 results, got 1"):
            ops.finish_session(handle, "[1]")
    finally:
        ops.discard_session(handle)
