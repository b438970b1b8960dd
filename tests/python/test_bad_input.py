"""Bad input to every public Python entry point: the contract's exception type, a message that
names the problem, the model and the process left as found.

What test_measure_flops.py, test_crawl_module.py, test_compare_reports.py, test_peak_memory.py and
test_module_formulas.py already check (non-callable workloads, custom_mapping keys, the
crawl_module argument matrix, the basic malformed reports, bad devices) is not repeated here.
Known gaps are `xfail(strict=True)` tests: they fail loudly once the gap is closed.
"""

import copy
import json
import math
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import torchscan
from reliability_helpers import assert_left_as_found, mixed_mode_model, model_state, process_state, stale_hook_flags
from torchscan import compare_reports, crawl_module, measure_flops, summary
from torchscan.modules import module_dmas, module_flops, module_macs, module_rf
from torchscan.process import measure_peak_memory
from torchscan.utils import aggregate_info, format_info


def small_report():
    return crawl_module(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,))


def flop_report():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    return measure_flops(lambda: torch.mm(a, b))


def error_of(call):
    """(type, message) of what ``call`` raises without torchscan around it."""
    try:
        call()
    except Exception as error:
        return type(error), str(error)
    raise AssertionError("the reference call was expected to raise")


# ---- measure_flops ----


