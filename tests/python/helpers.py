"""Shared helpers for the Python tests."""

import json
from importlib import resources

from jsonschema import Draft202012Validator
from torch.utils.flop_counter import FlopCounterMode

# The categories PyTorch's FlopCounterMode counts (it has no pointwise/norm/pool formulas).
FCM_CATEGORIES = ("matmul", "conv", "attention")


def fcm_total(workload) -> int:
    with FlopCounterMode(display=False) as counter:
        workload()
    return counter.get_total_flops()


def fcm_comparable(report) -> int:
    return sum(report["by_category"].get(c, 0) for c in FCM_CATEGORIES)


def schema_validator(name):
    """A validator for the JSON Schema `name` (flop_report, analysis_report, report_diff) as the
    installed package ships it."""
    schema = json.loads((resources.files("torchscan") / "schemas" / f"{name}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)
