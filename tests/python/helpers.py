"""Shared helpers for the Python tests."""

import json
from collections import Counter
from importlib import resources

from jsonschema import Draft202012Validator
from torch.utils._python_dispatch import TorchDispatchMode
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


class BiasTerms(TorchDispatchMode):
    """The terms of the bias convention that PyTorch's FlopCounterMode drops, per operator, read off
    each call as it runs (alongside FlopCounterMode, on the same calls): an `addmm`-style call's
    added input (1 per output element for the add unless beta = 0, 1 per element of the input for
    beta's multiply unless beta is 0 or 1, 1 per output element for alpha's unless alpha is 1), a
    convolution's bias (1 per output element) and `convolution_backward`'s bias gradient (1 per
    element of grad_output)."""

    ADDED_INPUT = ("aten.addmm", "aten.addmv", "aten.baddbmm", "aten.addbmm")

    def __init__(self) -> None:
        super().__init__()
        self.terms: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        op = str(func.overloadpacket)
        if op in self.ADDED_INPUT:
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            outputs = out.numel()
            added = 0 if beta == 0 else outputs + (0 if beta == 1 else args[0].numel())
            self.terms[op] += added + (0 if alpha == 1 else outputs)
        elif op in ("aten.convolution", "aten._convolution") and args[2] is not None:
            self.terms[op] += out.numel()
        elif op == "aten.convolution_backward" and args[10][2]:
            self.terms[op] += args[0].numel()
        return out


def fcm_counts_and_bias_terms(workload) -> tuple[dict[str, int], Counter[str]]:
    """FlopCounterMode's per-operator counts of one run of `workload`, and the bias terms it drops."""
    with FlopCounterMode(display=False) as counter, BiasTerms() as bias:
        workload()
    counts = {str(op): count for op, count in counter.get_flop_counts()["Global"].items() if count}
    return counts, bias.terms
