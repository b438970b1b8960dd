"""count_flops: the context-manager form of measure_flops (training loops)."""

import copy
import threading

import pytest
import torch
from torch import nn

import torchscan
from helpers import fcm_total
from torchscan.flops import FlopCounter

# A custom operator with a CPU kernel of its own and no formula (defined once per process).
_LIB = torch.library.Library("torchscan_count_test", "DEF")
_LIB.define("twice(Tensor x) -> Tensor")
_LIB.impl("twice", lambda x: x * 2, "CPU")


def small_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def test_equals_measure_flops_on_the_same_forward():
    model = small_net().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        with torchscan.count_flops() as counter:
            model(x)
        expected = torchscan.measure_flops(lambda: model(x))
    report = counter.report()
    assert report == expected
    assert report["total"]["status"] == "complete"
    # The convolution by hand: 2 * batch * out_channels * in_channels * 3*3 * 6*6, and the bias
    # added to its batch * out_channels * 6*6 outputs.
    assert report["by_module"]["Sequential.0"] == 2 * 2 * 4 * 3 * 9 * 36 + 2 * 4 * 36


def training_setup():
    torch.manual_seed(0)
    model = small_net().train()
    return model, adamw(model)


def adamw(model):
    # Single-tensor kernels (foreach=False), as on CPU by default, stated so the test is exact.
    return torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)


def test_training_step_forward_backward_and_optimizer_step():
    x, target = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 0])
    model, optimizer = training_setup()
    twin = copy.deepcopy(model)
    twin_optimizer = adamw(twin)
    initial = model[0].weight.detach().clone()

    with torchscan.count_flops(modules=model) as counter:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), target)
        loss.backward()
        optimizer.step()
    report = counter.report()

    def step():
        twin_optimizer.zero_grad()
        nn.functional.cross_entropy(twin(x), target).backward()
        twin_optimizer.step()

    assert report == torchscan.measure_flops(step, modules=twin)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    # The optimizer's step is its own phase (issue 44): forward, backward and optimizer add up.
    assert set(report["by_phase"]) == {"forward", "backward", "optimizer"}
    phases = report["by_phase"]
    assert sum(phases[name]["value"] for name in phases) == report["total"]["value"]
    # AdamW's work is all in the optimizer phase: its addcdiv_ (below) is not forward work.
    assert phases["optimizer"]["value"] >= report["by_operator"]["aten.addcdiv_"]
    # The backward of the convolution ran (weight gradient; the input needs none) ...
    assert report["operator_calls"]["aten.convolution_backward"] == 1
    # ... and so did the optimizer step: AdamW's addcdiv_ once per parameter tensor, at 3 FLOPs
    # per element (docs/methodology.md).
    parameters = list(model.parameters())
    assert report["operator_calls"]["aten.addcdiv_"] == len(parameters) == 6
    assert report["by_operator"]["aten.addcdiv_"] == 3 * sum(p.numel() for p in parameters)
    # The counted block did the real work: the parameters moved, exactly as the twin's did.
    assert not torch.equal(model[0].weight, initial)
    assert torch.equal(model[0].weight, twin[0].weight)


def test_several_iterations_of_a_loop_accumulate():
    model = nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with torchscan.count_flops() as counter:
        for _ in range(3):
            model.zero_grad()  # each iteration does the same work (no gradient accumulation)
            model(x).sum().backward()

    def one_iteration():
        model.zero_grad()
        model(x).sum().backward()

    single = torchscan.measure_flops(one_iteration)
    assert counter.report()["total"]["value"] == 3 * single["total"]["value"]


def test_report_is_a_fresh_copy_each_time():
    with torchscan.count_flops() as counter:
        torch.mm(torch.randn(3, 4), torch.randn(4, 5))
    first = counter.report()
    first["total"]["value"] = -1
    assert counter.report()["total"]["value"] == 120


def test_custom_mapping_and_uncounted_operators():
    x = torch.randn(3, 4)
    with torchscan.count_flops() as unpriced:
        torch.ops.torchscan_count_test.twice(x)
    report = unpriced.report()
    assert report["total"]["status"] == "partial"
    assert [d["operator"] for d in report["diagnostics"]] == ["torchscan_count_test.twice"]

    formula_inputs = []

    def twice_flops(x_shape, *, out_shape):
        formula_inputs.append((x_shape, out_shape))
        return x_shape.numel()

    mapping = {torch.ops.torchscan_count_test.twice: twice_flops}
    with torchscan.count_flops(custom_mapping=mapping) as priced:
        torch.ops.torchscan_count_test.twice(x)
    assert priced.report()["total"] == {**report["total"], "status": "complete", "value": 12, "known_value": 12}
    assert formula_inputs == [(torch.Size([3, 4]), torch.Size([3, 4]))]


