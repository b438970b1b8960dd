"""The `torchscan` command line: the installed console script, `python -m torchscan`, and main()."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torchvision

import cli_models
import torchscan
from helpers import schema_validator
from torchscan import cli

SCRIPT = Path(sys.executable).parent / "torchscan"
HERE = Path(__file__).resolve().parent


def run(*args, cwd, module=False, columns=100):
    """Runs the console script (or `python -m torchscan`) with the test models importable."""
    command = [sys.executable, "-m", "torchscan"] if module else [str(SCRIPT)]
    env = dict(os.environ, PYTHONPATH=str(HERE), COLUMNS=str(columns))
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, env=env, check=False)


def valid(name, document):
    found = [(list(e.absolute_path), e.message) for e in schema_validator(name).iter_errors(document)]
    assert found == []
    return document


def table_rows(stdout):
    """The layer rows of the table: between the two '=' rules."""
    lines = stdout.splitlines()
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"="}]
    return lines[rules[0] + 1 : rules[1]]


def totals_section(stdout):
    """{total name: (value text, unit, status)} from the lines after the table."""
    lines = stdout.splitlines()
    start = lines.index("Totals (>= N: partial, a lower bound)") + 2
    section = {}
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        # Columns: Total, Value, Unit, Status, Measures (two spaces or more apart).
        name, value, unit, status, *_ = re.split(r"\s{2,}", line.strip())
        section[name] = (value, unit, status)
    return section


@pytest.fixture(scope="module")
def example_json(tmp_path_factory):
    """The built-in model's report, written by the console script."""
    path = tmp_path_factory.mktemp("reports") / "example.json"
    result = run("--json", str(path), cwd=path.parent)
    assert result.returncode == 0, result.stderr
    return path


def test_the_console_script_is_installed():
    assert SCRIPT.is_file() and os.access(SCRIPT, os.X_OK)


