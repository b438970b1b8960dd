"""The JSON Schemas shipped in torchscan/schemas/ accept real reports and reject broken ones."""

import copy
import json
from importlib import resources

import pytest
import torch
from torch import nn

import torchscan
from helpers import schema_validator

# An operator with a CPU kernel of its own and no formula: its work makes totals partial.
_LIB = torch.library.Library("torchscan_schema_test", "DEF")
_LIB.define("shift(Tensor x) -> Tensor")
_LIB.impl("shift", lambda x: x + 1, "CPU")

SCHEMAS = ("flop_report", "analysis_report", "report_diff", "merged_report")


@pytest.fixture(scope="module")
def validators():
    return {name: schema_validator(name) for name in SCHEMAS}


def errors(validator, document):
    """Every violation as (path, message), so that a failing test says where."""
    return [(list(e.absolute_path), e.message) for e in validator.iter_errors(document)]


class Shifted(nn.Module):
    """A leaf without a module formula that dispatches an operator without a FLOP formula."""

    def forward(self, x):
        return torch.ops.torchscan_schema_test.shift(x)


def small_net():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))


@pytest.fixture(scope="module")
def analysis():
    """Real AnalysisReports: full, structure, another architecture, and a partial one."""
    torch.manual_seed(0)
    model = small_net()
    wider = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 2))
    partial = nn.Sequential(nn.Linear(4, 4), Shifted())
    return {
        "full": torchscan.crawl_module(model, (3, 8, 8)),
        "structure": torchscan.crawl_module(model, (3, 8, 8), mode="structure"),
        "wider": torchscan.crawl_module(nn.Sequential(wider, nn.Softmax(-1)), (3, 8, 8)),
        "partial": torchscan.crawl_module(partial, (4,)),
        "complete_twin": torchscan.crawl_module(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,)),
        "kwargs": torchscan.crawl_module(
            nn.MultiheadAttention(8, 2),
            args=(torch.randn(3, 1, 8),) * 3,
            kwargs={"need_weights": False, "attn_mask": None},
        ),
    }


def test_the_schemas_ship_with_the_package_and_are_draft_2020_12():
    for name in SCHEMAS:
        schema = json.loads((resources.files("torchscan") / "schemas" / f"{name}.json").read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        version = 2 if name in ("flop_report", "merged_report") else 1
        assert f"schema_version {version}" in schema["title"]


def test_shared_definitions_are_identical_in_every_file():
    """Each file is self-contained; the definitions they share must not drift apart."""
    docs = {
        name: json.loads((resources.files("torchscan") / "schemas" / f"{name}.json").read_text()) for name in SCHEMAS
    }
    shared = set(docs["flop_report"]["$defs"]) & set(docs["analysis_report"]["$defs"])
    assert {"MetricResult", "Diagnostic", "Status"} <= shared
    root = {k: v for k, v in docs["flop_report"].items() if k not in ("$schema", "$defs", "title", "description")}
    assert root == {k: v for k, v in docs["analysis_report"]["$defs"]["FlopReport"].items() if k != "description"}
    pairs = [("flop_report", "analysis_report"), ("analysis_report", "report_diff"), ("flop_report", "merged_report")]
    for first, second in pairs:
        for definition in set(docs[first]["$defs"]) & set(docs[second]["$defs"]):
            assert docs[first]["$defs"][definition] == docs[second]["$defs"][definition], definition


def test_measure_flops_reports_are_valid(validators):
    model = small_net().eval()
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        report = torchscan.measure_flops(lambda: model(x))
    assert report["total"]["status"] == "complete"
    assert errors(validators["flop_report"], report) == []


def test_training_step_reports_are_valid(validators):
    model = small_net().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, target = torch.randn(2, 3, 8, 8), torch.tensor([0, 1])

    def step():
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), target).backward()
        optimizer.step()

    report = torchscan.measure_flops(step)
    # The optimizer's step is its own phase (issue 44), which the schema allows.
    assert set(report["by_phase"]) == {"forward", "backward", "optimizer"}
    assert errors(validators["flop_report"], report) == []
    with torchscan.count_flops(modules=model) as counter:
        step()
    assert errors(validators["flop_report"], counter.report()) == []


def test_partial_flop_report_with_diagnostics_is_valid(validators):
    x = torch.randn(3, 4)
    report = torchscan.measure_flops(lambda: torch.ops.torchscan_schema_test.shift(x @ x.T))
    assert report["total"]["status"] == "partial"
    assert report["total"]["value"] is None and report["total"]["known_value"] == 2 * 3 * 4 * 3
    assert [d["code"] for d in report["diagnostics"]] == ["uncounted_operator"]
    assert errors(validators["flop_report"], report) == []


