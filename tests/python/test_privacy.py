"""Privacy: no value, mapping key, file path or repr of what a model is called with ever reaches a
report, a printed table, a diff or an error message.

Sentinels are planted everywhere (tensor contents, parameters, scalar arguments, keyword
arguments, mapping keys, an object's repr, a file path) and every output is searched for them,
serialized with json.dumps. Module names are the one exception, by contract: a layer's ``path``
and ``name`` and the ``by_module`` labels are the module's attribute path, whatever its text,
so a ModuleDict key shows up there and only there (checked field by field).
"""

import copy
import json
import re

import pytest
import torch
from torch import nn

import torchscan
from torchscan import IncompleteAnalysisError, compare_reports, crawl_module, measure_flops, summary
from torchscan.process import measure_peak_memory
from torchscan.utils import aggregate_info, format_info

DATA = "SENTINEL-d4t4"  # in values, keys, reprs and paths: must never appear
MODULE = "SENTINEL-m0dule"  # in module names: allowed only where modules are named
NUMBER = 1234567.0  # tensor contents and a float argument
INTEGER = 7654321  # an int argument
FILE = f"/home/{DATA}/secret.bin"
# Every way a number could be written out: plain, repr, scientific, %g, with separators.
NUMBER_FORMS = (
    "1234567",
    "1.234567",
    "1.23457e",
    "1.2346e",
    "1,234,567",
    "7654321",
    "7.654321",
    "7.65432e",
    "7,654,321",
)


class Opaque:
    """An argument object whose repr and str carry the sentinel."""

    def __repr__(self) -> str:
        return f"Opaque({DATA}, {NUMBER})"

    __str__ = __repr__


class Unsupported(nn.Module):
    """A leaf without a module formula: the report has a diagnostic about it."""

    def forward(self, x):
        return x * 2


