"""No silent overflow: counts whose products exceed 2^64 become `unavailable` with a diagnostic,
never a wrapped number. Meta tensors give the shapes without the memory."""

import torch
from torch import nn

import torchscan

SIDE = 2**22  # an [SIDE, SIDE] @ [SIDE, SIDE] product is 2 * 2^66 = 2^67 FLOPs


def test_an_operator_whose_count_exceeds_2_pow_64_makes_every_sum_unavailable():
    a = torch.empty(SIDE, SIDE, device="meta")
    small = torch.empty(2, 3, device="meta")
    report = torchscan.measure_flops(lambda: (a @ a, small @ small.T))
    assert report["total"] == {
        "status": "unavailable",
        "value": None,
        "known_value": None,
        "unit": "FLOPs",
        "scope": "workload",
        "method": "torchscan_native_dispatch",
    }
    assert report["by_phase"]["forward"]["status"] == "unavailable"
    assert "matmul" not in report["by_category"]
    assert "aten.mm" not in report["by_operator"]
    overflow = [d for d in report["diagnostics"] if d["code"] == "flop_overflow"]
    assert [d.get("operator") for d in overflow] == ["aten.mm", None]
    assert all("2^64" in d["message"] for d in overflow)


def test_a_sum_of_counts_that_exceeds_2_pow_64_is_unavailable():
    # 2 * 2^20 * 2^21 * 2^20 = 2^62 per product: each fits, four of them do not.
    a, b = torch.empty(2**20, 2**21, device="meta"), torch.empty(2**21, 2**20, device="meta")
    report = torchscan.measure_flops(lambda: [a @ b for _ in range(4)])
    assert report["total"]["status"] == "unavailable"
    assert report["total"]["value"] is None
    assert any(d["code"] == "flop_overflow" for d in report["diagnostics"])
    one = torchscan.measure_flops(lambda: a @ b)
    assert one["total"]["value"] == 2**62 and one["total"]["status"] == "complete"


def test_module_formulas_that_overflow_are_unavailable_with_a_diagnostic():
    linear = nn.Linear(2**29, 2**29, bias=False, device="meta")
    x = torch.empty(2**31, 2**29, device="meta")  # 2 * 2^31 * 2^29 * 2^29 = 2^90
    report = torchscan.crawl_module(linear, args=(x,))
    leaf = report["layers"][0]["metrics"]
    for name in ("module_flops", "macs"):
        assert leaf[name]["status"] == "unavailable" and leaf[name]["value"] is None, name
        assert report["totals"][name]["status"] == "unavailable", name
    codes = {(d["code"], d["metric"]) for d in report["diagnostics"]}
    assert ("module_metric_error", "module_flops") in codes
    assert ("flop_overflow", "flops") in codes  # the operator count overflows as well
    assert report["totals"]["operator_flops"]["status"] == "unavailable"


def test_a_custom_formula_of_2_pow_64_or_more_is_an_overflow_like_a_built_in_one():
    x = torch.randn(3)

    def measure(flops):
        formulas = {torch.ops.aten.sin: lambda *a, out_shape: flops}
        return torchscan.measure_flops(lambda: torch.sin(x), custom_mapping=formulas)

    largest = measure(2**64 - 1)
    assert (largest["total"]["status"], largest["total"]["value"]) == ("complete", 2**64 - 1)
    for flops in (2**64, 10**30):
        report = measure(flops)
        assert report["total"]["status"] == "unavailable"
        overflow = [d for d in report["diagnostics"] if d["code"] == "flop_overflow"]
        assert [d.get("operator") for d in overflow] == ["aten.sin", None]


def test_parameter_and_buffer_totals_of_2_pow_64_or_more_are_unavailable_with_a_diagnostic():
    from helpers import schema_validator

    class Huge(nn.Module):
        def __init__(self):
            super().__init__()
            for i in range(5):  # 5 x 2^62 elements (and bytes): more than 2^64
                self.register_buffer(f"b{i}", torch.empty(2**31, 2**31, dtype=torch.uint8, device="meta"))
            self.weight = nn.Parameter(torch.empty(3, device="meta"))

        def forward(self, x):
            return x

    report = torchscan.crawl_module(Huge(), (1,), mode="structure")
    totals = report["totals"]
    for name in ("buffer_elements", "buffer_bytes"):
        assert (totals[name]["status"], totals[name]["value"]) == ("unavailable", None)
    assert totals["parameters"]["value"] == 3 and totals["parameter_bytes"]["value"] == 12
    assert report["layers"][0]["buffers"] == {"elements": None, "bytes": None, "shared": False}
    codes = sorted((d["code"], d["metric"]) for d in report["diagnostics"])
    assert codes == [("count_overflow", "buffer_bytes"), ("count_overflow", "buffer_elements")]
    assert list(schema_validator("analysis_report").iter_errors(report)) == []
    table = torchscan.utils.format_info(report)
    assert "Model size (params + buffers): unavailable" in table and ">= 2^64" in table
    try:
        torchscan.crawl_module(Huge(), (1,), mode="structure", strict=True)
    except torchscan.IncompleteAnalysisError as error:
        assert "buffer_elements" in str(error)
    else:
        raise AssertionError("strict mode accepted unavailable totals")