def test_measure_flops_signature_errors_name_the_argument():
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'workload'"):
        measure_flops()
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        measure_flops(lambda: None, None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'custom'"):
        measure_flops(lambda: None, custom={})


def test_workload_that_needs_arguments_raises_its_own_type_error_and_leaves_nothing():
    model = mixed_mode_model()
    before_model, before_process = model_state(model), process_state()

    def needs_input(x):
        return model(x)

    with pytest.raises(TypeError, match=r"needs_input\(\) missing 1 required positional argument: 'x'"):
        measure_flops(needs_input)
    assert_left_as_found(model, before_model, before_process)


def test_float64_input_to_a_float32_model_raises_the_workloads_error_unchanged():
    model = mixed_mode_model()
    x = torch.randn(3, 4, dtype=torch.float64)
    expected_type, expected_message = error_of(lambda: model(x))
    assert expected_type is RuntimeError and "dtype" in expected_message
    before_model, before_process = model_state(model), process_state()
    with pytest.raises(RuntimeError) as caught:
        measure_flops(lambda: model(x), modules=model)
    assert type(caught.value) is RuntimeError
    assert str(caught.value) == expected_message
    assert caught.value.__context__ is None, "torchscan raised while handling the workload's error"
    assert_left_as_found(model, before_model, before_process)
    # The next measurement is exact: Linear(4, 8) on 3 rows, an addmm: the products and the bias adds.
    report = measure_flops(lambda: model[0](x.float()))
    assert report["total"] == {**report["total"], "status": "complete", "value": 2 * 3 * 4 * 8 + 3 * 8}


def test_device_mismatch_raises_the_workloads_error_unchanged_in_every_entry_point():
    model = nn.Sequential(nn.Linear(4, 2, device="meta"), nn.ReLU())
    x = torch.randn(3, 4)
    _, expected_message = error_of(lambda: model(x))
    assert "meta" in expected_message
    before_model, before_process = model_state(model), process_state()
    for call in (
        lambda: measure_flops(lambda: model(x)),
        lambda: crawl_module(model, args=(x,)),
        lambda: measure_peak_memory(lambda: model(x), device="cpu"),
    ):
        with pytest.raises(RuntimeError) as caught:
            call()
        assert str(caught.value) == expected_message
        assert_left_as_found(model, before_model, before_process)


def test_negative_shape_inside_a_workload_propagates_torchs_error():
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        measure_flops(lambda: torch.empty(2, -1))
    assert torch.ops.torchscan.live_sessions() == 0


def test_an_accumulated_count_beyond_2_64_is_unavailable_with_a_diagnostic():
    # 20 additions of 2^60 elements each (meta tensors: shapes only, no memory): 20 * 2^60 > 2^64.
    a = torch.empty(2**30, 2**30, device="meta")
    report = measure_flops(lambda: [a + a for _ in range(20)])
    assert report["total"]["status"] == "unavailable"
    assert report["total"]["value"] is None and report["total"]["known_value"] is None
    codes = {(d["code"], d.get("operator")) for d in report["diagnostics"]}
    assert ("flop_overflow", "aten.add") in codes, report["diagnostics"]
    assert any("2^64" in d["message"] for d in report["diagnostics"])
    json.dumps(report)  # no Python int too large for JSON consumers sneaks in


def test_a_single_call_beyond_2_64_is_unavailable_with_flop_overflow():
    a = torch.empty(2**30, 2**30, device="meta")  # mm: 2 * 2^90 FLOPs
    report = measure_flops(lambda: torch.mm(a, a))
    assert report["total"]["status"] == "unavailable", report["total"]
    assert {d["code"] for d in report["diagnostics"]} == {"flop_overflow"}
    assert any(d.get("operator") == "aten.mm" for d in report["diagnostics"]), report["diagnostics"]
    # No wrapped number anywhere: the operator is not listed with a count.
    assert "aten.mm" not in report["by_operator"]


# ---- crawl_module and summary ----


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: crawl_module(), "missing 1 required positional argument: 'module'"),
        (lambda: crawl_module(nn.Linear, (2,)), "module must be an nn.Module, got type"),
        (lambda: crawl_module(lambda x: x, (2,)), "module must be an nn.Module, got function"),
        (lambda: crawl_module(nn.Linear(2, 2), (2,), None, None), "takes from 1 to 3 positional arguments"),
        (lambda: crawl_module(nn.Linear(2, 2), (2,), shape=(2,)), "unexpected keyword argument 'shape'"),
        (lambda: crawl_module(nn.Linear(2, 2), (True, 2)), "dimension must be an integer, got True"),
        (lambda: crawl_module(nn.Linear(2, 2), (np.int64(2),)), "dimension must be an integer"),
        (lambda: crawl_module(nn.Linear(2, 2), [(2,), [2]]), "non-empty list of tuples"),
        (lambda: crawl_module(nn.Linear(2, 2), (2,), dtype="float32"), "dtype must be a torch.dtype or an iterable"),
        (lambda: summary(nn.Linear(2, 2), (2,), max_depth="1"), "max_depth must be an integer, got str"),
        (lambda: summary(nn.Linear(2, 2), (2,), max_depth=True), "max_depth must be an integer, got bool"),
    ],
)
def test_crawl_module_and_summary_type_errors(call, message):
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: summary(nn.Linear(2, 2), (2,), wrap_mode="start"), "wrap_mode must be 'mid', 'end' or None"),
        (lambda: summary(nn.Linear(2, 2), (2,), max_depth=-1), "max_depth must be non-negative, got -1"),
        (lambda: summary(nn.Linear(2, 2), (2,), max_depth=3), r"max_depth 3 is higher than the module depth \(0\)"),
        (lambda: crawl_module(nn.Linear(2, 2), [(2,), (-1, 2)]), r"cannot be negative, got -1 in \(-1, 2\)"),
        (lambda: crawl_module(nn.Linear(2, 2), (2,), dtype=[]), r"\(0 != 1\)"),
    ],
)
def test_crawl_module_and_summary_value_errors(call, message, capsys):
    with pytest.raises(ValueError, match=message):
        call()
    assert capsys.readouterr().out == "", "a failing summary must not print a partial table"


def test_wrong_dtype_args_raise_the_forwards_error_and_restore_the_model():
    model = mixed_mode_model()
    x = torch.randn(3, 4, dtype=torch.float64)
    expected_type, expected_message = error_of(lambda: model.eval()(x))
    model.train()
    model[1].eval()
    model[3][0].eval()
    before_model, before_process = model_state(model), process_state()
    for mode in ("full", "structure"):
        with pytest.raises(expected_type) as caught:
            crawl_module(model, args=(x,), mode=mode)
        assert str(caught.value) == expected_message
        assert_left_as_found(model, before_model, before_process)
    # A float64 *generated* input is the same mistake through input_shape.
    with pytest.raises(RuntimeError, match=re.escape(expected_message)):
        crawl_module(model, (4,), dtype=torch.float64)
    assert_left_as_found(model, before_model, before_process)


