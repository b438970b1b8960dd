"""torchscan.Throughput: FLOP/s and MFU of counted, timed steps, on CPU with exact FLOP counts and a
controlled clock (src/throughput.rs tests the arithmetic and the status rules by hand)."""

import pytest
import torch

import torchscan
from helpers import schema_validator
from torchscan import Throughput, peak_flops


class Clock:
    """A clock that moves only when told: each reading returns the next of `readings`."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0)


A, B = torch.randn(2, 3), torch.randn(3, 4)
MM = 2 * 2 * 3 * 4  # one [2,3] @ [3,4]: 48 FLOPs


def test_flops_per_second_and_mfu_of_exact_steps():
    # Three steps of one mm each (48 FLOPs), timed 0.5 s, 0.25 s and 0.25 s: 144 FLOPs in 1 s.
    clock = Clock(10.0, 10.5, 20.0, 20.25, 30.0, 30.25)
    meter = Throughput(peak_flops=1440.0, clock=clock)
    for _ in range(3):
        with meter.step():
            torch.mm(A, B)
    report = meter.report()
    assert schema_validator("throughput_report").is_valid(report)
    assert (report["steps"], report["seconds"]) == (3, 1.0)
    assert report["flops"]["status"] == "complete"
    assert report["flops"]["value"] == 3 * MM
    assert report["flops_per_second"] == {"status": "complete", "value": 144.0, "known_value": 144.0, "unit": "FLOP/s"}
    # 144 FLOP/s of a 1440 FLOP/s peak.
    assert report["mfu"] == {"status": "complete", "value": 0.1, "known_value": 0.1, "unit": "fraction"}
    assert report["peak_flops_per_second"] == 1440.0
    assert "per_step" not in report  # no per-step figures unless asked


def test_a_training_step_counts_forward_backward_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 3)
    meter = Throughput(keep_steps=True, clock=Clock(0.0, 2.0), modules=model)
    with meter.step():
        model(x).sum().backward()
        optimizer.step()
    with torchscan.count_flops() as counter:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    report = meter.report()
    # The same work as count_flops counts (zero_grad(set_to_none) does none).
    assert report["flops"]["value"] == counter.report()["total"]["value"]
    assert report["flops_per_second"]["value"] == report["flops"]["value"] / 2.0
    assert report["mfu"]["status"] == "unavailable"  # no peak given
    record = report["per_step"][0]
    assert report["per_step"] == [{"flops": record["flops"], "by_phase": record["by_phase"], "seconds": 2.0}]
    assert report["per_step"][0]["flops"]["value"] == report["flops"]["value"]


def test_phases_of_a_linear_sgd_loop_with_the_optimizer_apart():
    # Linear(4, 3) on a [2, 4] batch, loss = out.sum(), plain SGD; per step (zero_grad sets the
    # gradients to None: no work, and no gradient accumulation):
    #   forward:   addmm 2*2*4*3 = 48 multiply-adds' FLOPs + 2*3 = 6 bias adds, sum of the 6 outputs
    #              6 (1 per element summed)                                  -> 48 + 6 + 6 = 60
    #   backward:  grad of W = grad_out^T @ x: 2*3*2*4 = 48, grad of b = sum over the batch of
    #              grad_out [2, 3]: 6 (x needs no gradient: no grad_input)   -> 48 + 6 = 54
    #   optimizer: p -= lr * grad, one FLOP per parameter element: 4*3 + 3  -> 15
    # 3 steps: forward 180, backward 162, optimizer 45, total 3 * 129 = 387.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(2, 4)

    def step():
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    with torchscan.count_flops() as counter:
        step()
    one = counter.report()["by_phase"]
    per_step = {"forward": 60, "backward": 54, "optimizer": 15}
    assert {phase: m["value"] for phase, m in one.items()} == per_step
    meter = Throughput(keep_steps=True, clock=SteadyClock())
    for _ in range(3):
        with meter.step():
            step()
    report = meter.report()
    assert schema_validator("throughput_report").is_valid(report)
    assert {phase: (m["status"], m["value"], m["scope"]) for phase, m in report["by_phase"].items()} == {
        "forward": ("complete", 180, "phase"),
        "backward": ("complete", 162, "phase"),
        "optimizer": ("complete", 45, "phase"),
    }
    assert report["flops"]["value"] == 387 == sum(m["value"] for m in report["by_phase"].values())
    # Each step's record carries its own phases, those count_flops gives for one step.
    assert [record["by_phase"] for record in report["per_step"]] == [one] * 3
    # Without keep_steps, folded records keep the phases: the same report, per_step aside.
    from torchscan.throughput import FOLD_AT

    folded = Throughput(clock=SteadyClock())
    for _ in range(FOLD_AT + 1):
        with folded.step():
            step()
    assert len(folded._steps) < FOLD_AT
    # 257 steps: forward 257 * 60 = 15,420, backward 257 * 54 = 13,878, optimizer 257 * 15 = 3,855.
    phases = folded.report()["by_phase"]
    assert {phase: m["value"] for phase, m in phases.items()} == {
        "forward": 15_420,
        "backward": 13_878,
        "optimizer": 3_855,
    }


def test_a_partial_step_makes_a_lower_bound():
    lib = torch.library.Library("throughput_test", "FRAGMENT")
    lib.define("opaque(Tensor x) -> Tensor")
    lib.impl("opaque", lambda x: x * 2, "CPU")
    meter = Throughput(peak_flops=96.0, clock=Clock(0.0, 1.0))
    with meter.step():
        torch.ops.throughput_test.opaque(torch.mm(A, B))
    report = meter.report()
    assert report["flops"]["status"] == "partial"
    assert report["flops_per_second"] == {"status": "partial", "value": None, "known_value": 48.0, "unit": "FLOP/s"}
    assert report["mfu"] == {"status": "partial", "value": None, "known_value": 0.5, "unit": "fraction"}


def test_a_step_that_raises_is_not_timed_and_its_exception_propagates():
    meter = Throughput(clock=Clock(0.0, 1.0, 5.0))
    with pytest.raises(ZeroDivisionError), meter.step():
        torch.mm(A, B)
        1 / 0  # noqa: B018
    assert meter.steps == 0
    with meter.step():  # the meter still works, and the next step reads the clock afresh
        torch.mm(A, B)
    assert meter.report()["seconds"] == 4.0
    assert torchscan.measure_flops(lambda: torch.mm(A, B))["total"]["value"] == MM  # nothing left behind


def test_steps_do_not_nest():
    meter = Throughput(clock=Clock(0.0, 1.0, 2.0))
    with meter.step(), pytest.raises(RuntimeError, match="steps do not nest"), meter.step():
        pass
    assert meter.steps == 1


def test_no_steps_no_rate():
    report = Throughput().report()
    assert report["steps"] == 0
    assert report["flops_per_second"]["status"] == "unavailable"


def test_the_peak_table():
    assert peak_flops("A100", torch.bfloat16) == 312e12
    assert peak_flops("H100-SXM", "float32") == 67e12
    assert peak_flops("H100-SXM", torch.float16) == peak_flops("H100-SXM") == 989.5e12
    assert set(torchscan.PEAK_FLOPS["V100-SXM2"]) == {"float16", "float32"}
    with pytest.raises(ValueError, match="no peak for device 'H1000'; known: A10, A100, H100-PCIe"):
        peak_flops("H1000")
    with pytest.raises(ValueError, match=r"no V100-SXM2 peak for dtype torch.bfloat16; known: float16, float32"):
        peak_flops("V100-SXM2", torch.bfloat16)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"peak_flops": 0}, ValueError, "peak_flops must be a positive number of FLOP/s or None, got 0"),
        ({"peak_flops": float("nan")}, ValueError, "got nan"),
        ({"peak_flops": "A100"}, ValueError, "got 'A100'"),
        ({"synchronize": "yes"}, ValueError, "synchronize must be True, False or None, got 'yes'"),
        ({"clock": 3}, TypeError, "clock must be a callable returning seconds, got a int"),
        ({"threads": "some"}, ValueError, "threads"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        Throughput(**kwargs)


def test_a_clock_that_misbehaves_is_named():
    meter = Throughput(clock=Clock(5.0, 4.0))
    with pytest.raises(ValueError, match="the clock went backwards"), meter.step():
        pass
    meter = Throughput(clock=lambda: "now")
    with pytest.raises(ValueError, match="the clock must return finite seconds, got 'now'"), meter.step():
        pass
    assert meter.steps == 0
    assert torchscan.measure_flops(lambda: torch.mm(A, B))["total"]["value"] == MM


class SteadyClock:
    """A clock that advances 0.25 s per reading (exact in binary: sums are exact too)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += 0.25
        return self.now


def test_a_long_loop_keeps_a_bounded_record_and_the_same_report():
    from torchscan.throughput import FOLD_AT

    steps = 2 * FOLD_AT + 37
    folded, kept = (
        Throughput(peak_flops=384.0, clock=SteadyClock()),
        Throughput(peak_flops=384.0, clock=SteadyClock(), keep_steps=True),
    )
    for meter in (folded, kept):
        for _ in range(steps):
            with meter.step():
                torch.mm(A, B)
    # Folded every FOLD_AT steps: never more than FOLD_AT records, whatever the loop's length.
    assert len(folded._steps) < FOLD_AT
    assert folded.steps == kept.steps == steps
    report, reference = folded.report(), kept.report()
    # 549 steps of 48 FLOPs, each 0.25 s: 26,352 FLOPs in 137.25 s, 192 FLOP/s, MFU 192/384.
    assert report["steps"] == steps and report["flops"]["value"] == steps * MM == 26_352
    assert report["seconds"] == steps * 0.25
    assert report["flops_per_second"]["value"] == 192.0 and report["mfu"]["value"] == 0.5
    assert {k: v for k, v in reference.items() if k != "per_step"} == report
    assert schema_validator("throughput_report").is_valid(report)
