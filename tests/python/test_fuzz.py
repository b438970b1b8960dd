"""Property-based tests (hypothesis, bounded): malformed documents never get past the contract's
exception types, valid reports give the diff a Python reference computes, and random shapes of
common operators are counted exactly as the textbook formula says.

The whole module runs in well under 30 s (``max_examples`` is kept small; every example is a
real call into the native core).
"""

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torch import nn

from torchscan import compare_reports, crawl_module, measure_flops
from torchscan.utils import aggregate_info, format_info

FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
EXACT = settings(max_examples=60, deadline=None, database=None)

# Integers around every boundary a native core could trip on, besides hypothesis's own choice.
EDGE_INTS = st.sampled_from([0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, 10**40])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | EDGE_INTS
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.sampled_from(["complete", "partial", "unavailable", "FLOPs", "", "\0float", "\0tuple"])
)
KEYS = st.text(max_size=6) | st.sampled_from(
    ["schema_version", "totals", "layers", "path", "call_index", "metrics", "status", "value", "known_value", "unit"]
)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(KEYS, children, max_size=5)
        | st.dictionaries(st.integers(-2, 2), children, max_size=2)  # non-string keys
        | st.tuples(children, children)
    ),
    max_leaves=25,
)


def _real_reports():
    torch.manual_seed(0)
    shared = nn.Linear(4, 4)
    before = crawl_module(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)), (4,))
    after = crawl_module(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4), shared, nn.ReLU(), shared), (4,))
    return before, after


BEFORE, AFTER = _real_reports()


def _only_contract_errors(call):
    """Runs ``call``; a ValueError or TypeError is fine, any other exception fails the test."""
    try:
        return call()
    except (ValueError, TypeError) as error:
        assert str(error), f"{type(error).__name__} without a message"
        return None


@FUZZ
@given(document=DOCUMENTS)
def test_random_documents_raise_only_value_or_type_errors(document):
    frozen = copy.deepcopy(document)
    for before, after in ((document, BEFORE), (BEFORE, document), (document, document)):
        diff = _only_contract_errors(lambda before=before, after=after: compare_reports(before, after))
        if diff is not None:
            json.dumps(diff, allow_nan=False)
    # Inputs are never mutated (NaN != NaN, so compare the JSON text).
    assert json.dumps(document, default=repr) == json.dumps(frozen, default=repr)


@st.composite
def _mutated(draw, report):
    """``report`` with one field somewhere replaced by a random document, or deleted."""
    mutated = copy.deepcopy(report)
    parent, key = None, None
    node = mutated
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)) > 0:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        parent, key = node, draw(st.sampled_from(keys))
        node = node[key]
    if parent is None:
        return draw(DOCUMENTS)
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[key]
    else:
        parent[key] = draw(DOCUMENTS)
    return mutated


@FUZZ
@given(data=st.data())
def test_mutated_reports_raise_only_value_or_type_errors(data):
    mutated = data.draw(_mutated(BEFORE))
    for before, after in ((mutated, AFTER), (AFTER, mutated)):
        diff = _only_contract_errors(lambda before=before, after=after: compare_reports(before, after))
        if diff is not None:
            json.dumps(diff, allow_nan=False)
    frozen = json.dumps(mutated, default=repr)
    table = _only_contract_errors(lambda: format_info(mutated))
    assert table is None or isinstance(table, str)
    _only_contract_errors(lambda: aggregate_info(mutated, 1))
    assert json.dumps(mutated, default=repr) == frozen, "an input was mutated"


# ---- valid reports: the diff equals a reference computed here ----

STATUSES = ("complete", "partial", "unavailable")
# Counts a report can hold exactly and whose differences fit an i64 (see test_bad_input.py for
# the integer extremes, which are known gaps).
COUNTS = st.integers(0, 2**62)


@st.composite
def _metric(draw, template):
    status, number = draw(st.sampled_from(STATUSES)), draw(COUNTS)
    value = number if status == "complete" else None
    known = None if status == "unavailable" else number
    return {**template, "status": status, "value": value, "known_value": known}


@st.composite
def _perturbed(draw, report):
    """``report`` with random statuses and numbers in every metric, some layers and totals removed."""
    out = copy.deepcopy(report)
    out["totals"] = {
        name: draw(_metric(metric)) for name, metric in report["totals"].items() if draw(st.integers(0, 5)) > 0
    }
    layers = []
    for layer in report["layers"]:
        if draw(st.integers(0, 4)) == 0:
            continue
        metrics = {name: draw(_metric(m)) for name, m in layer["metrics"].items() if draw(st.integers(0, 5)) > 0}
        layers.append({**layer, "metrics": metrics})
    out["layers"] = draw(st.permutations(layers))
    return out


def _worst(b, a):
    if b is None or a is None:
        return "unavailable"
    return max(b["status"], a["status"], key=STATUSES.index)


def _metric_diff(b, a):
    status = _worst(b, a)
    delta = a["value"] - b["value"] if status == "complete" else None
    return {"status": status, "delta": delta, "before": b, "after": a}