def test_empty_input_shapes():
    # A zero-size input is valid: ReLU on (1, 0) elements costs a complete zero.
    report = crawl_module(nn.ReLU(), (0,))
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "complete", "value": 0}
    assert report["totals"]["operator_flops"]["status"] == "complete"
    assert report["totals"]["operator_flops"]["value"] == 0
    assert report["layers"][0]["output"]["shape"] == [1, 0]
    # An empty shape () is a (1,)-shaped input: a Linear(2, 2) refuses it with PyTorch's own error.
    model = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied \(1x1 and 2x2\)"):
        crawl_module(model, ())
    assert model.training and not model._forward_hooks and not model._forward_pre_hooks


def test_huge_input_shapes():
    model = nn.Linear(2, 2)
    before_model, before_process = model_state(model), process_state()
    # Too large to allocate: PyTorch's RuntimeError, raised before any hook exists.
    with pytest.raises(RuntimeError, match="Storage size calculation overflowed"):
        crawl_module(model, (2**62,))
    assert_left_as_found(model, before_model, before_process)
    # Large but shapeless (meta device): 2^60 elements counted exactly, no overflow.
    report = crawl_module(nn.ReLU(), (2**30, 2**30), device="meta")
    assert report["totals"]["module_flops"]["value"] == 2**60
    assert report["totals"]["operator_flops"]["value"] == 2**60
    # A module formula beyond 2^64 is unavailable with a diagnostic, never a wrapped number.
    huge = nn.Linear(2**30, 2**30, bias=False, device="meta")
    report = crawl_module(huge, args=(torch.empty(2**30, 2**30, device="meta"),))
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    assert report["totals"]["operator_flops"]["status"] != "complete"
    messages = [d["message"] for d in report["diagnostics"] if d["metric"] == "module_flops"]
    assert messages and all("exceeds 2^64" in m for m in messages), report["diagnostics"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_unavailable_device_is_pytorchs_runtime_error_and_nothing_is_touched():
    model = mixed_mode_model()
    before_model, before_process = model_state(model), process_state()
    with pytest.raises(RuntimeError, match=r"NVIDIA driver|CUDA"):
        crawl_module(model, (4,), device="cuda")
    assert_left_as_found(model, before_model, before_process)


# ---- compare_reports ----


def test_a_flop_report_where_an_analysis_report_is_expected():
    with pytest.raises(ValueError, match=r"before is a FlopReport.*compare_reports compares AnalysisReports"):
        compare_reports(flop_report(), small_report())
    with pytest.raises(ValueError, match="after is a FlopReport"):
        compare_reports(small_report(), flop_report())


def _set(report, path, value):
    """A deep copy of ``report`` with ``report[path[0]][path[1]]... = value`` (a missing key is deleted)."""
    copied = copy.deepcopy(report)
    target = copied
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return copied


_DELETE = object()


@pytest.mark.parametrize(
    "path, value, error, message",
    [
        (("schema_version",), _DELETE, TypeError, r"before\['schema_version'\] must be an integer"),
        (("schema_version",), True, TypeError, r"before\['schema_version'\] must be an integer"),
        (("schema_version",), 1.0, TypeError, r"before\['schema_version'\] must be an integer"),
        (("schema_version",), 10**30, TypeError, r"before\['schema_version'\] must be an integer"),
        (("layers", 1), "layer", TypeError, r"before\['layers'\]\[1\] must be a mapping"),
        (("layers", 1, "path"), 3, TypeError, r"before\['layers'\]\[1\]\['path'\] must be a string"),
        (("layers", 1, "path"), _DELETE, TypeError, r"before\['layers'\]\[1\]\['path'\] must be a string"),
        (("layers", 1, "call_index"), "0", TypeError, r"\['call_index'\] must be an integer"),
        (("layers", 1, "call_index"), True, TypeError, r"\['call_index'\] must be an integer"),
        (("layers", 1, "call_index"), 0.0, TypeError, r"\['call_index'\] must be an integer"),
        (("layers", 1, "metrics"), [], TypeError, r"before\['layers'\]\[1\]\['metrics'\] must be a mapping"),
        (("totals", "macs"), [16], TypeError, r"before\['totals'\]\['macs'\] must be a mapping"),
        (("totals", "macs", "status"), _DELETE, ValueError, r"before\['totals'\]\['macs'\] must contain 'status'"),
        (("totals", "macs", "value"), _DELETE, ValueError, r"\['macs'\] must contain 'value'"),
        (("totals", "macs", "status"), "done", ValueError, r"\['status'\] must be 'complete', 'partial', or"),
        (("totals", "macs", "value"), None, ValueError, r"\['value'\] must be a number when status is 'complete'"),
        (("totals", "macs", "value"), "16", TypeError, r"\['macs'\]\['value'\] must be a number or None"),
        (("totals", "macs", "value"), math.inf, ValueError, r"\['macs'\]\['value'\] must be a finite number"),
        (("totals", "macs", "value"), -math.inf, ValueError, r"\['macs'\]\['value'\] must be a finite number"),
        (("totals", "macs", "known_value"), math.nan, ValueError, r"\['known_value'\] must be a finite number"),
        (("totals", "macs", "known_value"), 15, ValueError, r"\['known_value'\] must equal 'value'"),
        (("totals", "macs", "unit"), 3, TypeError, r"\['macs'\]\['unit'\] must be a string"),
        (("layers", 0, "metrics", "calls", "value"), math.nan, ValueError, r"\['calls'\]\['value'\] must be a finite"),
    ],
)
def test_malformed_fields_are_named(path, value, error, message):
    report = small_report()
    bad = _set(report, path, value)
    frozen = copy.deepcopy(bad)
    with pytest.raises(error, match=message):
        compare_reports(bad, report)
    assert bad == frozen or (isinstance(value, float) and math.isnan(value)), "compare_reports mutated its input"


def test_partial_and_unavailable_invariants_are_checked():
    report = small_report()
    macs = report["totals"]["macs"]
    partial_with_value = _set(report, ("totals", "macs"), {**macs, "status": "partial"})
    with pytest.raises(ValueError, match=r"\['macs'\] must have only a known_value when status is 'partial'"):
        compare_reports(partial_with_value, report)
    unavailable_with_known = _set(report, ("totals", "macs"), {**macs, "status": "unavailable", "value": None})
    with pytest.raises(ValueError, match=r"\['macs'\] numeric values must be None when status is 'unavailable'"):
        compare_reports(unavailable_with_known, report)


def test_duplicate_layer_identities_on_either_side():
    report = small_report()
    doubled = _set(report, ("layers",), report["layers"] + [copy.deepcopy(report["layers"][2])])
    with pytest.raises(ValueError, match=r"after\['layers'\] contains duplicate layer call \('1', 0\)"):
        compare_reports(report, doubled)
    # Same path, call_index rewritten to collide with the first call.
    renumbered = _set(report, ("layers", 2, "path"), "0")
    with pytest.raises(ValueError, match=r"before\['layers'\] contains duplicate layer call \('0', 0\)"):
        compare_reports(renumbered, report)


@pytest.mark.parametrize("value", [None, 3, "report", [1, 2], (1, 2)])
def test_non_mapping_reports(value):
    with pytest.raises(TypeError, match="after must be a mapping"):
        compare_reports(small_report(), value)


def test_nesting_and_cycles_outside_the_compared_fields_are_not_read():
    report = small_report()
    nested = [0]
    for _ in range(5000):
        nested = [nested]
    assert compare_reports(_set(report, ("context", "extra"), nested), report)["totals"]["macs"]["delta"] == 0
    looped = copy.deepcopy(report)
    looped["context"]["self"] = looped
    assert compare_reports(report, looped)["layers"] == {"added": [], "changed": [], "removed": []}
    # A cycle where the comparison reads is a report that is not one: named, not a RecursionError.
    cyclic = copy.deepcopy(report)
    cyclic["totals"]["macs"] = cyclic["totals"]
    with pytest.raises((TypeError, ValueError), match=r"before\['totals'\]\['macs'\]"):
        compare_reports(cyclic, report)


@pytest.mark.parametrize(("key", "kind"), [("totals", "a mapping"), ("layers", "a list")])
def test_missing_top_level_keys_are_type_errors_naming_the_key(key, kind):
    # torchscan 0.2's validation, kept for compatibility: an absent container is "not a mapping"
    # (or list); missing keys inside a metric are ValueErrors ("must contain").
    report = small_report()
    with pytest.raises(TypeError, match=rf"before\['{key}'\] must be {kind}"):
        compare_reports(_set(report, (key,), _DELETE), report)


def test_negative_call_index_is_refused():
    report = small_report()
    with pytest.raises(ValueError, match=r"\['call_index'\]"):
        compare_reports(_set(report, ("layers", 1, "call_index"), -1), report)


def _with_macs(report, value):
    return _set(report, ("totals", "macs"), {**report["totals"]["macs"], "value": value, "known_value": value})


def test_delta_beyond_64_bit_integers_is_the_nearest_float_not_an_internal_error():
    report = small_report()
    diff = compare_reports(_with_macs(report, 2**63 - 1), _with_macs(report, -(2**63)))
    assert diff["totals"]["macs"]["delta"] == float(-(2**64) + 1)


def test_delta_of_counts_above_2_63_is_exact():
    report = small_report()
    diff = compare_reports(_with_macs(report, 2**64 - 1), _with_macs(report, 2**64 - 2))
    assert diff["totals"]["macs"]["delta"] == -1


# ---- measure_peak_memory ----


def test_measure_peak_memory_signature_errors():
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'device'"):
        measure_peak_memory(lambda: None)
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        measure_peak_memory(lambda: None, "cpu")
    with pytest.raises(
        TypeError, match=r"device must be a torch\.device or a string like 'cpu' or 'cuda:0', got NoneType"
    ):
        measure_peak_memory(lambda: None, device=None)


def test_measure_peak_memory_propagates_the_workloads_dtype_error_and_measures_next():
    model = mixed_mode_model()
    x = torch.randn(3, 4, dtype=torch.float64)
    _, expected_message = error_of(lambda: model(x))
    before_model, before_process = model_state(model), process_state()
    with pytest.raises(RuntimeError) as caught:
        measure_peak_memory(lambda: model(x), device="cpu")
    assert str(caught.value) == expected_message
    assert_left_as_found(model, before_model, before_process)
    assert measure_peak_memory(lambda: torch.empty(250_000), device="cpu")["peak_bytes"] == 1_000_000


# ---- torchscan.modules ----


@pytest.mark.parametrize("formula", [module_flops, module_macs, module_dmas, module_rf])
def test_module_formulas_refuse_non_modules_and_missing_arguments(formula):
    x = torch.zeros(1, 2)
    with pytest.raises(TypeError, match=r"module must be an nn\.Module, got NoneType"):
        formula(None, x if formula is not module_flops else (x,), x)
    with pytest.raises(TypeError, match="missing 2 required positional arguments"):
        formula(nn.Linear(2, 2))


# (module_rf needs no tensor: a receptive field follows from the module's attributes.)
@pytest.mark.parametrize("formula", [module_macs, module_dmas])
@pytest.mark.parametrize("inp", [None, 3, "tensor"])
def test_module_formulas_without_an_input_tensor(formula, inp):
    with pytest.raises(ValueError, match="Linear: the module call exposed no input tensor"):
        formula(nn.Linear(2, 2), inp, torch.zeros(1, 2))


@pytest.mark.parametrize("formula", [module_flops, module_macs, module_dmas])
def test_module_formulas_without_an_output_tensor(formula):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="Linear: the module call exposed no output tensor"):
        formula(nn.Linear(2, 2), x if formula is not module_flops else (x,), None)


