"""Faults: a workload, forward, hook, backward or optimizer step that raises (any exception,
KeyboardInterrupt, SystemExit and GeneratorExit included) propagates unchanged and leaves no
native session, no module hook, no memory reporter and no changed training flag behind; the
next measurement is exact.
"""

import pytest
import torch
from torch import nn

import torchscan
from reliability_helpers import assert_left_as_found, model_state, process_state
from torchscan import crawl_module, measure_flops, summary
from torchscan.process import measure_peak_memory

EXCEPTIONS = [
    pytest.param(lambda: RuntimeError("forward failed"), id="RuntimeError"),
    pytest.param(lambda: KeyboardInterrupt(), id="KeyboardInterrupt"),
    pytest.param(lambda: SystemExit(3), id="SystemExit"),
    pytest.param(lambda: GeneratorExit(), id="GeneratorExit"),
]


class Trap(nn.Module):
    """Identity until armed; then its forward raises the armed exception."""

    def __init__(self) -> None:
        super().__init__()
        self.armed: BaseException | None = None

    def forward(self, x):
        if self.armed is not None:
            raise self.armed
        return x


class Faulty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.act = nn.ReLU()
        self.trap = Trap()
        self.head = nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 2))

    def forward(self, x):
        return self.head(self.trap(self.act(self.bn(self.fc1(x)))))


def faulty_model():
    """Mixed training flags (root training, BatchNorm and Dropout in eval), so any blanket
    train()/eval() left behind shows."""
    torch.manual_seed(0)
    model = Faulty().train()
    model.bn.eval()
    model.head[0].eval()
    return model


# Operator FLOPs of one Faulty forward on 3 rows, by hand: fc1 addmm 2*3*4*8 = 192 plus its 24
# bias adds, eval batch norm 2 per element * 24 = 48, ReLU 24, trap 0, eval Dropout 0, head addmm
# 2*3*8*2 = 96 plus its 6 bias adds.
FAULTY_FLOPS = 192 + 24 + 48 + 24 + 96 + 6


def _run_measure_flops(model, x):
    return measure_flops(lambda: model(x))["total"]["value"]


def _run_count_flops(model, x):
    with torchscan.count_flops() as counter:
        model(x)
    return counter.report()["total"]["value"]


def _run_crawl(model, x):
    # Generated input: batch 1, so a third of the 3-row count.
    return crawl_module(model, (4,))["totals"]["operator_flops"]["value"] * 3


def _run_crawl_structure(model, x):
    return [(layer["path"], layer["call_index"]) for layer in crawl_module(model, (4,), mode="structure")["layers"]]


def _run_summary(model, x):
    return summary(model, (4,))["totals"]["operator_flops"]["value"] * 3


def _run_peak_memory(model, x):
    return measure_peak_memory(lambda: model(x), device="cpu")


LAYERS = [("", 0), ("fc1", 0), ("bn", 0), ("act", 0), ("trap", 0), ("head", 0), ("head.0", 0), ("head.1", 0)]
ENTRY_POINTS = [
    pytest.param(_run_measure_flops, FAULTY_FLOPS, id="measure_flops"),
    pytest.param(_run_count_flops, FAULTY_FLOPS, id="count_flops"),
    pytest.param(_run_crawl, FAULTY_FLOPS, id="crawl_module"),
    pytest.param(_run_crawl_structure, LAYERS, id="crawl_module-structure"),
    pytest.param(_run_summary, FAULTY_FLOPS, id="summary"),
    pytest.param(_run_peak_memory, None, id="measure_peak_memory"),
]


@pytest.mark.parametrize("make_error", EXCEPTIONS)
@pytest.mark.parametrize("run, expected", ENTRY_POINTS)
def test_a_forward_that_raises_leaves_everything_as_found(run, expected, make_error, capsys):
    model = faulty_model()
    x = torch.randn(3, 4)
    before_model, before_process = model_state(model), process_state()
    # An undisturbed measurement first: exact where a hand count exists, the reference anyway.
    reference = run(model, x)
    if expected is not None:
        assert reference == expected
    assert_left_as_found(model, before_model, before_process)
    capsys.readouterr()
    error = make_error()
    model.trap.armed = error
    with pytest.raises(type(error)) as caught:
        run(model, x)
    assert caught.value is error, "the forward's exception must propagate unchanged"
    assert capsys.readouterr().out == "", "nothing is printed for a failed analysis"
    assert_left_as_found(model, before_model, before_process)
    # The next measurement of the same model equals the undisturbed one.
    model.trap.armed = None
    assert run(model, x) == reference
    assert_left_as_found(model, before_model, before_process)


