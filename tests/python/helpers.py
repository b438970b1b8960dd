"""Shared helpers for the Python tests."""

from torch.utils.flop_counter import FlopCounterMode

# The categories PyTorch's FlopCounterMode counts (it has no pointwise/norm/pool formulas).
FCM_CATEGORIES = ("matmul", "conv", "attention")


def fcm_total(workload) -> int:
    with FlopCounterMode(display=False) as counter:
        workload()
    return counter.get_total_flops()


def fcm_comparable(report) -> int:
    return sum(report["by_category"].get(c, 0) for c in FCM_CATEGORIES)