def test_module_formula_beyond_2_64_is_an_error_not_a_wrapped_number():
    n = 2**30
    layer = nn.Linear(n, n, bias=False, device="meta")
    x = torch.empty(n, n, device="meta")
    with pytest.raises(NotImplementedError, match="Linear: the count exceeds 2\\^64"):
        module_flops(layer, (x,), x)
    with pytest.raises(NotImplementedError, match="Linear: the count exceeds 2\\^64"):
        module_macs(layer, x, x)
    # DMAs of the same call fit: input, weight and output, 2^60 elements each.
    assert module_dmas(layer, x, x) == 3 * 2**60


def test_unsupported_module_warns_once_per_call_with_its_type():
    class Mystery(nn.Module):
        pass

    x = torch.zeros(1, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert module_flops(Mystery(), (x,), x) == 0
    assert [str(w.message) for w in caught] == ["Module type not supported: Mystery"]


# ---- torchscan.utils ----


@pytest.mark.parametrize("value", [None, "report", [], 3])
def test_format_info_and_aggregate_info_refuse_non_mappings(value):
    kind = type(value).__name__
    with pytest.raises(TypeError, match=f"format_info needs an AnalysisReport .*mapping.*got {kind}"):
        format_info(value)
    with pytest.raises(TypeError, match=f"aggregate_info needs an AnalysisReport .*mapping.*got {kind}"):
        aggregate_info(value, 0)


def test_format_info_and_aggregate_info_refuse_a_flop_report():
    # The message names the table that a FlopReport has.
    with pytest.raises(ValueError, match=r"format_info needs an AnalysisReport.*got a FlopReport.*utils\.format_flops"):
        format_info(flop_report())
    with pytest.raises(ValueError, match=r"aggregate_info needs an AnalysisReport.*got a FlopReport"):
        aggregate_info(flop_report(), 0)


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("layers",), _DELETE, r"report\['layers'\] must be a list"),
        (("layers",), "abc", r"report\['layers'\] must be a list"),
        (("totals",), _DELETE, r"report\['totals'\] must be a mapping"),
    ],
)
def test_format_info_names_missing_or_mistyped_fields(path, value, message):
    with pytest.raises(ValueError, match=message):
        format_info(_set(small_report(), path, value))


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_format_info_refuses_non_finite_numbers(value):
    bad = _set(small_report(), ("totals", "macs", "value"), value)
    with pytest.raises(ValueError, match="report holds a non-finite number"):
        format_info(bad)