class Private(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({f"secret path /home/{MODULE}": nn.Linear(4, 4), "plain": nn.ReLU()})
        self.odd = Unsupported()
        self.register_buffer("scale_buffer", torch.full((4,), NUMBER))
        with torch.no_grad():
            self.blocks[f"secret path /home/{MODULE}"].weight.fill_(NUMBER)

    def forward(self, x, scale, ratio, *, mapping, obj, path, tag=None, blob=b"", nested=()):
        for block in self.blocks.values():
            x = block(x)
        x = self.odd(x) * scale * ratio + mapping[f"key {DATA}"].sum() + self.scale_buffer
        return {f"out {DATA}": x, "n": INTEGER, 7: [x, (x,)]}


def call_values():
    x = torch.full((2, 4), NUMBER)
    args = (x, INTEGER, NUMBER)
    kwargs = {
        "mapping": {f"key {DATA}": torch.full((3,), NUMBER), 7: torch.ones(1), f"{DATA} {FILE}": Opaque()},
        "obj": Opaque(),
        "path": FILE,
        "tag": f"tag {DATA}",
        "blob": DATA.encode(),
        "nested": [(DATA, INTEGER, NUMBER), {"k": [Opaque(), FILE]}],
    }
    return args, kwargs


def assert_no_data(text, where):
    assert DATA not in text, f"{where} contains the data sentinel: {_around(text, DATA)}"
    for form in NUMBER_FORMS:
        assert form not in text, f"{where} contains a planted number ({form}): {_around(text, form)}"


def _around(text, needle):
    i = text.find(needle)
    return text[max(0, i - 100) : i + 60]


# Fields that name modules: a ModuleDict key may appear there verbatim, nowhere else.
_MODULE_FIELDS = [
    re.compile(p)
    for p in (
        r"^(operator_flops\.)?by_module(_status)?\.<key>$",
        r"^layers\.\d+\.(path|name)$",
        r"^layers\.(added|removed|changed)\.\d+\.path$",
        r"^diagnostics\.\d+\.path$",
        r"^operator_flops\.diagnostics\.\d+\.path$",
    )
]


def module_name_locations(value, needle, where=""):
    """Dotted locations of every key (``<key>``) or string holding ``needle``."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            location = f"{where}.{key}" if where else str(key)
            if needle in str(key):
                found.append(f"{where}.<key>" if where else "<key>")
            found += module_name_locations(item, needle, location)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += module_name_locations(item, needle, f"{where}.{i}")
    elif isinstance(value, str) and needle in value:
        found.append(where)
    return found


def assert_module_names_only_where_modules_are_named(report, where):
    stray = [loc for loc in module_name_locations(report, MODULE) if not any(p.match(loc) for p in _MODULE_FIELDS)]
    assert not stray, f"{where}: a module name appears outside the fields that name modules: {stray}"


def check_report(report, where):
    text = json.dumps(report, allow_nan=False)
    assert_no_data(text, where)
    assert_module_names_only_where_modules_are_named(json.loads(text), where)
    return text


def test_measure_flops_and_count_flops_reports():
    model = Private()
    args, kwargs = call_values()

    def leaky_formula(x_shape, *, out_shape):
        raise ValueError(f"cannot price {DATA} {NUMBER}")  # its message is never copied into the report

    mapping = {torch.ops.aten.sin: leaky_formula}
    report = measure_flops(lambda: torch.sin(model(*args, **kwargs)[f"out {DATA}"]), custom_mapping=mapping)
    text = check_report(report, "measure_flops report")
    assert "custom_formula_error" in text, "the custom formula's failure is reported (by type only)"
    assert f"Private.blocks.secret path /home/{MODULE}" in report["by_module"]
    with torchscan.count_flops(custom_mapping=mapping) as counter:
        torch.sin(model(*args, **kwargs)[f"out {DATA}"])
    check_report(counter.report(), "count_flops report")


@pytest.mark.parametrize("mode", ["full", "structure"])
def test_crawl_module_reports(mode):
    args, kwargs = call_values()
    report = crawl_module(Private(), args=args, kwargs=kwargs, mode=mode)
    check_report(report, f"crawl_module report ({mode})")
    # What is described instead: kinds, types, shapes; keys only when they are ints or identifiers.
    mapping = report["inputs"]["kwargs"]["mapping"]
    assert [item.get("key") for item in mapping["items"]] == [None, 7, None]
    assert report["inputs"]["kwargs"]["obj"] == {"kind": "object", "type": "Opaque"}
    assert report["inputs"]["kwargs"]["path"] == {"kind": "scalar", "type": "str"}
    assert report["inputs"]["args"][1] == {"kind": "scalar", "type": "int"}
    assert report["layers"][1]["path"] == f"blocks.secret path /home/{MODULE}"


def test_summary_table_aggregate_view_and_strict_error(capsys):
    args, kwargs = call_values()
    report = summary(Private(), args=args, kwargs=kwargs, receptive_field=True, effective_rf_stats=True)
    printed = capsys.readouterr().out
    assert "Total params" in printed
    assert_no_data(printed, "summary's printed table")
    check_report(report, "summary report")
    assert_no_data(format_info(report, wrap_mode=None), "format_info table")
    check_report(aggregate_info(report, 1), "aggregate_info view")
    with pytest.raises(IncompleteAnalysisError) as caught:
        crawl_module(Private(), args=args, kwargs=kwargs, strict=True)
    assert_no_data(str(caught.value), "IncompleteAnalysisError message")
    check_report(caught.value.report, "IncompleteAnalysisError report")


def test_compare_reports_diff():
    args, kwargs = call_values()
    before = crawl_module(Private(), args=args, kwargs=kwargs)
    bigger = Private()
    bigger.blocks["another"] = nn.Linear(4, 4)
    after = crawl_module(bigger, args=args, kwargs=kwargs)
    diff = compare_reports(before, after)
    assert diff["layers"]["added"], "the diff has layer entries to search"
    check_report(diff, "compare_reports diff")


def test_peak_memory_stats():
    args, kwargs = call_values()
    model = Private()
    stats = measure_peak_memory(lambda: model(*args, **kwargs), device="cpu")
    assert_no_data(json.dumps(stats), "measure_peak_memory stats")


# ---- error messages of failing calls ----


def _message(call):
    with pytest.raises(Exception) as caught:
        call()
    return f"{type(caught.value).__name__}: {caught.value}"


def _wrong_metric(report):
    bad = copy.deepcopy(report)
    bad["totals"]["macs"]["status"] = DATA
    return bad


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda r: measure_flops(Opaque()), id="measure_flops-workload"),
        pytest.param(lambda r: measure_flops(lambda: None, modules=[Opaque()]), id="measure_flops-modules"),
        pytest.param(lambda r: measure_flops(lambda: None, custom_mapping={Opaque(): len}), id="custom_mapping-key"),
        pytest.param(lambda r: crawl_module(Private(), kwargs={Opaque(): 1}), id="crawl_module-kwargs-key"),
        pytest.param(lambda r: crawl_module(Private(), args=[NUMBER]), id="crawl_module-args-list"),
        pytest.param(lambda r: crawl_module(Private(), (4,), dtype=[Opaque()]), id="crawl_module-dtype"),
        pytest.param(lambda r: summary(nn.Linear(4, 4), (4,), max_depth=Opaque()), id="summary-max_depth"),
        pytest.param(lambda r: format_info(r, wrap_mode=Opaque()), id="format_info-wrap_mode"),
        pytest.param(lambda r: format_info(Opaque()), id="format_info-report"),
        pytest.param(lambda r: aggregate_info({"layers": [DATA]}, 0), id="aggregate_info-layer"),
        pytest.param(lambda r: compare_reports(Opaque(), r), id="compare_reports-object"),
        pytest.param(lambda r: compare_reports(_wrong_metric(r), r), id="compare_reports-status"),
        pytest.param(lambda r: compare_reports({**r, "layers": [DATA]}, r), id="compare_reports-layer"),
        pytest.param(lambda r: measure_peak_memory(Opaque(), device="cpu"), id="measure_peak_memory-workload"),
        pytest.param(lambda r: measure_peak_memory(lambda: None, device=Opaque()), id="measure_peak_memory-device"),
        pytest.param(
            lambda r: torchscan.modules.module_macs(nn.Linear(2, 2), Opaque(), torch.full((1, 2), NUMBER)),
            id="module_macs-input",
        ),
    ],
)
def test_error_messages_carry_no_argument_values(call):
    report = crawl_module(nn.Linear(4, 4), (4,))
    assert_no_data(_message(lambda: call(report)), "error message")


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"input_shape": torch.full((1,), NUMBER)}, id="input_shape-tensor"),
        pytest.param({"input_shape": Opaque()}, id="input_shape-object"),
        pytest.param({"input_shape": (Opaque(),)}, id="input_shape-dimension"),
        pytest.param({"input_shape": (4,), "mode": Opaque()}, id="mode"),
    ],
)
def test_crawl_module_argument_errors_carry_no_values(kwargs):
    assert_no_data(_message(lambda: crawl_module(Private(), **kwargs)), "crawl_module error message")
