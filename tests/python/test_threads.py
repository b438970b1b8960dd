"""Threads: a session counts its own thread (and the autograd threads it starts); what other
threads do meanwhile is reported missing by default, and counted with threads="all".

Every workload waits for the work it hands to other threads, so each count is deterministic.
The reference product is a = [2, 3] @ b = [3, 4]: MM = 2 * 2 * 3 * 4 = 48 FLOPs.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import nn

import torchscan

MM = 2 * 2 * 3 * 4  # 48
# Sequential(Linear(8, 16, bias=False), ReLU(), Linear(16, 4, bias=False)) on x = [2, 8].
NET_FORWARD = 2 * 2 * 8 * 16 + 2 * 16 + 2 * 2 * 16 * 4  # 512 + 32 + 256 = 800
SUM = 2 * 4  # the loss: sum of the [2,4] output
# dR = dOut @ W2 and dW2 (256 each), threshold_backward (32), dW1 (512): 3 mm and 1 threshold.
NET_BACKWARD = 256 + 256 + 32 + 512  # 1056
NET_LABELS = {"Sequential": 800, "Sequential.0": 512, "Sequential.1": 32, "Sequential.2": 256}
OTHER = 2 * 2 * 8 * 4  # Linear(8, 4, bias=False) on [2, 8]: 128


@pytest.fixture
def pool():
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


@pytest.fixture
def ab():
    return torch.randn(2, 3), torch.randn(3, 4)


def net():
    return nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 4, bias=False))


def unfollowed(report):
    assert [d["code"] for d in report["diagnostics"]] == ["unfollowed_threads"], report["diagnostics"]
    assert report["diagnostics"][0]["severity"] == "warning"
    return report["diagnostics"][0]["message"]


def complete(report):
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []
    return report


def pool_mm_workload(pool, a, b, pooled=3):
    """One product on the calling thread, `pooled` more on the pool, all awaited."""

    def workload():
        futures = [pool.submit(torch.mm, a, b) for _ in range(pooled)]
        torch.mm(a, b)
        for future in futures:
            future.result()

    return workload


# threads="current" (the default): other threads' arithmetic is reported, not counted.


def test_pool_arithmetic_is_reported_missing_by_default(pool, ab):
    report = torchscan.measure_flops(pool_mm_workload(pool, *ab))
    assert report["total"]["status"] == "partial"
    assert report["total"]["value"] is None
    assert report["total"]["known_value"] == MM  # the calling thread's product only
    assert report["operator_calls"] == {"aten.mm": 1}
    assert unfollowed(report).startswith("3 operator call(s) that do arithmetic (aten.mm)")
    assert torchscan.measure_flops(pool_mm_workload(pool, *ab), threads="current") == report


def test_a_plain_thread_is_reported_with_every_operator_that_did_arithmetic(ab):
    a, b = ab

    def workload():
        thread = threading.Thread(target=lambda: (torch.mm(a, b), torch.mm(a, b), torch.relu(a)))
        thread.start()
        thread.join()

    report = torchscan.measure_flops(workload)
    assert report["total"]["status"] == "partial"
    assert report["total"]["known_value"] == 0
    assert unfollowed(report).startswith("3 operator call(s) that do arithmetic (aten.mm, aten.relu)")


def test_threads_that_only_view_or_copy_add_no_diagnostic(pool, ab):
    a, b = ab

    def views_and_copies():
        return (
            a.t(),
            a.view(3, 2),
            a[0],
            a.clone(),
            a.contiguous(),
            a.to(torch.float64),
            torch.empty(3).copy_(a[0]),
            torch.zeros(2, 3),
        )

    def workload():
        futures = [pool.submit(views_and_copies) for _ in range(3)]
        torch.mm(a, b)
        for future in futures:
            future.result()

    for threads in ("current", "all"):
        report = complete(torchscan.measure_flops(workload, threads=threads))
        assert report["total"]["value"] == MM


def test_backward_run_on_another_thread_is_reported_by_default(pool):
    model, x = net(), torch.randn(2, 8)

    def workload():
        model.zero_grad()
        loss = model(x).sum()
        pool.submit(loss.backward).result()  # autograd runs a CPU backward on the calling thread

    report = torchscan.measure_flops(workload)
    assert report["total"]["known_value"] == NET_FORWARD + SUM
    assert "backward" not in report["by_phase"]
    assert unfollowed(report).startswith("4 operator call(s) that do arithmetic (aten.mm, aten.threshold_backward)")
    full = complete(torchscan.measure_flops(workload, threads="all"))
    assert full["total"]["value"] == NET_FORWARD + SUM + NET_BACKWARD == 1864
    assert full["by_phase"]["backward"]["value"] == NET_BACKWARD
    # The backward follows the autograd nodes the calling thread's forward created: labelled.
    # Sequential.0: mm + dW1 (512 each); Sequential.1: relu + threshold_backward (32 each);
    # Sequential.2: mm + dR + dW2 (256 each); the loss sum is outside the module.
    assert full["by_module"] == {"Sequential": 1856, "Sequential.0": 1024, "Sequential.1": 64, "Sequential.2": 768}


def test_a_thread_with_its_own_session_is_not_reported_by_another(pool, ab):
    a, b = ab
    inner = {}

    def other():
        inner["report"] = torchscan.measure_flops(lambda: torch.mm(a, b))

    outer = complete(torchscan.measure_flops(lambda: pool.submit(other).result()))
    assert outer["total"]["value"] == 0  # that work is the other session's
    assert complete(inner["report"])["total"]["value"] == MM
    # threads="all" counts every thread: the other session's work is counted in both.
    outer = complete(torchscan.measure_flops(lambda: pool.submit(other).result(), threads="all"))
    assert outer["total"]["value"] == inner["report"]["total"]["value"] == MM


# threads="all": every thread's work is counted.


@pytest.mark.parametrize("started", ["before", "during"])
def test_all_threads_counts_the_pools_products(pool, ab, started):
    if started == "before":  # the pool's threads exist before the session opens
        for future in [pool.submit(lambda: None) for _ in range(2)]:
            future.result()
    report = complete(torchscan.measure_flops(pool_mm_workload(pool, *ab), threads="all"))
    assert report["total"]["value"] == 4 * MM  # one product here, three on the pool: 192
    assert report["operator_calls"] == {"aten.mm": 4}
    assert report["by_phase"]["forward"]["value"] == 4 * MM


def test_all_threads_counts_a_plain_thread(ab):
    a, b = ab

    def workload():
        thread = threading.Thread(target=lambda: (torch.mm(a, b), torch.relu(a)))
        thread.start()
        thread.join()

    report = complete(torchscan.measure_flops(workload, threads="all"))
    assert report["total"]["value"] == MM + 2 * 3  # the product and relu on [2,3]: 54


def test_count_flops_counts_all_threads_too(pool, ab):
    with torchscan.count_flops(threads="all") as counter:
        pool_mm_workload(pool, *ab)()
    assert complete(counter.report())["total"]["value"] == 4 * MM
    with torchscan.count_flops() as counter:
        pool_mm_workload(pool, *ab)()
    report = counter.report()
    assert report["total"]["known_value"] == MM
    assert unfollowed(report).startswith("3 operator call(s) that do arithmetic (aten.mm)")


@pytest.mark.parametrize("roots", ["all", "net"])
def test_other_threads_forward_work_has_no_module_label(pool, roots):
    model, other, x = net(), nn.Linear(8, 4, bias=False), torch.randn(2, 8)

    def workload():
        future = pool.submit(other, x)
        model(x)
        future.result()

    modules = None if roots == "all" else model
    report = complete(torchscan.measure_flops(workload, threads="all", modules=modules))
    assert report["total"]["value"] == NET_FORWARD + OTHER == 928
    assert report["by_module"] == NET_LABELS  # no "Linear": the pool's forward is unlabelled
    default = torchscan.measure_flops(workload, modules=modules)
    assert default["total"]["known_value"] == NET_FORWARD
    assert default["by_module"] == NET_LABELS
    assert unfollowed(default).startswith("1 operator call(s) that do arithmetic (aten.mm)")


def test_all_threads_counts_a_training_step_run_on_another_thread(pool):
    model, x = net(), torch.randn(2, 8)

    def step():
        model.zero_grad()
        model(x).sum().backward()

    report = complete(torchscan.measure_flops(lambda: pool.submit(step).result(), threads="all"))
    assert report["total"]["value"] == NET_FORWARD + SUM + NET_BACKWARD
    assert report["by_phase"]["forward"]["value"] == NET_FORWARD + SUM
    assert report["by_phase"]["backward"]["value"] == NET_BACKWARD
    assert report["by_module"] == {}  # its forward ran in no module call of the session's thread


def test_all_threads_prices_other_threads_calls_with_the_custom_mapping(pool, ab):
    mapping = {torch.ops.aten.mm: lambda a, b, out_shape: 7}
    report = complete(
        torchscan.measure_flops(lambda: pool.submit(torch.mm, *ab).result(), custom_mapping=mapping, threads="all")
    )
    assert report["total"]["value"] == 7
    default = torchscan.measure_flops(lambda: pool.submit(torch.mm, *ab).result(), custom_mapping=mapping)
    assert unfollowed(default).startswith("1 operator call(s) that do arithmetic (aten.mm)")


def test_all_threads_reports_another_threads_operator_without_formula_as_uncounted(pool):
    # torchvision is not among the core tests' dependencies (`make test-torch`): skipped there.
    torchvision = pytest.importorskip("torchvision")
    features, rois = torch.randn(1, 2, 4, 4), torch.tensor([[0, 0.0, 0.0, 2.0, 2.0]])
    work = lambda: pool.submit(torchvision.ops.roi_pool, features, rois, 2).result()  # noqa: E731
    report = torchscan.measure_flops(work, threads="all")
    assert report["total"]["status"] == "partial"
    # roi_pool is deliberately uncounted (its cost hangs on its boxes' values): named, not zero.
    expected = [("deliberately_uncounted", "torchvision.roi_pool")]
    assert [(d["code"], d.get("operator")) for d in report["diagnostics"]] == expected


@pytest.mark.parametrize("threads", ["current", "all"])
def test_other_threads_work_after_the_workload_returns_is_not_counted(pool, ab, threads):
    a, b = ab
    go = threading.Event()

    def later():
        go.wait()
        torch.mm(a, b)

    future = pool.submit(later)
    report = complete(torchscan.measure_flops(lambda: torch.mm(a, b), threads=threads))
    go.set()
    future.result()
    assert report["total"]["value"] == MM
    # Nor is it carried into the next session.
    assert complete(torchscan.measure_flops(lambda: torch.mm(a, b), threads=threads))["total"]["value"] == MM


@pytest.mark.parametrize("bad", ["both", "ALL", "", " all"])
def test_a_bad_threads_value_is_refused_before_any_work(bad, ab):
    ran = []
    with pytest.raises(ValueError, match='threads must be "current" or "all"') as error:
        torchscan.measure_flops(lambda: ran.append(1), threads=bad)
    assert repr(bad) in str(error.value)
    assert ran == []
    with pytest.raises(ValueError) as error:
        torchscan.count_flops(threads=bad)
    assert repr(bad) in str(error.value)


@pytest.mark.parametrize("bad", [None, 1, True, ["all"]])
def test_a_threads_value_of_the_wrong_type_is_a_type_error(bad, ab):
    ran = []
    with pytest.raises(TypeError, match='threads must be "current" or "all"') as error:
        torchscan.measure_flops(lambda: ran.append(1), threads=bad)
    assert type(bad).__name__ in str(error.value)
    assert ran == []
    with pytest.raises(TypeError):
        torchscan.count_flops(threads=bad)