def test_format_info_and_aggregate_info_refuse_deep_nesting_and_cycles():
    nested = [0]
    for _ in range(5000):
        nested = [nested]
    deep = _set(small_report(), ("context", "extra"), nested)
    with pytest.raises(ValueError, match="report is nested too deeply"):
        format_info(deep)
    with pytest.raises(ValueError, match="report is nested too deeply"):
        aggregate_info(deep, 0)
    looped = small_report()
    looped["context"]["self"] = looped
    with pytest.raises(ValueError, match="or a cycle, which is not JSON data"):
        format_info(looped)


def test_format_info_refuses_values_that_are_not_json():
    bad = _set(small_report(), ("context", "device"), torch.device("cpu"))
    with pytest.raises(TypeError, match=r"report holds a value that is not JSON data.*device"):
        format_info(bad)


@pytest.mark.parametrize(
    "path, value, error, message",
    [
        (("layers",), _DELETE, ValueError, r"report\['layers'\] must be a list"),
        (("layers",), None, ValueError, r"report\['layers'\] must be a list"),
        (("layers", 1), "layer", ValueError, r"report\['layers'\]\[1\] must be a mapping with an integer 'depth'"),
        (("layers", 1, "depth"), _DELETE, ValueError, r"report\['layers'\]\[1\] must be a mapping with an integer"),
        (("layers", 1, "depth"), 1.0, ValueError, r"report\['layers'\]\[1\] must be a mapping with an integer"),
    ],
)
def test_aggregate_info_names_malformed_layers(path, value, error, message):
    with pytest.raises(error, match=message):
        aggregate_info(_set(small_report(), path, value), 0)


