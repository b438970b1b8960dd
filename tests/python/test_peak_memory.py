"""measure_peak_memory: exact CPU peaks from allocator events, clean errors, profiler safety."""

import pytest
import torch
from torch import nn

from torchscan.process import measure_peak_memory

MB = 1_000_000


def test_hand_computed_cpu_peak_is_exact():
    def workload():
        a = torch.empty(MB)  # 4 MB
        b = torch.empty(MB // 2)  # 2 MB: 6 MB live
        del a  # 2 MB live
        c = torch.empty(MB // 4)  # 1 MB: 3 MB live
        return b, c

    stats = measure_peak_memory(workload, device="cpu")
    assert stats == {
        "device": "cpu",
        "metric": "pytorch_tensor_bytes",
        "baseline_bytes": 0,
        "peak_bytes": 6 * MB,
        "delta_bytes": 6 * MB,
    }


def test_blocks_allocated_before_the_start_do_not_count():
    before = torch.empty(MB)

    def workload():
        nonlocal before
        del before  # freeing an older block neither lowers nor raises the workload's peak
        torch.empty(MB // 2)

    assert measure_peak_memory(workload, device=torch.device("cpu"))["delta_bytes"] == 2 * MB


def test_training_step_holds_at_least_its_weight_gradient():
    layer = nn.Linear(1000, 1000, bias=False)
    x = torch.randn(1, 1000)

    def step():
        layer.zero_grad(set_to_none=True)
        layer(x).sum().backward()

    stats = measure_peak_memory(step, device="cpu")
    # The weight gradient (1000 x 1000 float32) stays live; the activations add a few KB.
    assert 4 * MB <= stats["peak_bytes"] <= 4 * MB + 64_000
    assert layer.weight.grad is not None


def test_profiler_type_query_inside_the_measurement_does_not_crash():
    seen = []
    measure_peak_memory(lambda: seen.append(torch._C._autograd._profiler_type()), device="cpu")
    assert str(seen[0]) == "ActiveProfilerType.NONE"
    assert not torch.autograd.profiler._is_profiler_enabled


def test_refuses_while_torch_profiler_runs_and_leaves_it_working():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with pytest.raises(RuntimeError, match="cannot run while a profiler"):
            measure_peak_memory(lambda: torch.ones(3), device="cpu")
        torch.mm(torch.ones(2, 2), torch.ones(2, 2))
    assert any(e.name == "aten::mm" for e in prof.events())


def test_nested_measurements_are_refused_and_the_outer_one_stands():
    inner_errors = []

    def outer():
        torch.empty(MB)
        try:
            measure_peak_memory(lambda: torch.empty(MB), device="cpu")
        except RuntimeError as error:
            inner_errors.append(str(error))

    assert measure_peak_memory(outer, device="cpu")["peak_bytes"] == 4 * MB
    assert len(inner_errors) == 1


def test_workload_exception_propagates_and_the_next_measurement_is_correct():
    error = ValueError("boom")
    calls = []

    def workload():
        calls.append(1)
        torch.empty(MB)
        raise error

    with pytest.raises(ValueError) as caught:
        measure_peak_memory(workload, device="cpu")
    assert caught.value is error
    assert calls == [1]
    assert measure_peak_memory(lambda: torch.empty(MB // 2), device="cpu")["peak_bytes"] == 2 * MB


@pytest.mark.parametrize(
    "device, error, message",
    [
        (3, TypeError, "device must be a torch.device or a string like 'cpu' or 'cuda:0', got int"),
        ("cpu:1", RuntimeError, "device cpu:1 is not available"),
        ("nonsense", RuntimeError, "device 'nonsense' is not a device PyTorch knows"),
        ("meta", NotImplementedError, "supports the cpu, cuda and mps devices, not 'meta'"),
    ],
)
def test_bad_devices(device, error, message):
    calls = []
    with pytest.raises(error, match=message):
        measure_peak_memory(lambda: calls.append(1), device=device)
    assert calls == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_unavailable_cuda_names_the_device():
    with pytest.raises(RuntimeError, match=r"device cuda:0 is not available: torch.cuda.is_available\(\) is False"):
        measure_peak_memory(lambda: None, device="cuda:0")


def test_workload_must_be_callable():
    with pytest.raises(TypeError, match="workload must be a zero-argument callable, got str"):
        measure_peak_memory("model", device="cpu")


class FakeMps:
    """torch.mps as an Apple machine shows it, for this Linux CI: the MPS allocator's driver
    and tensor figures, moved by the workload, and every call logged (as torchscan 0.2's tests
    mocked torch.mps)."""

    def __init__(self, driver, allocated):
        self.driver, self.allocated, self.log = driver, allocated, []

    def synchronize(self):
        self.log.append("synchronize")

    def driver_allocated_memory(self):
        self.log.append("driver")
        return self.driver

    def current_allocated_memory(self):
        self.log.append("current")
        return self.allocated


@pytest.fixture
def fake_mps(monkeypatch):
    fake = FakeMps(driver=3 * MB, allocated=MB)
    for name in ("synchronize", "driver_allocated_memory", "current_allocated_memory"):
        monkeypatch.setattr(torch.mps, name, getattr(fake, name))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    return fake


def test_mps_reports_what_the_allocator_holds_from_the_driver(fake_mps):
    def workload():
        fake_mps.log.append("workload")
        # The workload's blocks: 5 MB more from the driver; 2 MB of tensors still alive at the end.
        fake_mps.driver += 5 * MB
        fake_mps.allocated += 2 * MB

    stats = measure_peak_memory(workload, device="mps")
    assert stats == {
        "device": "mps",
        "metric": "pytorch_driver_allocated_bytes",
        "baseline_bytes": 3 * MB,
        "peak_bytes": 8 * MB,
        "delta_bytes": 5 * MB,
        "allocated_end_bytes": 3 * MB,
    }
    # Synchronized around the workload, so that queued kernels have allocated what they need.
    assert fake_mps.log == ["synchronize", "driver", "workload", "synchronize", "driver", "current"]


def test_mps_never_reports_a_negative_delta(fake_mps):
    def trims_the_cache():  # the allocator's garbage collector released cached blocks
        fake_mps.driver -= 2 * MB

    stats = measure_peak_memory(trims_the_cache, device=torch.device("mps:0"))
    assert (stats["baseline_bytes"], stats["peak_bytes"], stats["delta_bytes"]) == (3 * MB, 3 * MB, 0)


def test_mps_errors_name_the_device(fake_mps, monkeypatch):
    calls = []
    with pytest.raises(RuntimeError, match="device mps:1 is not available: there is one MPS device, 'mps'"):
        measure_peak_memory(lambda: calls.append(1), device="mps:1")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"device mps is not available: no MPS device is available"):
        measure_peak_memory(lambda: calls.append(1), device="mps")
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: False)
    with pytest.raises(RuntimeError, match="not built into this PyTorch"):
        measure_peak_memory(lambda: calls.append(1), device="mps")
    assert calls == []
