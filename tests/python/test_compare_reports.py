"""compare_reports on real reports: matching, statuses, errors, purity."""

import copy
import math

import pytest
import torch
from torch import nn

from torchscan import compare_reports, crawl_module


def reports():
    small = crawl_module(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,))
    big = crawl_module(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), (4,))
    return small, big


def test_totals_and_layers_of_two_real_reports():
    small, big = reports()
    before, after = copy.deepcopy(small), copy.deepcopy(big)
    diff = compare_reports(small, big)
    assert small == before and big == after  # inputs untouched
    # Linear(4,4): 4 x (4+3+1) = 32, ReLU 4; Linear(4,8): 64, ReLU 8, Linear(8,2): 2 x 16 = 32.
    flops = diff["totals"]["module_flops"]
    assert (flops["status"], flops["delta"]) == ("complete", (64 + 8 + 32) - (32 + 4))
    assert flops["before"]["value"] == 36 and flops["after"]["value"] == 104
    assert diff["totals"]["parameters"]["delta"] == (40 + 18) - 20
    assert [(x["path"], x["call_index"]) for x in diff["layers"]["added"]] == [("2", 0)]
    assert diff["layers"]["removed"] == []
    changed = {x["path"]: x["metrics"] for x in diff["layers"]["changed"]}
    assert set(changed) == {"", "0", "1"}
    assert changed["0"]["module_flops"]["delta"] == 32
    assert "calls" not in changed["0"]  # unchanged metrics are left out
    assert diff["schema_version"] == 1


def test_partial_side_propagates_and_missing_metric_is_unavailable():
    small, big = reports()
    partial = copy.deepcopy(big)
    partial["totals"]["macs"] = {**partial["totals"]["macs"], "status": "partial", "value": None}
    del partial["totals"]["dmas"]
    diff = compare_reports(small, partial)
    assert diff["totals"]["macs"]["status"] == "partial" and diff["totals"]["macs"]["delta"] is None
    assert diff["totals"]["dmas"]["status"] == "unavailable" and diff["totals"]["dmas"]["after"] is None


def test_identical_reports_differ_by_zero():
    small, _ = reports()
    diff = compare_reports(small, small)
    assert all(d["delta"] == 0 for d in diff["totals"].values() if d["status"] == "complete")
    assert diff["layers"] == {"added": [], "removed": [], "changed": []}


@pytest.mark.parametrize(
    "mutate, error, message",
    [
        (lambda r: "not a report", TypeError, "before must be a mapping"),
        (lambda r: {**r, "schema_version": "1"}, TypeError, r"before\['schema_version'\] must be an integer"),
        (lambda r: {**r, "schema_version": 2}, ValueError, "schema versions differ: 2 != 1"),
        (lambda r: {k: v for k, v in r.items() if k != "totals"}, TypeError, r"before\['totals'\] must be a mapping"),
        (lambda r: {**r, "layers": tuple(r["layers"])}, TypeError, r"before\['layers'\] must be a list"),
        (lambda r: {**r, "layers": r["layers"] + r["layers"][:1]}, ValueError, "duplicate layer call \\(''"),
        (
            lambda r: {**r, "totals": {**r["totals"], "macs": {**r["totals"]["macs"], "value": math.nan}}},
            ValueError,
            r"before\['totals'\]\['macs'\]\['value'\] must be a finite number or None",
        ),
        (
            lambda r: {**r, "totals": {**r["totals"], "macs": {**r["totals"]["macs"], "value": torch.tensor(1)}}},
            TypeError,
            r"before\['totals'\]\['macs'\]\['value'\] must be a number or None",
        ),
        (
            lambda r: {**r, "totals": {**r["totals"], 3: r["totals"]["macs"]}},
            TypeError,
            r"before\['totals'\] keys must be strings",
        ),
        (
            lambda r: {**r, "totals": {**r["totals"], "macs": {**r["totals"]["macs"], "unit": "FLOPs"}}},
            ValueError,
            "metric 'macs' has incompatible unit",
        ),
    ],
)
def test_malformed_reports(mutate, error, message):
    small, big = reports()
    with pytest.raises(error, match=message):
        compare_reports(mutate(small), big)


def test_unknown_schema_version():
    small, _ = reports()
    future = {**small, "schema_version": 3}
    with pytest.raises(ValueError, match="unsupported schema version: 3"):
        compare_reports(future, future)


def upstream_report(flops):
    """A report as the pure-Python torchscan 0.2 writes it (its operator-count method)."""

    def metric(value, unit, scope, method):
        return {
            "status": "complete",
            "value": value,
            "known_value": value,
            "unit": unit,
            "scope": scope,
            "method": method,
        }

    return {
        "schema_version": 1,
        "context": {"torchscan_version": "0.2.0"},
        "inputs": {"source": "generated", "args": [], "kwargs": {}},
        "layers": [
            {
                "path": "",
                "call_index": 0,
                "name": "conv2d",
                "depth": 0,
                "type": "Conv2d",
                "metrics": {"module_flops": metric(flops, "FLOPs", "module_call", "torchscan_module_formula")},
            }
        ],
        "operator_flops": {},
        "totals": {
            "module_flops": metric(flops, "FLOPs", "forward", "torchscan_module_formula"),
            "operator_flops": metric(flops, "FLOPs", "workload", "torch.utils.flop_counter.FlopCounterMode"),
        },
        "diagnostics": [],
    }


def test_reports_of_torchscan_0_2_are_accepted():
    diff = compare_reports(upstream_report(388_800), upstream_report(400_000))
    assert diff["totals"]["operator_flops"]["delta"] == 11_200
    assert diff["layers"]["changed"][0]["metrics"]["module_flops"]["delta"] == 11_200
    # Against one of ours, the module-formula metrics compare; operator counts by different
    # methods do not (and say so).
    ours = crawl_module(nn.Conv2d(3, 8, 3), (3, 32, 32))
    with pytest.raises(ValueError, match="metric 'operator_flops' has incompatible method"):
        compare_reports(upstream_report(388_800), ours)