def test_aggregate_info_depth_errors():
    report = small_report()
    with pytest.raises(TypeError, match="max_depth must be an integer, got float"):
        aggregate_info(report, 1.0)
    with pytest.raises(TypeError, match="max_depth must be an integer, got NoneType"):
        aggregate_info(report, None)
    with pytest.raises(ValueError, match=r"max_depth 2 is higher than the module depth \(1\)"):
        aggregate_info(report, 2)
    assert [layer["depth"] for layer in aggregate_info(report, 0)["layers"]] == [0]


def test_report_helpers_accept_a_report_through_json():
    # The table of a report that went through JSON (a file, the CLI) is the table of the report.
    report = small_report()
    assert format_info(json.loads(json.dumps(report))) == format_info(report)
    assert torchscan.utils.aggregate_info(json.loads(json.dumps(report)), 1) == aggregate_info(report, 1)


# ---- PyTorch's global hook flags ----


def test_crawl_module_leaves_no_stale_global_hook_flag():
    before = stale_hook_flags()
    for _ in range(3):
        crawl_module(nn.Linear(2, 2), (2,))
    assert stale_hook_flags() == before, "stale _global_forward_hooks_with_kwargs entries after 3 crawl_module calls"


def test_compiled_graph_operators_reject_bad_sessions_and_mismatched_names():
    ops = torch.ops.torchscan
    handle = ops.open_session("")
    try:
        with pytest.raises(ValueError, match="2 modules but 1 labels"):
            ops.name_modules(handle, [1, 2], "A")
    finally:
        ops.discard_session(handle)
    with pytest.raises(RuntimeError, match="unknown torchscan session handle 12345"):
        ops.name_modules(12345, [1], "A")
    with pytest.raises(RuntimeError, match="unknown torchscan session handle 12345"):
        ops.price_session(12345)
    assert ops.live_sessions() == 0
    # A graph id that was never registered adds nothing; the markers leave no state behind.
    with torchscan.count_flops() as counter:
        ops.compiled_begin()
        ops.compiled_end(987654, True)
        torch.mm(torch.ones(2, 3), torch.ones(3, 4))
    assert counter.report()["total"]["value"] == 2 * 2 * 3 * 4