@pytest.mark.parametrize("make_error", EXCEPTIONS)
def test_a_user_pre_hook_that_raises_inside_crawl_module(make_error):
    # PyTorch runs always-called forward hooks only for Exception subclasses: for the others
    # torchscan's forward hook never sees the module exit, and the analysis must still clean up.
    model = faulty_model()
    error = make_error()

    def hook(module, args):
        raise error

    handle = model.head.register_forward_pre_hook(hook)
    before_model, before_process = model_state(model), process_state()
    try:
        with pytest.raises(type(error)) as caught:
            crawl_module(model, (4,))
        assert caught.value is error
        assert_left_as_found(model, before_model, before_process)
    finally:
        handle.remove()
    report = crawl_module(model, (4,))
    assert report["totals"]["operator_flops"]["value"] * 3 == FAULTY_FLOPS
    assert [(layer["path"], layer["call_index"]) for layer in report["layers"]] == LAYERS


def test_a_shared_module_that_fails_on_its_second_call_leaves_no_call_count_behind():
    shared = Trap()

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = shared
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            x = self.shared(x)
            shared.armed = KeyError("second call")
            return self.fc(self.shared(x))

    model = Twice()
    with pytest.raises(KeyError, match="second call"):
        crawl_module(model, (2,))
    shared.armed = None

    class Once(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = shared
            self.fc = model.fc

        def forward(self, x):
            return self.fc(self.shared(x))

    report = crawl_module(Once(), (2,))
    assert [(layer["path"], layer["call_index"]) for layer in report["layers"]] == [("", 0), ("shared", 0), ("fc", 0)]


# ---- training steps: backward hooks and optimizer steps that raise ----


class Stop(Exception):
    pass


def training_setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 4)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(x).sum().backward()
        optimizer.step()

    return model, optimizer, step


# One step, by hand. Forward: addmm 2*5*4*3 = 120 plus 15 bias adds, ReLU 15, addmm 2*5*3*2 = 60
# plus 10 bias adds, the loss's sum 10.
# Backward: second layer input and weight gradients (mm 60 + 60), its bias gradient (sum of 10),
# ReLU's threshold_backward 15, first layer weight gradient (mm 120; x needs none), its bias
# gradient (sum of 15). SGD without momentum: add_ over the 23 parameters (the optimizer phase).
STEP_FORWARD = 120 + 15 + 15 + 60 + 10 + 10
STEP_BACKWARD = 60 + 60 + 10 + 15 + 120 + 15
STEP_OPTIMIZER = 23


def _assert_exact_step(report):
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["total"]["value"] == STEP_FORWARD + STEP_BACKWARD + STEP_OPTIMIZER
    assert report["by_phase"]["forward"]["value"] == STEP_FORWARD
    assert report["by_phase"]["backward"]["value"] == STEP_BACKWARD
    assert report["by_phase"]["optimizer"]["value"] == STEP_OPTIMIZER


def _measure(how, step):
    if how == "measure_flops":
        return measure_flops(step)
    with torchscan.count_flops() as counter:
        step()
    return counter.report()


@pytest.mark.parametrize("how", ["measure_flops", "count_flops"])
@pytest.mark.parametrize("make_error", [lambda: Stop("in backward"), lambda: KeyboardInterrupt()])
def test_a_backward_hook_that_raises(how, make_error):
    model, _, step = training_setup()
    error = make_error()
    before_model, before_process = model_state(model), process_state()

    def hook(module, grad_input, grad_output):
        raise error

    handle = model[2].register_full_backward_hook(hook)
    try:
        with pytest.raises(type(error)) as caught:
            _measure(how, step)
        assert caught.value is error
    finally:
        handle.remove()  # the user's own hook, removed by the user
    assert_left_as_found(model, before_model, before_process)
    _assert_exact_step(_measure(how, step))


