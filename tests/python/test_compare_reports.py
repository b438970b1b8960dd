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
    # Against one of ours (across the migration): operator FLOPs counted by another method
    # (0.2's FlopCounterMode, this version's native dispatch) cannot be subtracted, and 0.2's
    # rule refuses the comparison, naming the field and the metric.
    ours = crawl_module(nn.Conv2d(3, 8, 3), (3, 32, 32))
    with pytest.raises(ValueError, match=r"^incompatible method for metric 'operator_flops' of the totals: "):
        compare_reports(upstream_report(388_800), ours)
    # Leaving that metric out of both compares the rest (the module formulas, measured alike).
    # Conv2d(3, 8, 3) on 32x32: 8 x 30 x 30 outputs, 27 multiply-adds and a bias each.
    assert ours["totals"]["module_flops"]["value"] == 8 * 30 * 30 * (2 * 27 - 1 + 1)
    upstream = upstream_report(388_800)
    del upstream["totals"]["operator_flops"]
    ours_without = {**ours, "totals": {k: v for k, v in ours["totals"].items() if k != "operator_flops"}}
    diff = compare_reports(upstream, ours_without)
    assert diff["totals"]["module_flops"]["status"] == "complete"
    assert diff["totals"]["module_flops"]["delta"] == 8 * 30 * 30 * 54 - 388_800
    assert "reason" not in diff["totals"]["module_flops"]


def upstream_metric(status="complete", value=0, known_value=None, **metadata):
    """torchscan 0.2's test helper: a metric with only the metadata it is given."""
    if status == "complete" and known_value is None:
        known_value = value
    return {"status": status, "value": value, "known_value": known_value, **metadata}


def upstream_bare(totals=None, layers=None):
    return {"schema_version": 1, "totals": totals or {}, "layers": layers or []}


@pytest.mark.parametrize("field", ["unit", "scope", "method"])
def test_metrics_measured_differently_are_0_2s_value_error(field):
    # torchscan 0.2's test_compare_reports_rejects_incompatible_metric_metadata, reproduced:
    # two numbers measured differently are a ValueError that starts "incompatible <field>".
    before = upstream_bare(totals={"flops": upstream_metric(**{field: "before"})})
    after = upstream_bare(totals={"flops": upstream_metric(**{field: "after"})})
    with pytest.raises(ValueError, match=f"incompatible {field}") as raised:
        compare_reports(before, after)
    assert str(raised.value).startswith(f"incompatible {field} for metric 'flops' of the totals: 'before' before, ")
    # A partial side has a number too (its lower bound): the same error.
    partial = upstream_bare(totals={"flops": upstream_metric("partial", None, 3, **{field: "after"})})
    with pytest.raises(ValueError, match=f"incompatible {field}"):
        compare_reports(before, partial)
    # In a layer call, the call is named.
    layer = {"path": "block", "call_index": 0}
    with pytest.raises(ValueError, match=rf"incompatible {field} for metric 'flops' of layer call \('block', 0\)"):
        compare_reports(
            upstream_bare(layers=[{**layer, "metrics": {"flops": upstream_metric(value=1, **{field: "before"})}}]),
            upstream_bare(layers=[{**layer, "metrics": {"flops": upstream_metric(value=2, **{field: "after"})}}]),
        )


def test_a_side_without_a_number_measured_differently_is_unavailable_with_its_reason():
    # Nothing to subtract on one side: no error (0.2 raised only where both sides have numbers),
    # an unavailable difference that says why.
    small, big = reports()
    macs = small["totals"]["macs"]
    other = {**small, "totals": {**small["totals"], "macs": {**macs, "unit": "FLOPs", "status": "unavailable",
                                                              "value": None, "known_value": None}}}  # fmt: skip
    diff = compare_reports(other, big)["totals"]["macs"]
    assert (diff["status"], diff["delta"], diff["reason"]) == (
        "unavailable",
        None,
        "measured differently: unit 'FLOPs' before, 'MACs' after",
    )
    # Both with numbers: the error.
    with pytest.raises(ValueError, match=r"^incompatible unit for metric 'macs' of the totals: 'FLOPs' before, 'MACs'"):
        compare_reports({**small, "totals": {**small["totals"], "macs": {**macs, "unit": "FLOPs"}}}, big)


def test_schema_versions_are_compared_before_anything_else():
    # As torchscan 0.2: reports of different versions are not read further.
    with pytest.raises(ValueError, match="schema versions differ: 1 != 2"):
        compare_reports({"schema_version": 1}, {"schema_version": 2})
    with pytest.raises(ValueError, match="unsupported schema version: 2"):
        compare_reports({"schema_version": 2}, {"schema_version": 2})
    with pytest.raises(TypeError, match=r"before\['totals'\] must be a mapping"):
        compare_reports({"schema_version": 1}, {"schema_version": 1})


def test_fields_the_comparison_does_not_read_are_not_read():
    # Context, inputs and other layer fields may hold anything (tuples in a 0.2 report, a cycle).
    small, big = reports()
    odd = copy.deepcopy(small)
    odd["context"]["self"] = odd
    odd["inputs"]["shapes"] = ((1, 4), float("nan"), object())
    odd["layers"][0]["output_shape"] = (None, 4)
    assert compare_reports(odd, big) == compare_reports(small, big)


def test_the_c_encoder_writes_what_the_checking_walker_writes():
    # Plain reports take the C encoder (torchscan/_wire.c); the walker is the reference.
    import json

    from torchscan import _wire
    from torchscan.compare import _checked_wire

    small, big = reports()
    odd = copy.deepcopy(big)
    odd["layers"][1]["path"] = 'quote " backslash \\ tab \t é 漢 \U0001f600'
    odd["layers"][1]["metrics"]["macs"]["note"] = {"unread": (1, 2)}  # a metric's unread field
    odd["totals"]["macs"] = {**odd["totals"]["macs"], "value": 2**64 - 1, "known_value": 2**64 - 1}
    odd["totals"]["receptive"] = {"status": "complete", "value": -0.1, "known_value": -0.1}
    for report in (small, big, odd):
        encoded = _wire.encode(report)
        assert encoded is not None
        assert json.loads(encoded) == json.loads(_checked_wire(report, "before"))


class _Status(str):
    pass


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.update(layers=tuple(r["layers"])),
        lambda r: r["layers"][0].update(call_index=True),
        lambda r: r["layers"][0].update(call_index=2**63),
        lambda r: r["layers"][0].update(path="\ud800"),
        lambda r: r["totals"].update({3: r["totals"]["macs"]}),
        lambda r: r["totals"]["macs"].update(value=math.inf),
        lambda r: r["totals"]["macs"].update(value=2**64),
        lambda r: r["totals"]["macs"].update(value=True),
        lambda r: r["totals"]["macs"].update(status=_Status("complete")),
        lambda r: r["layers"][0].update(metrics=list(r["layers"][0]["metrics"].items())),
    ],
)
def test_what_the_c_encoder_cannot_take_goes_to_the_walker(mutate):
    from torchscan import _wire

    small, big = reports()
    mutate(small)
    assert _wire.encode(small) is None
    try:  # the walker's answer, whatever it is, is compare_reports'
        compare_reports(small, big)
    except (TypeError, ValueError) as error:
        assert "before[" in str(error)
