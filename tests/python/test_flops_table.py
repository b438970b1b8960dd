"""format_flops: a FlopReport as a table by module, operator or category (the Rust tests in
src/flops_table.rs check the layout against hand-computed shares), and the CLI's --flops-by."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torchscan
from torchscan.utils import format_flops

SCRIPT = Path(sys.executable).parent / "torchscan"


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 4), nn.Softmax(-1)))


def training_step(model, x):
    model(x).sum().backward()


def rows(table):
    """The table's rows: between the rule and the Phases line, as lists of cells."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line and set(line) == {"-"}) + 1
    return [line.split() for line in lines[start:] if not line.startswith(("Phases:", "Not complete:"))]


def number(cell):
    return int(cell.replace(",", ""))


def test_module_rows_are_the_reports_numbers_with_their_shares():
    model, x = net(), torch.randn(2, 8)
    report = torchscan.measure_flops(lambda: training_step(model, x))
    total = report["total"]["value"]
    table = format_flops(report, by="module")
    assert table.splitlines()[0] == f"Total: {total:,} FLOPs (complete)"
    found = {}
    for cells in rows(table):
        if cells[0] == "(outside":
            outside = number(cells[3])
            continue
        found[cells[0]] = (number(cells[1]), cells[2], cells[3])
    # Tree order, children indented under their parent: each name is its path's last component.
    assert [r[0] for r in rows(table)][:6] == ["Sequential", "0", "1", "2", "0", "1"]
    assert found["Sequential"] == (
        report["by_module"]["Sequential"],
        f"{report['by_module']['Sequential'] / total:.1%}",
        "complete",
    )
    # The work outside the model: the loss's sum (2 x 4 elements) in forward.
    assert outside == total - report["by_module"]["Sequential"] == 8
    forward, backward = report["by_phase"]["forward"]["value"], report["by_phase"]["backward"]["value"]
    assert table.splitlines()[-1] == (
        f"Phases: forward {forward:,} ({forward / total:.1%}), backward {backward:,} ({backward / total:.1%})"
    )


def test_count_flops_reports_give_the_same_tables():
    model, x = net(), torch.randn(2, 8)
    measured = torchscan.measure_flops(lambda: training_step(model, x))
    model.zero_grad(set_to_none=True)  # the same step: no gradient accumulated into the first's
    with torchscan.count_flops() as counter:
        training_step(model, x)
    for by in ("module", "operator", "category"):
        assert format_flops(counter.report(), by=by) == format_flops(measured, by=by)


def test_operator_and_category_rows_sum_to_the_total():
    model, x = net(), torch.randn(2, 8)
    report = torchscan.measure_flops(lambda: training_step(model, x))
    operators = rows(format_flops(report, by="operator"))
    assert {cells[0]: (number(cells[1]), number(cells[2])) for cells in operators} == {
        op: (report["operator_calls"][op], flops) for op, flops in report["by_operator"].items()
    }
    assert [number(cells[2]) for cells in operators] == sorted((number(c[2]) for c in operators), reverse=True)
    categories = rows(format_flops(report, by="category"))
    assert sum(number(cells[1]) for cells in categories) == report["total"]["value"]


def test_max_depth_and_max_width():
    model, x = net(), torch.randn(2, 8)
    report = torchscan.measure_flops(lambda: model(x))
    assert [r[0] for r in rows(format_flops(report, max_depth=0))] == ["Sequential"]
    assert [r[0] for r in rows(format_flops(report, max_depth=1))] == ["Sequential", "0", "1", "2"]
    report = torchscan.measure_flops(lambda: training_step(model, x))
    # Calls, FLOPs and Share take 5 + 5 + 5 columns and three 2-column margins: 21 of the 36,
    # 15 for the names (aten._softmax_backward_data has 27).
    narrow = format_flops(report, by="operator", max_width=36)
    assert all(len(line) <= 36 for line in narrow.splitlines()[1:-1]), narrow
    assert "\naten._soft[...]  " in narrow


def test_a_partial_count_says_so():
    def unknown(x):
        return x * 2

    lib = torch.library.Library("flopstable_test", "FRAGMENT")
    lib.define("opaque(Tensor x) -> Tensor")
    lib.impl("opaque", unknown, "CPU")
    x = torch.randn(3, 4)
    report = torchscan.measure_flops(lambda: torch.ops.flopstable_test.opaque(torch.mm(x, x.T)))
    assert report["total"]["status"] == "partial"
    table = format_flops(report, by="operator")
    assert table.splitlines()[0] == f"Total: at least {report['total']['known_value']:,} FLOPs (partial)"
    assert table.splitlines()[-1].startswith(f"Not complete: {len(report['diagnostics'])} diagnostic(s)")


def test_control_characters_in_names_are_escaped():
    model = nn.ModuleDict({"evil\x1b[2J": nn.Linear(4, 4)})
    x = torch.randn(1, 4)
    report = torchscan.measure_flops(lambda: model["evil\x1b[2J"](x), modules=model)
    table = format_flops(report)
    assert "\x1b" not in table
    assert "evil\\x1b[2J" in table


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"by": "layer"}, ValueError, "by must be 'module', 'operator' or 'category', got 'layer'"),
        ({"by": 3}, ValueError, "got a int"),
        ({"max_width": 0}, ValueError, "max_width must be a positive integer or None, got 0"),
        ({"max_depth": "2"}, TypeError, "max_depth must be an integer, got str"),
        ({"max_depth": -1}, ValueError, "max_depth must be non-negative, got -1"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    report = torchscan.measure_flops(lambda: torch.mm(torch.randn(2, 2), torch.randn(2, 2)))
    with pytest.raises(error, match=message.replace("[", r"\[").replace("(", r"\(")):
        format_flops(report, **kwargs)


def test_other_reports_are_refused_with_a_hint():
    report = torchscan.crawl_module(nn.Linear(4, 2), (4,))
    with pytest.raises(ValueError, match=r"pass report\['operator_flops'\]"):
        format_flops(report)
    # Linear(4, 2) on one row: 2*4*2 = 16, plus 2 bias adds
    assert format_flops(report["operator_flops"]).startswith("Total: 18 FLOPs (complete)")
    with pytest.raises(ValueError, match="does not match the FlopReport schema"):
        format_flops({"total": 1})
    with pytest.raises(ValueError, match="must be a FlopReport"):
        format_flops([1, 2])


def test_the_cli_prints_the_table_after_the_summary(tmp_path):
    env = dict(os.environ, COLUMNS="100")
    result = subprocess.run(
        [str(SCRIPT), "--flops-by", "module", "--max-depth", "1"], capture_output=True, text=True, env=env, check=True
    )
    tail = result.stdout.split("Operator FLOPs by module:\n", 1)[1].splitlines()
    assert tail[0].startswith("Total: ") and tail[0].endswith(" FLOPs (complete)")
    # Siblings in call order (the features run before the classifier), not alphabetically.
    assert [line.split()[0] for line in tail[3:-1]] == ["ExampleNet", "features", "classifier"]
    bad = subprocess.run(
        [str(SCRIPT), "--flops-by", "module", "--mode", "structure"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "--mode structure counts no operator FLOPs" in bad.stderr