def test_a_tensor_hook_that_raises_during_backward_inside_measure_peak_memory():
    model, _, _ = training_setup()
    x = torch.randn(5, 4)

    def step():
        out = model(x)
        out.register_hook(lambda grad: (_ for _ in ()).throw(Stop("tensor hook")))
        out.sum().backward()

    with pytest.raises(Stop, match="tensor hook"):
        measure_peak_memory(step, device="cpu")
    assert str(torch._C._autograd._profiler_type()) == "ActiveProfilerType.NONE", "the memory reporter is left"
    assert measure_peak_memory(lambda: torch.empty(250_000), device="cpu")["peak_bytes"] == 1_000_000


@pytest.mark.parametrize("how", ["measure_flops", "count_flops"])
def test_an_optimizer_step_pre_hook_that_raises(how):
    model, optimizer, step = training_setup()
    weights = [p.detach().clone() for p in model.parameters()]

    def hook(opt, args, kwargs):
        raise Stop("optimizer refused")

    handle = optimizer.register_step_pre_hook(hook)
    try:
        with pytest.raises(Stop, match="optimizer refused"):
            _measure(how, step)
    finally:
        handle.remove()
    assert all(torch.equal(w, p) for w, p in zip(weights, model.parameters(), strict=True)), "no update happened"
    assert torch.ops.torchscan.live_sessions() == 0
    _assert_exact_step(_measure(how, step))


@pytest.mark.parametrize("how", ["measure_flops", "count_flops"])
def test_an_optimizer_step_that_raises_half_way(how):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x = torch.randn(5, 4)

    class HalfStep(torch.optim.SGD):
        """Updates the first parameter, then fails."""

        def step(self, closure=None):
            first = self.param_groups[0]["params"][0]
            with torch.no_grad():
                first.add_(first.grad, alpha=-0.1)
            raise Stop("optimizer failed after one update")

    failing = HalfStep(model.parameters(), lr=0.1)

    def failing_step():
        failing.zero_grad(set_to_none=True)
        model(x).sum().backward()
        failing.step()

    with pytest.raises(Stop, match="after one update"):
        _measure(how, failing_step)
    assert torch.ops.torchscan.live_sessions() == 0
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(x).sum().backward()
        optimizer.step()

    _assert_exact_step(_measure(how, step))


# ---- faults around the counting itself ----


def test_a_custom_formula_interrupted_by_keyboard_interrupt_frees_the_session():
    x = torch.randn(3, 4)

    def interrupted(x_shape, *, out_shape):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        measure_flops(lambda: torch.sin(x), custom_mapping={torch.ops.aten.sin: interrupted})
    assert torch.ops.torchscan.live_sessions() == 0
    report = measure_flops(lambda: torch.sin(x))
    assert report["total"] == {**report["total"], "status": "complete", "value": 12}


def test_an_inner_measurement_that_raises_does_not_disturb_the_outer_one():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    caught = []

    def inner():
        torch.mm(a, b)
        raise Stop("inner failed")

    def outer():
        torch.mm(a, b)
        try:
            measure_flops(inner)
        except Stop as error:
            caught.append(error)
        torch.mm(a, b)

    report = measure_flops(outer)
    assert len(caught) == 1
    # The inner workload's mm ran before it raised: the outer session counted it too.
    assert report["total"]["value"] == 3 * 2 * 3 * 4 * 5
    assert report["operator_calls"] == {"aten.mm": 3}


def test_a_workload_that_raises_inside_a_nested_crawl_module():
    model = faulty_model()
    model.trap.armed = Stop("nested forward")
    a, b = torch.randn(3, 4), torch.randn(4, 5)

    def outer():
        torch.mm(a, b)
        with pytest.raises(Stop):
            crawl_module(model, (4,))

    before_model = model_state(model)
    report = measure_flops(outer)
    assert model_state(model) == before_model
    # The outer count holds the mm and the crawl's forward up to the trap (fc1 with its bias, bn,
    # act on 1 row).
    assert report["total"]["value"] == 2 * 3 * 4 * 5 + (192 + 24 + 48 + 24) // 3