def test_report_before_the_block_exits_raises():
    counter = torchscan.count_flops()
    with pytest.raises(RuntimeError, match="nothing was counted yet"):
        counter.report()
    with counter:
        torch.mm(torch.randn(2, 2), torch.randn(2, 2))
        with pytest.raises(RuntimeError, match="after the `with` block exits"):
            counter.report()
    assert counter.report()["total"]["value"] == 16


def test_an_exception_in_the_block_propagates_unchanged_and_cleans_up():
    model = nn.Linear(4, 4)
    error = KeyError("boom")
    with pytest.raises(KeyError) as caught:
        with torchscan.count_flops() as counter:
            model(torch.randn(2, 4))  # inside a module call's hooks, then leaves the block
            raise error
    assert caught.value is error
    # The fixture checks that no session and no hook is left; the counter has no report.
    assert torch.ops.torchscan.live_sessions() == 0
    with pytest.raises(RuntimeError, match=r"the counted block \(or finishing the count\) raised"):
        counter.report()
    # Counting works again right after.
    with torchscan.count_flops() as again:
        model(torch.randn(2, 4))
    assert again.report()["by_category"]["matmul"] == 64 + 8  # and the bias's adds


def test_an_exception_inside_a_module_forward_also_cleans_up():
    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("bad input")

    model = nn.Sequential(nn.Linear(4, 4), Broken())
    with pytest.raises(ValueError, match="bad input"):
        with torchscan.count_flops(modules=model):
            model(torch.randn(1, 4))


def test_keyboard_interrupt_also_cleans_up():
    with pytest.raises(KeyboardInterrupt):
        with torchscan.count_flops():
            torch.mm(torch.randn(2, 2), torch.randn(2, 2))
            raise KeyboardInterrupt


def test_entering_the_same_counter_twice_raises():
    counter = torchscan.count_flops()
    with counter:
        with pytest.raises(RuntimeError, match="already entered"):
            with counter:
                pass
        torch.mm(torch.randn(2, 3), torch.randn(3, 2))
    # The failed nested entry did not disturb the outer count.
    assert counter.report()["total"]["value"] == 2 * 2 * 3 * 2
    with pytest.raises(RuntimeError, match="already entered"):
        with counter:
            pass


def test_counters_nest_and_count_inner_work_in_both():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with torchscan.count_flops() as outer:
        torch.mm(a, b)
        with torchscan.count_flops() as inner:
            torch.mm(a, b)
    assert inner.report()["total"]["value"] == 120
    assert outer.report()["total"]["value"] == 240


def test_arguments_are_validated_before_any_work():
    with pytest.raises(TypeError, match=r"modules must be an nn\.Module or an iterable of them, got int"):
        torchscan.count_flops(modules=3)
    with pytest.raises(TypeError, match=r"not the overload aten\.sin\.default"):
        torchscan.count_flops(custom_mapping={torch.ops.aten.sin.default: lambda *a, **k: 0})


def test_public_surface():
    assert "count_flops" in torchscan.__all__
    assert isinstance(torchscan.count_flops(), FlopCounter)
    assert torchscan.count_flops is torchscan.flops.count_flops


@pytest.fixture
def registered_formula():
    """A library operator whose library registered its FLOP formula with PyTorch's flop counter."""
    from torch.utils.flop_counter import flop_registry, register_flop_formula

    library = torch.library.Library("torchscan_registered_test", "DEF")
    library.define("fused_mm(Tensor a, Tensor b) -> Tensor")
    library.impl("fused_mm", lambda a, b: a @ b, "CPU")
    operator = torch.ops.torchscan_registered_test.fused_mm

    @register_flop_formula(operator)
    def _(a_shape, b_shape, *, out_shape=None, **kwargs):
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]

    yield operator
    del flop_registry[operator]
    library._destroy()


def test_an_operator_priced_by_its_librarys_registered_formula(registered_formula):
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    report = torchscan.measure_flops(lambda: registered_formula(a, b))
    assert report["total"]["status"] == "complete"
    assert report["by_category"] == {"registered": 120}
    assert report["by_operator"] == {"torchscan_registered_test.fused_mm": 120}
    # PyTorch's own counter agrees (it uses the same formula).
    assert fcm_total(lambda: registered_formula(a, b)) == 120
    # The caller's own formula wins over the library's.
    mine = torchscan.measure_flops(
        lambda: registered_formula(a, b), custom_mapping={registered_formula: lambda *s, out_shape: 7}
    )
    assert mine["by_category"] == {"custom": 7}