def test_default_model_prints_its_table_and_totals(tmp_path):
    result = run(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    rows = table_rows(result.stdout)
    # The root is named by its type, as operator_flops.by_module labels it.
    assert rows[0].split()[:3] == ["ExampleNet", "ExampleNet", "(1,"]
    # Every module call: the root, features and its 8 layers, classifier and its 2.
    assert len(rows) == 13
    assert sum(" Conv2d " in row for row in rows) == 2
    totals = totals_section(result.stdout)
    # Conv 3->16 (432) + BN (32) + conv 16->32 (4,608) + BN (64) + linear 32->10 (330).
    assert totals["parameters"] == ("5,466", "elements", "complete")
    assert totals["operator_flops"][2] == "complete"
    assert set(totals) >= {"module_flops", "macs", "dmas", "buffer_bytes"}
    # torchscan 0.2's three lines end the table, as summary's.
    assert "\nTrainable params: 5,466\nNon-trainable params: 0\nTotal params: 5,466\n" in result.stdout
    # Sizes in SI megabytes, said so: 21,864 parameter bytes and 400 buffer bytes.
    size = "Model size (params + buffers): 0.02 MB (parameters 0.02 MB, buffers 0.00 MB; 1 MB = 10^6 bytes)"
    assert size in result.stdout
    # BatchNorm2d(16): 32 parameters and 33 buffer elements (running mean and variance, the
    # batch counter), in columns of their own; its FLOPs: 2 per element of 16x32x32.
    bn = re.split(r"\s{2,}", next(row for row in rows if " BatchNorm2d " in row).strip())
    assert bn[-6:] == ["BatchNorm2d", "(1, 16, 32, 32)", "32", "33", "True", "32,768"]


def test_python_dash_m_is_the_same_command(tmp_path):
    script, module = run("--max-depth", "1", cwd=tmp_path), run("--max-depth", "1", cwd=tmp_path, module=True)
    assert script.returncode == module.returncode == 0
    assert script.stdout == module.stdout
    usage = run("--bogus", cwd=tmp_path, module=True)
    assert usage.stderr.startswith("usage: python -m torchscan")


def test_torchvision_model_with_max_depth(tmp_path):
    result = run("torchvision.models:resnet18", "--input-shape", "3,32,32", "--max-depth", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = table_rows(result.stdout)
    names = [row.split()[0] for row in rows]
    assert names == ["ResNet", "├─conv1", "├─bn1", "├─relu", "├─maxpool", *(f"├─layer{i}" for i in range(1, 5)),
                     "├─avgpool", "├─fc"]  # fmt: skip
    expected = torchscan.crawl_module(torchvision.models.resnet18(), (3, 32, 32))["totals"]
    totals = totals_section(result.stdout)
    for name in ("parameters", "operator_flops", "module_flops"):
        assert totals[name] == (f"{expected[name]['value']:,}", expected[name]["unit"], "complete")


def test_the_table_fits_a_width_and_is_whole_when_piped(tmp_path):
    # Piped (not a terminal): nothing is cut, whatever COLUMNS says.
    whole = run("cli_models:long_names", "--input-shape", "4", cwd=tmp_path, columns=64)
    narrow = run("cli_models:long_names", "--input-shape", "4", "--width", "72", cwd=tmp_path)
    assert whole.returncode == 0 and narrow.returncode == 0, narrow.stderr
    assert f"├─{cli_models.LONG_NAME}  Sequential" in whole.stdout
    assert "BatchNorm1d " in whole.stdout
    assert max(len(line) for line in table_rows(whole.stdout)) > 72
    assert all(len(line) <= 72 for line in table_rows(narrow.stdout)), narrow.stdout
    assert "[...]" in narrow.stdout
    assert len(table_rows(narrow.stdout)) == len(table_rows(whole.stdout))


def test_json_to_stdout_is_only_the_report(tmp_path):
    result = run("torchvision.models:resnet18", "--input-shape", "3,32,32", "--json", "-", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    report = valid("analysis_report", json.loads(result.stdout))
    # Exactly what crawl_module reports in-process (deterministic for the same model and call).
    expected = torchscan.crawl_module(torchvision.models.resnet18(), (3, 32, 32))
    assert report["totals"] == expected["totals"]
    assert report["layers"] == expected["layers"]
    assert report["context"]["model_type"] == "torchvision.models.resnet.ResNet"
    assert report["inputs"]["args"][0]["shape"] == [1, 3, 32, 32]


def test_json_to_a_file_and_the_table(example_json):
    report = valid("analysis_report", json.loads(example_json.read_text()))
    assert report["context"]["model_type"] == "torchscan.cli.ExampleNet"
    assert report["inputs"]["args"][0]["shape"] == [1, *cli.ExampleNet.input_shape]
    assert report["totals"]["parameters"]["value"] == 5_466


def test_structure_mode(tmp_path):
    result = run("--mode", "structure", "--json", str(tmp_path / "s.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    totals = totals_section(result.stdout)
    assert totals["operator_flops"] == ("not requested", "FLOPs", "unavailable")
    assert totals["parameters"] == ("5,466", "elements", "complete")
    report = valid("analysis_report", json.loads((tmp_path / "s.json").read_text()))
    assert report["context"]["analysis_mode"] == "structure"


def test_strict_fails_on_an_incomplete_analysis_and_still_writes_the_json(tmp_path):
    path = tmp_path / "partial.json"
    args = ("cli_models:unsupported", "--input-shape", "4")
    result = run(*args, "--strict-metrics", "module_flops,macs,dmas", "--json", str(path), cwd=tmp_path)
    assert result.returncode == 1
    # The receptive field is not judged: not named.
    assert "--strict: the analysis is incomplete for: dmas, macs, module_flops;" in result.stderr
    assert f"the report was written to {path}" in result.stderr
    report = valid("analysis_report", json.loads(path.read_text()))
    assert report["totals"]["module_flops"]["status"] == "partial"
    # The table still shows what is missing: partial totals as lower bounds, and why.
    totals = totals_section(result.stdout)
    assert totals["module_flops"] == (">= 64", "FLOPs", "partial")
    # One line for the module type's four metrics (the diagnostics are grouped).
    assert (
        "warning: unsupported_module_metric (layer 1; metrics module_flops, macs, dmas, receptive_field): "
        "Module type not supported: Doubler"
    ) in result.stdout
    # Without --strict the same analysis succeeds; with --strict too: the table's metrics
    # (parameters, buffers, operator FLOPs) are complete, only the module formulas are not.
    assert run(*args, cwd=tmp_path).returncode == 0
    assert run(*args, "--strict", cwd=tmp_path).returncode == 0
    # With --receptive-field the column it adds is judged (Doubler has no formula for it).
    shown = run(*args, "--strict", "--receptive-field", cwd=tmp_path)
    assert shown.returncode == 1 and "incomplete for: receptive_field" in shown.stderr
    every = run(*args, "--strict-metrics", "all", cwd=tmp_path)
    assert "incomplete for: dmas, macs, module_flops, receptive_field" in every.stderr


def test_strict_fails_when_operator_flops_are_partial(tmp_path):
    # An operator on a sparse tensor that no formula prices: partial operator FLOPs, named.
    result = run("cli_models:SparseDoubler", "--input-shape", "4", "--strict", cwd=tmp_path)
    assert result.returncode == 1
    assert "--strict: the analysis is incomplete for: flops, operator_flops" in result.stderr
    assert totals_section(result.stdout)["operator_flops"][2] == "partial"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--input-shape", "3,x"], "argument --input-shape: invalid shape '3,x'"),
        (["nosuchmodule:Thing", "--input-shape", "3"], "cannot import MODEL 'nosuchmodule:Thing': ModuleNotFoundError"),
    ],
)
def test_usage_errors_exit_2(tmp_path, args, message):
    result = run(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: torchscan")
    assert f"torchscan: error: {message}" in result.stderr


def test_a_forward_that_raises_exits_1_with_its_message(tmp_path):
    result = run("cli_models:Broken", "--input-shape", "4", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        "torchscan: error: analysis of cli_models:Broken failed on the inputs (1, 4) float32: ValueError: this model "
        "rejects every input\n"
    )
    assert "Traceback" not in result.stderr


def test_compare_two_real_reports(tmp_path):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    for model, path in (("cli_models:unsupported", before), ("cli_models:supported", after)):
        assert run(model, "--input-shape", "4", "--json", str(path), cwd=tmp_path).returncode == 0

    result = run("compare", str(before), str(after), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert lines[0] == "Totals: 5 changed, 4 not exact, 3 unchanged"
    # Parameters: + Linear(8, 2) = 18. Operator FLOPs on one row: before, Linear(4, 8) 2*4*8 + 8 bias
    # adds = 72 and the doubling 8 = 80; after, 72 + ReLU 8 + Linear(8, 2) 2*8*2 + 2 = 34: 114.
    assert "parameters 40 58 +18 complete" in lines
    # Without pruning masks the effective counts are the dense ones.
    assert "effective_parameters 40 58 +18 complete" in lines
    assert "operator_flops 80 114 +34 complete" in lines
    # module_flops before is partial (Doubler has no formula): a lower bound, no exact change.
    assert "module_flops >= 64 104 ? partial" in lines
    assert "Layers: 1 added, 0 removed, 2 changed" in lines
    assert "(root) operator_flops 80 114 +34 complete" in lines
    assert "1 receptive_field unavailable 1 ? unavailable" in lines
    assert "+ 2 operator_flops - 34 added complete" in lines
    assert lines[-1].startswith("Change '?': not exact")

    as_json = run("compare", str(before), str(after), "--json", "-", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    diff = valid("report_diff", json.loads(as_json.stdout))
    assert diff == torchscan.compare_reports(json.loads(before.read_text()), json.loads(after.read_text()))
    assert diff["totals"]["module_flops"] == {**diff["totals"]["module_flops"], "status": "partial", "delta": None}


def test_compare_bad_json_exits_1(tmp_path, example_json):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = run("compare", str(bad), str(example_json), cwd=tmp_path)
    assert result.returncode == 1
    assert f"torchscan compare: error: {bad} is not valid JSON" in result.stderr


def test_compare_failures_in_process(tmp_path, example_json, capsys):
    # A JSON document that is not a report: compare_reports refuses it, naming the field.
    stub = tmp_path / "stub.json"
    stub.write_text('{"schema_version": 1}')
    assert cli.main(["compare", str(stub), str(example_json)]) == 1
    assert f"torchscan compare: error: cannot compare {stub} with {example_json}: before['totals']" in (
        capsys.readouterr().err
    )
    assert cli.main(["compare", str(tmp_path / "missing.json"), str(example_json)]) == 2
    assert f"report file not found: {tmp_path / 'missing.json'}" in capsys.readouterr().err


# ---- main() in-process: the remaining options and errors, without a process per case ----


def test_main_returns_the_status_and_writes_json(capsys):
    assert cli.main(["--json", "-", "--dtype", "float64"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"]["args"][0]["dtype"] == "torch.float64"
    # A floating --dtype analyses the model in that dtype: its parameters were cast too.
    assert report["context"]["dtypes"] == ["torch.float64", "torch.int64"]  # int64: batch norm's counters


def test_an_output_path_that_cannot_be_written_is_refused_before_the_analysis(tmp_path, capsys):
    target = tmp_path / "no-such-dir" / "report.json"
    assert cli.main(["--json", str(target)]) == 2
    assert f"argument --json: the folder {str(target.parent)!r} of {str(target)!r} does not exist" in (
        capsys.readouterr().err
    )
    assert cli.main(["--csv", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert cli.main(["--csv", "-", "--json", "-"]) == 2
    assert "only one of --json and --csv" in capsys.readouterr().err


def test_several_inputs_and_dtypes(capsys):
    args = ["cli_models:TwoInputs", "--input-shape", "3,8,8", "--input-shape", "5", "--json", "-"]
    assert cli.main([*args, "--dtype", "float32", "--dtype", "float32", "--dtype", "float32"]) == 2
    assert "give --dtype once or once per --input-shape (3 dtypes for 2 shapes)" in capsys.readouterr().err
    assert cli.main([*args, "--dtype", "float32", "--dtype", "torch.float32"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [a["shape"] for a in report["inputs"]["args"]] == [[1, 3, 8, 8], [1, 5]]


def test_a_module_instance_is_used_as_is(capsys):
    assert cli.main(["cli_models:instance", "--input-shape", "6", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["parameters"]["value"] == 6 * 2 + 2


def test_receptive_field_column(capsys):
    assert cli.main(["--receptive-field", "--max-depth", "0"]) == 0
    assert "Receptive field" in capsys.readouterr().out.splitlines()[1]


@pytest.mark.parametrize(
    "args, message",
    [
        (["torchvision.models:resnet18"], "the inputs are required with MODEL 'torchvision.models:resnet18'"),
        (["torch.nn:Linear", "--input-shape", "4"], "cannot build MODEL 'torch.nn:Linear' by calling it with no"),
        (["torch.nn:Linear", "--input-shape", "4", "--kw", "in_features=4"], "with in_features=4: TypeError"),
        (["--kw", "num_classes=2", "--kw", "num_classes=3"], "argument --kw: 'num_classes' is given twice"),
        (["--kw", "2=3"], "invalid keyword argument '2=3'"),
        (["--input", "x:int64:4", "--input-shape", "4"], "with --input or with --input-shape, not both"),
        (["--input", "x:int99:4"], "argument --input: unknown dtype 'int99'"),
        (["--input", "x:int64:4:5..5"], "the range '5..5' must be LOW..HIGH with integers LOW < HIGH"),
        (["--input", "x:float32:4:0..2"], "the range 0..2 applies to integer inputs"),
        (["--input", "x:int8:4:0..1000"], "the range 0..1000 of an input does not fit torch.int8"),
        (["--input", "1x:int64:4"], "the name '1x' is not a Python identifier"),
        (["--batch-size", "0"], "invalid batch size '0'"),
        (["--input", "x:float32:3,32,32", "--dtype", "float32"], "an --input names its own dtype"),
        (["cli_models:not_a_module", "--input-shape", "4"], "MODEL 'cli_models:not_a_module' returned a Tensor"),
        (["cli_models:Nope", "--input-shape", "4"], "cli_models has no attribute 'Nope'"),
        (["justaname", "--input-shape", "4"], "invalid MODEL 'justaname'"),
        (["--dtype", "float99"], "argument --dtype: unknown dtype 'float99'"),
        (["--device", "gpu7"], "argument --device: invalid device 'gpu7'"),
        (["--input-shape", "3,-2"], "invalid shape '3,-2'"),
        (["compare", "only-one.json"], "the following arguments are required: AFTER.json"),
    ],
)
def test_usage_errors_in_process(capsys, args, message):
    assert cli.main(args) == 2
    assert message in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "compare BEFORE.json AFTER.json" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["compare", "--help"]) == 0
    assert "lower bound" in capsys.readouterr().out


def test_repeated_diagnostics_are_one_line(tmp_path):
    # 6 layers of a module type without module formulas: 18 diagnostics (module_flops, macs,
    # dmas each), one line naming three layers and the count of the rest.
    result = run("cli_models:many_unsupported", "--input-shape", "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "unsupported_module_metric" in line]
    assert lines == [
        "  warning: unsupported_module_metric (layers 0, 1, 2 and 3 more; metrics module_flops, macs, dmas, "
        "receptive_field): Module type not supported: Doubler"
    ]
    assert "Diagnostics (24, 1 distinct):" in result.stdout