# ---- hostile outputs and names (issue 16) ----


class _SelfReferencing(nn.Module):
    def forward(self, x):
        y = x * 2
        outer = [y]
        outer.append(outer)  # holds itself
        inner = {"again": outer}
        outer.append(inner)  # a mapping inside it that holds it: two levels up
        return outer


def test_an_output_that_holds_itself_is_recorded_as_a_cycle(capsys):
    model = _SelfReferencing()
    report = crawl_module(model, (3,))
    output = report["layers"][0]["output"]
    assert output["kind"] == "list"
    assert output["items"][1] == {"kind": "cycle", "depth": 1}
    assert output["items"][2]["items"][0]["value"] == {"kind": "cycle", "depth": 2}
    assert report["totals"]["operator_flops"]["value"] == 3
    from helpers import schema_validator

    assert list(schema_validator("analysis_report").iter_errors(report)) == []
    summary(model, (3,))
    assert "[(1, 3), <cycle 1 up" in capsys.readouterr().out


def _odd_names_model():
    model = nn.Module()
    model.d = nn.ModuleDict({"\ud800": nn.Linear(2, 2), "\\ud800": nn.Linear(2, 2)})
    setattr(model, "a.0", nn.Linear(2, 2))  # the path PyTorch would give `a` -> `0`
    model.a = nn.Sequential(nn.Linear(2, 2))
    model.forward = lambda x: sum(m(x) for m in (model.d["\ud800"], model.d["\\ud800"], getattr(model, "a.0"), model.a))
    return model


def test_odd_module_names_get_unique_paths_and_labels():
    model = _odd_names_model()
    report = crawl_module(model, (2,))
    identities = [(layer["path"], layer["call_index"]) for layer in report["layers"]]
    assert len(identities) == len(set(identities)) == 6
    assert {path for path, _ in identities} == {"", "d.\\ud800", "d.\\\\ud800", "a\\.0", "a", "a.0"}
    assert compare_reports(report, report)["layers"]["changed"] == []
    flops = measure_flops(lambda: model(torch.randn(1, 2)), modules=model)
    labels = {label for label in flops["by_module"] if label != "Module"}
    assert labels == {"Module.d.\\ud800", "Module.d.\\\\ud800", "Module.a\\.0", "Module.a", "Module.a.0"}
    # Linear(2, 2) on one row: 2*1*2*2 = 8 multiply-adds, plus 2 bias adds (the bias convention)
    assert all(flops["by_module"][label] == 10 for label in labels - {"Module.a"})


def test_path_escapes_are_injective():
    from torchscan._names import escape_name

    names = ["plain", "a.b", "a\\.b", "a\\b", "\ud800", "\\ud800", "\\\\ud800", "é漢", ".", "\\", ""]
    escaped = [escape_name(name) for name in names]
    assert len(set(escaped)) == len(names)
    assert escape_name("plain") == "plain" and escape_name("é漢") == "é漢"
    for part in escaped:
        part.encode("utf-8")  # no lone surrogate left