def test_registered_formulas_do_not_replace_the_registry_for_aten_operators():
    from torch.utils.flop_counter import flop_registry

    assert torch.ops.aten.mm in flop_registry
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    report = torchscan.measure_flops(lambda: a @ b)
    assert report["by_category"] == {"matmul": 120}


# ---- the report built when first read (a counter per training step, few of them read) ----


def _mm_counter(a):
    with torchscan.count_flops(modules=[]) as counter:
        torch.mm(a, a)
    return counter


def test_unread_counters_hold_no_session_slot():
    # More counters than sessions can be open at once (64): their sessions, closed with their
    # reports unbuilt, are kept out of the slots.
    a = torch.randn(4, 4)
    before = torch.ops.torchscan.kept_sessions()
    counters = [_mm_counter(a) for _ in range(100)]
    assert torch.ops.torchscan.live_sessions() == 0
    assert torch.ops.torchscan.kept_sessions() == before + 100
    with torchscan.count_flops() as other:  # a new session still opens
        torch.mm(a, a)
    for counter in counters:
        assert counter.report()["total"]["value"] == 2 * 4 * 4 * 4
    assert torch.ops.torchscan.kept_sessions() == before + 1  # `other`, unread
    assert other.report()["by_operator"] == {"aten.mm": 128}
    assert torch.ops.torchscan.kept_sessions() == before


def test_an_unread_counter_frees_its_kept_session_when_dropped():
    a = torch.randn(4, 4)
    before = torch.ops.torchscan.kept_sessions()
    counter = _mm_counter(a)
    assert torch.ops.torchscan.kept_sessions() == before + 1
    del counter
    assert torch.ops.torchscan.kept_sessions() == before


def test_a_report_built_late_equals_one_built_at_once():
    model = small_net().train()
    x = torch.randn(2, 3, 8, 8)

    def step():
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    with torchscan.count_flops() as late:
        step()
    step()  # more work between the block and the first read changes nothing
    expected = torchscan.measure_flops(step)
    assert late.report() == expected
    assert late.report() == expected  # read again: the same report, from the built one


def test_threads_reading_one_counter_first_get_the_same_report():
    a = torch.randn(8, 8)
    counter = _mm_counter(a)
    results, barrier = [], threading.Barrier(4)

    def read():
        barrier.wait()
        results.append(counter.report())

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 4 and all(r == results[0] for r in results)
    assert results[0]["total"]["value"] == 2 * 8 * 8 * 8


def test_a_counter_opened_inside_a_backward_hook_counts_backward_work():
    # A tensor hook runs in autograd's engine between nodes (outside any node's record): a
    # counter opened there first meets the engine on its first operator, and what it counts is
    # backward work (the shim looks for the engine only on threads that entered a node, or that
    # were inside a graph task when the session first met them).
    x = torch.randn(3, 4, requires_grad=True)
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    reports = []

    def hook(grad: torch.Tensor) -> torch.Tensor:
        with torchscan.count_flops() as counter:
            torch.mm(a, b)
        reports.append(counter.report())
        return grad

    y = x * 2
    y.register_hook(hook)
    y.sum().backward()
    (report,) = reports
    assert report["total"] == {**report["total"], "status": "complete", "value": 2 * 3 * 4 * 5}
    assert report["by_phase"]["backward"]["value"] == 120
    assert report["by_phase"].get("forward", {"value": 0})["value"] == 0


def test_repeated_blocks_count_the_same_with_remembered_prices():
    # Prices are remembered per formula from one session to the next (src/session/memo.rs): a
    # loop of blocks, then the same shapes in another dtype and in other sizes, all as priced
    # afresh: mm(3x4, 4x5) 120 FLOPs; complex64 480 (8 real FLOPs per multiply-accumulate);
    # mm(3x4, 4x6) 144.
    real = (torch.randn(3, 4), torch.randn(4, 5))
    cplx = (torch.randn(3, 4, dtype=torch.complex64), torch.randn(4, 5, dtype=torch.complex64))
    wide = (torch.randn(3, 4), torch.randn(4, 6))
    totals = []
    for operands in [real, real, cplx, real, wide, cplx, wide]:
        with torchscan.count_flops() as counter:
            torch.mm(*operands)
        totals.append(counter.report()["total"]["value"])
    assert totals == [120, 120, 480, 120, 144, 480, 144]


def test_shapes_that_never_repeat_are_priced_afresh():
    # More distinct streams than a formula's memo holds (64 entries, direct-mapped), twice over:
    # every call is priced right whether its entry was replaced or not. mm(1xk, kx4) = 8k.
    b = torch.randn(300, 4)
    for _ in range(2):
        for k in range(1, 300, 3):
            with torchscan.count_flops() as counter:
                torch.mm(torch.randn(1, k), b[:k])
            assert counter.report()["total"]["value"] == 8 * k