def _reference_diff(before, after):
    def by_identity(report):
        return {(layer["path"], layer["call_index"]): layer["metrics"] for layer in report["layers"]}

    b_layers, a_layers = by_identity(before), by_identity(after)
    names = sorted(set(before["totals"]) | set(after["totals"]))
    changed = []
    for key in sorted(b_layers.keys() & a_layers.keys()):
        b, a = b_layers[key], a_layers[key]
        metrics = {n: _metric_diff(b.get(n), a.get(n)) for n in sorted(set(b) | set(a)) if b.get(n) != a.get(n)}
        if metrics:
            changed.append({"path": key[0], "call_index": key[1], "metrics": metrics})
    return {
        "schema_version": 1,
        "totals": {n: _metric_diff(before["totals"].get(n), after["totals"].get(n)) for n in names},
        "layers": {
            "added": [
                {"path": k[0], "call_index": k[1], "metrics": a_layers[k]}
                for k in sorted(a_layers.keys() - b_layers.keys())
            ],
            "removed": [
                {"path": k[0], "call_index": k[1], "metrics": b_layers[k]}
                for k in sorted(b_layers.keys() - a_layers.keys())
            ],
            "changed": changed,
        },
    }


@EXACT
@given(data=st.data())
def test_perturbed_valid_reports_give_the_reference_diff(data):
    before = data.draw(_perturbed(BEFORE))
    after = data.draw(_perturbed(data.draw(st.sampled_from([BEFORE, AFTER]))))
    frozen = copy.deepcopy((before, after))
    diff = compare_reports(before, after)
    assert (before, after) == frozen, "compare_reports mutated its inputs"
    assert diff == _reference_diff(before, after)
    # Deterministic, to the byte and in its order (sorted names and identities).
    assert json.dumps(compare_reports(before, after)) == json.dumps(diff)
    assert list(diff["totals"]) == sorted(diff["totals"])
    for kind in ("added", "removed", "changed"):
        keys = [(x["path"], x["call_index"]) for x in diff["layers"][kind]]
        assert keys == sorted(keys), f"{kind} is not sorted by (path, call_index)"


@EXACT
@given(data=st.data())
def test_a_report_compared_with_itself_differs_by_zero(data):
    report = data.draw(_perturbed(data.draw(st.sampled_from([BEFORE, AFTER]))))
    diff = compare_reports(report, report)
    assert diff["layers"] == {"added": [], "removed": [], "changed": []}
    for name, metric in diff["totals"].items():
        assert metric["status"] == report["totals"][name]["status"]
        assert metric["delta"] == (0 if metric["status"] == "complete" else None)


# ---- random shapes of common operators: exact counts ----


def _exact(workload, operator, expected):
    report = measure_flops(workload)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []
    assert report["total"]["value"] == expected
    assert report["by_operator"] == {operator: expected}
    assert report["operator_calls"] == {operator: 1}


@EXACT
@given(m=st.integers(0, 6), k=st.integers(0, 6), n=st.integers(0, 6))
def test_mm_is_2mnk(m, k, n):
    a, b = torch.randn(m, k), torch.randn(k, n)
    _exact(lambda: torch.mm(a, b), "aten.mm", 2 * m * n * k)


@EXACT
@given(
    batch=st.integers(1, 2),
    groups=st.integers(1, 2),
    in_per_group=st.integers(1, 3),
    out_per_group=st.integers(1, 3),
    size=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    padding=st.tuples(st.integers(0, 1), st.integers(0, 1)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    bias=st.booleans(),
)
def test_conv2d_is_2_macs(batch, groups, in_per_group, out_per_group, size, kernel, stride, padding, dilation, bias):
    out_size = [(size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)]
    assume(min(out_size) >= 1)  # PyTorch refuses a kernel larger than the padded input
    c_in, c_out = groups * in_per_group, groups * out_per_group
    x = torch.randn(batch, c_in, *size)
    w = torch.randn(c_out, in_per_group, *kernel)
    b = torch.randn(c_out) if bias else None
    # 2 FLOPs per multiply-accumulate (PyTorch's convention), and a bias added to each output
    # element (the bias convention: what the separate add would cost).
    outputs = batch * c_out * out_size[0] * out_size[1]
    macs = outputs * in_per_group * kernel[0] * kernel[1]
    _exact(
        lambda: F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups),
        "aten.convolution",
        2 * macs + (outputs if bias else 0),
    )


@EXACT
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=4))
def test_add_is_one_per_broadcast_output_element(shapes):
    a, b = torch.randn(shapes.input_shapes[0]), torch.randn(shapes.input_shapes[1])
    _exact(lambda: torch.add(a, b), "aten.add", math.prod(shapes.result_shape))


@EXACT
@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=5), data=st.data())
def test_sum_is_one_per_input_element(shape, data):
    x = torch.randn(shape)
    dim = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    _exact(lambda: x.sum() if dim is None else x.sum(dim), "aten.sum", math.prod(shape))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_add_counts_do_not_depend_on_dtype(dtype):
    a, b = torch.ones(3, 1, 5, dtype=dtype), torch.ones(4, 1, dtype=dtype)
    _exact(lambda: a + b, "aten.add", 3 * 4 * 5)