def test_custom_mapping_report_is_valid(validators):
    x = torch.randn(3, 4)
    mapping = {torch.ops.torchscan_schema_test.shift: lambda x_shape, out_shape: x_shape.numel()}
    report = torchscan.measure_flops(lambda: torch.ops.torchscan_schema_test.shift(x), custom_mapping=mapping)
    assert report["by_category"] == {"custom": 12}
    assert errors(validators["flop_report"], report) == []


@pytest.mark.parametrize("kind", ["full", "structure", "wider", "partial", "complete_twin", "kwargs"])
def test_crawl_module_reports_are_valid(validators, analysis, kind):
    assert errors(validators["analysis_report"], analysis[kind]) == []


def test_the_partial_analysis_has_what_the_schema_describes(analysis):
    """The partial report really exercises the partial branches (a guard for the test above)."""
    report = analysis["partial"]
    assert report["totals"]["operator_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["status"] == "partial"
    codes = {d["code"] for d in report["diagnostics"]}
    assert codes == {"uncounted_operator", "unsupported_module_metric"}
    assert analysis["structure"]["context"]["analysis_mode"] == "structure"
    assert analysis["kwargs"]["inputs"]["source"] == "provided"


@pytest.mark.parametrize(
    "before, after",
    [("full", "wider"), ("wider", "full"), ("partial", "complete_twin"), ("structure", "structure")],
)
def test_compare_reports_diffs_are_valid(validators, analysis, before, after):
    diff = torchscan.compare_reports(analysis[before], analysis[after])
    assert errors(validators["report_diff"], diff) == []


def test_the_diffs_cover_added_removed_changed_and_inexact(analysis):
    grown = torchscan.compare_reports(analysis["full"], analysis["wider"])
    assert grown["layers"]["added"] and grown["layers"]["changed"]
    shrunk = torchscan.compare_reports(analysis["wider"], analysis["full"])
    assert shrunk["layers"]["removed"]
    inexact = torchscan.compare_reports(analysis["partial"], analysis["complete_twin"])
    assert inexact["totals"]["module_flops"]["status"] == "partial"
    assert inexact["totals"]["module_flops"]["delta"] is None


# ---- invalid documents are rejected, at the right place ----


def broken(document, edit):
    document = copy.deepcopy(document)
    edit(document)
    return document


def assert_rejected(validator, document, path):
    found = errors(validator, document)
    assert found, "the schema accepted an invalid document"
    assert any(p[: len(path)] == path for p, _ in found), found


@pytest.mark.parametrize(
    "edit, path",
    [
        (lambda r: r.pop("total"), []),
        (lambda r: r.pop("diagnostics"), []),
        (lambda r: r["total"].update(status="done"), ["total", "status"]),
        (lambda r: r["total"].update(unit="GFLOPs"), ["total", "unit"]),
        (lambda r: r["total"].update(value=None), ["total", "value"]),
        (lambda r: r["total"].pop("known_value"), ["total"]),
        (lambda r: r["total"].update(extra=1), ["total"]),
        (lambda r: r.update(schema_version=3), ["schema_version"]),
        (lambda r: r.update(communication={"status": "complete"}), ["communication"]),
        (lambda r: r["by_operator"].update({"aten.mm.default": 4}), ["by_operator"]),
        (lambda r: r["by_module"].update(ResNet=-1), ["by_module", "ResNet"]),
        (lambda r: r["by_category"].update(magic=1), ["by_category"]),
        (lambda r: r["ignored_operators"]["aten.view"].update(reason="cheap"), ["ignored_operators", "aten.view"]),
        (lambda r: r["diagnostics"].append({"code": "x", "severity": "info", "metric": "flops", "message": "m"}), []),
        (lambda r: r.update(by_layer={}), []),
    ],
)
def test_invalid_flop_reports_are_rejected(validators, edit, path):
    model = nn.Sequential(nn.Linear(4, 4), nn.Flatten(0))
    report = torchscan.measure_flops(lambda: model(torch.randn(1, 4)))
    assert "aten.view" in report["ignored_operators"]
    assert errors(validators["flop_report"], report) == []
    assert_rejected(validators["flop_report"], broken(report, edit), path)


@pytest.mark.parametrize(
    "edit, path",
    [
        (lambda r: r.pop("layers"), []),
        (lambda r: r["totals"].pop("macs"), ["totals"]),
        (lambda r: r["totals"]["macs"].update(status="finished"), ["totals", "macs", "status"]),
        (lambda r: r["totals"]["macs"].update(status="partial"), ["totals", "macs", "value"]),
        (lambda r: r["layers"][1].pop("call_index"), ["layers", 1]),
        (lambda r: r["layers"][1]["metrics"].update(flops=r["layers"][1]["metrics"]["calls"]), ["layers", 1]),
        (lambda r: r["layers"][1]["output"].update(values=[0.5]), ["layers", 1, "output"]),
        (lambda r: r["inputs"].update(source="random"), ["inputs", "source"]),
        (lambda r: r["context"].update(execution_mode="training"), ["context", "execution_mode"]),
        (lambda r: r["operator_flops"].pop("by_phase"), ["operator_flops"]),
        (lambda r: r["diagnostics"].append({"code": "x", "severity": "warning", "metric": "macs"}), ["diagnostics"]),
    ],
)
def test_invalid_analysis_reports_are_rejected(validators, analysis, edit, path):
    assert_rejected(validators["analysis_report"], broken(analysis["full"], edit), path)


@pytest.mark.parametrize(
    "edit, path",
    [
        (lambda d: d["layers"].pop("changed"), ["layers"]),
        (lambda d: d["totals"]["parameters"].update(status="better"), ["totals", "parameters", "status"]),
        (lambda d: d["totals"]["parameters"].update(delta=None), ["totals", "parameters", "delta"]),
        (lambda d: d["totals"]["parameters"].pop("before"), ["totals", "parameters"]),
        (lambda d: d["layers"]["added"][0].pop("path"), ["layers", "added", 0]),
        (lambda d: d["layers"]["added"][0].update(type="Conv2d"), ["layers", "added", 0]),
        (lambda d: d.update(schema_version="1"), ["schema_version"]),
    ],
)
def test_invalid_report_diffs_are_rejected(validators, analysis, edit, path):
    diff = torchscan.compare_reports(analysis["full"], analysis["wider"])
    assert_rejected(validators["report_diff"], broken(diff, edit), path)


# TypedDict in torchscan.report -> (schema file, definition; None: the file's root).
_TYPED = {
    "MetricResult": ("flop_report", "MetricResult"),
    "Diagnostic": ("flop_report", "Diagnostic"),
    "FlopContext": ("flop_report", "FlopContext"),
    "IgnoredOperator": ("flop_report", "IgnoredCount"),
    "FlopReport": ("flop_report", None),
    "LayerReport": ("analysis_report", "Layer"),
    "AnalysisReport": ("analysis_report", None),
    "MetricDiff": ("report_diff", "MetricDiff"),
    "LayerSnapshot": ("report_diff", "LayerSnapshot"),
    "LayerDiff": ("report_diff", "LayerDiff"),
    "LayerChanges": ("report_diff", "LayerChanges"),
    "ReportDiff": ("report_diff", None),
}


@pytest.mark.parametrize("name", sorted(_TYPED))
def test_the_python_types_have_the_generated_schemas_keys(name):
    """torchscan.report's TypedDicts and the schemas generated from the core's report model
    name the same required and optional keys (so neither can drift from the other)."""
    typed = getattr(torchscan.report, name)
    file, definition = _TYPED[name]
    schema = json.loads((resources.files("torchscan") / "schemas" / f"{file}.json").read_text())
    node = schema if definition is None else schema["$defs"][definition]
    assert set(typed.__required_keys__) == set(node["required"])
    assert set(typed.__optional_keys__) == set(node["properties"]) - set(node["required"])


def test_a_version_1_flop_report_still_validates_and_merges(validators):
    """Reports written before schema version 2 (no communication, no context.distributed) are
    valid version 2 reports, and merge."""
    x = torch.randn(3, 3)
    report = torchscan.measure_flops(lambda: x @ x)
    assert report["schema_version"] == 2
    old = {**report, "schema_version": 1}
    assert errors(validators["flop_report"], old) == []
    merged = torchscan.merge_reports([old, report])
    assert errors(validators["merged_report"], merged) == []
    assert merged["total"]["value"] == 2 * report["total"]["value"]
    assert merged["context"]["backend"] is None and merged["communication"] is None
    broken = {**report, "communication": {"status": "complete"}}
    assert errors(validators["flop_report"], broken) != []
