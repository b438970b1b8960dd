"""The HTML report (`torchscan --html`, `utils.format_html`): one self-contained page whose
numbers are the report's, rendered in headless Chromium without a console message."""

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torchvision
from torch import nn

import torchscan
from torchscan.utils import format_html

SCRIPT = Path(sys.executable).parent / "torchscan"
HERE = Path(__file__).resolve().parent
BERT = ["transformers:BertConfig", "--kw", "num_hidden_layers=2", "--kw", "hidden_size=32", "--kw",
        "num_attention_heads=2", "--kw", "intermediate_size=64", "--kw", "vocab_size=100"]  # fmt: skip


class Page(HTMLParser):
    """The page's numbers: totals, categories, icicle boxes and listed layers by their data-*
    attributes, the embedded report, and every URL-bearing attribute."""

    def __init__(self, text):
        super().__init__()
        self.totals, self.categories, self.boxes, self.layers, self.urls = {}, {}, [], {}, []
        self.calls, self.hidden, self.phases, self.memory, self.total_order = {}, set(), {}, {}, []
        self.row, self.embedded, self.in_embedded, self.ready = None, "", False, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.urls += [attrs[key] for key in ("src", "href") if key in attrs]
        if tag == "body":
            self.ready = attrs.get("data-ready")
        if tag == "tr":
            self.row = next(((kind, attrs[f"data-{kind}"]) for kind in ("total", "category", "layer", "phase", "memory")
                             if f"data-{kind}" in attrs), None)  # fmt: skip
            if "data-row" in attrs:
                call = attrs["data-call"]
                self.row = ("call", (attrs["data-row"], None if call == "-" else int(call)))
                if "hidden" in (attrs.get("class") or "").split():
                    self.hidden.add(self.row[1])
            if self.row is not None and self.row[0] == "total":
                self.total_order.append(self.row[1])
        if tag == "td" and "data-value" in attrs and self.row is not None:
            kind, name = self.row
            found = {"total": self.totals, "category": self.categories, "layer": self.layers, "call": self.calls,
                     "phase": self.phases, "memory": self.memory}  # fmt: skip
            found[kind][name] = attrs["data-value"]
        if tag == "rect" and "data-path" in attrs:
            self.boxes.append(attrs)
        if tag == "script" and attrs.get("id") == "torchscan-report":
            self.in_embedded = True

    def handle_endtag(self, tag):
        self.in_embedded = self.in_embedded and tag != "script"

    def handle_data(self, data):
        if self.in_embedded:
            self.embedded += data


def check_numbers(page, report):
    """Every number on the page equals the report's."""
    for name, metric in report["totals"].items():
        value = metric["value"] if metric["status"] == "complete" else metric["known_value"]
        assert page.totals[name] == ("" if value is None else str(value)), name
    assert page.categories == {k: str(v) for k, v in report["operator_flops"]["by_category"].items()}
    by_path = {layer["path"]: layer for layer in report["layers"] if layer["call_index"] == 0}
    root = page.boxes[0]
    assert root["data-value"] == str(report["totals"]["operator_flops"]["value"])
    for box in page.boxes[1:]:
        path = box["data-path"]
        if path in by_path:
            assert box["data-value"] == str(by_path[path]["metrics"]["operator_flops"]["value"]), path
            continue
        # A container never called itself (BERT's encoder.layer, a ModuleList) is a box holding
        # the calls directly under it.
        assert box["data-type"] == "container, not called itself", path
        inside = [layer for layer in report["layers"] if layer["path"].rpartition(".")[0] == path]
        assert inside and box["data-value"] == str(sum(layer["metrics"]["operator_flops"]["value"] for layer in inside))
    for path, value in page.layers.items():
        assert value == str(by_path[path]["metrics"]["operator_flops"]["value"]), path
    # Every layer call is a row of the full table (the module tree's rows: the calls, and each
    # container never called itself, holding the calls under it).
    calls = [(layer["path"], layer["call_index"]) for layer in report["layers"]]
    assert sorted(call for call in page.calls if call[1] is not None) == sorted(calls)
    for layer in report["layers"]:
        assert page.calls[layer["path"], layer["call_index"]] == str(layer["metrics"]["operator_flops"]["value"])
    for (path, call), value in page.calls.items():
        if call is None:
            inside = [layer for layer in report["layers"] if layer["path"].rpartition(".")[0] == path]
            assert inside and value == str(sum(layer["metrics"]["operator_flops"]["value"] for layer in inside))
    assert json.loads(page.embedded) == report


def test_the_page_holds_the_report_numbers_and_nothing_to_fetch():
    model = torchvision.models.resnet18()
    report = torchscan.crawl_module(model, (3, 32, 32))
    text = format_html(report)
    page = Page(text)
    check_numbers(page, report)
    # Every module call with FLOPs is a box: conv1, bn1, relu, maxpool, 4 layers of 2 blocks
    # (each 5 or 7 calls deep), avgpool, fc and the root.
    assert len(page.boxes) == sum(1 for layer in report["layers"] if layer["metrics"]["operator_flops"]["value"])
    assert page.urls == []
    # No URL outside the SVG namespace: nothing is fetched when the page is viewed.
    assert re.findall(r"https?://[^\"' ]+", text) == ["http://www.w3.org/2000/svg"]
    assert "url(" not in text and "@import" not in text


def test_human_units_totals_order_and_shading():
    from torchscan.html_report import human

    assert [human(v) for v in (0, 999, 1_000, 8_224_000_000, 999_600, 1_234_567_890_123)] == [
        "0 FLOPs", "999 FLOPs", "1 KFLOPs", "8.22 GFLOPs", "1 MFLOPs", "1.23 TFLOPs",
    ]  # fmt: skip
    assert human(46_800_000, "B") == "46.8 MB"
    model = torchvision.models.resnet18()
    report = torchscan.crawl_module(model, (3, 32, 32))
    text = format_html(report)
    page = Page(text)
    # The command's order: size first, then compute (not alphabetical: buffer_bytes was first).
    assert page.total_order[:6] == ["parameters", "trainable_parameters", "frozen_parameters", "parameter_bytes",
                                    "buffer_elements", "buffer_bytes"]  # fmt: skip
    assert page.total_order.index("operator_flops") > page.total_order.index("module_flops")
    # resnet18 on 32x32: 37,228,544... operator FLOPs, read as MFLOPs in the headline and the totals.
    flops = report["totals"]["operator_flops"]["value"]
    assert f">{human(flops)}</b>" in text and human(flops).endswith(" MFLOPs")
    assert "11.7 M elements" in text  # 11,689,512 parameters
    # Everything is complete, and colour still says something: the boxes are shaded by share,
    # the root (all the FLOPs) darkest, and boxes of different shares differ.
    fills = {box["data-path"]: box.get("style") for box in page.boxes}
    assert fills["ResNet"] == "fill:hsl(212, 60%, 38.0%)"
    assert len(set(fills.values())) > 5
    # Boxes below block level are labelled where the name fits (layer1.0.conv1 is "conv1").
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", text)
    assert any(label.startswith("conv1") for label in labels) and len(labels) > 20


def test_the_training_step_and_memory_are_on_the_page(tmp_path):
    page_path, json_path = tmp_path / "linear.html", tmp_path / "linear.json"
    args = ["torch.nn:Linear", "--kw", "in_features=4", "--kw", "out_features=3", "--input", "float32:4",
            "--batch-size", "2", "--train", "--optimizer", "sgd", "--memory"]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([str(SCRIPT), *args, "--html", str(page_path), "--json", str(json_path)],
                            capture_output=True, text=True, cwd=tmp_path, env=env, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    page = Page(page_path.read_text())
    # The hand-computed step (tests/python/test_optimizer_phase.py): 60 + 54 + 15.
    assert page.phases == {"forward": "60", "backward": "54", "optimizer": "15", "total": "129"}
    report = json.loads(json_path.read_text())
    assert page.memory == {
        "forward": "24",
        "training step": str(report["training"]["memory"]["delta_bytes"]),
    }
    assert "optimizer step (sgd)" in page_path.read_text()


def test_hostile_names_are_escaped():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("</script><img src=x onerror=alert(1)>", nn.Linear(4, 4))

        def forward(self, x):
            return next(iter(self.children()))(x)

    report = torchscan.crawl_module(Net(), (4,))
    text = format_html(report)
    assert "<img" not in text and "</script><" not in text.split("<script", 1)[0]
    page = Page(text)
    assert page.urls == []
    assert json.loads(page.embedded) == report
    with pytest.raises(TypeError, match="format_html needs an AnalysisReport"):
        format_html([1, 2])


# ---- in headless Chromium ----


def chromium():
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("TORCHSCAN_REQUIRE_CHROMIUM"):
            pytest.fail("TORCHSCAN_REQUIRE_CHROMIUM is set but no chromium is on PATH")
        pytest.skip("headless Chromium is not installed (apt-get install chromium; .ci/run installs it)")
    return found


def render(page, *extra, _hash=""):
    """Chromium's DOM of `page` (opened at `#_hash` when given) after its scripts ran, and the
    console messages it logged. Name resolution is off: a page that tried to fetch anything
    would fail to."""
    address = page.as_uri() + (f"#{_hash}" if _hash else "")
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
               "--host-resolver-rules=MAP * ~NOTFOUND", *extra, address]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return result.stdout, console


def test_the_console_check_sees_errors(tmp_path):
    # The check below can fail: a page with a script error is caught by it.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>missingFunction();</script></body></html>")
    _, console = render(bad, "--dump-dom")
    assert any("missingFunction is not defined" in line for line in console), console


@pytest.mark.parametrize("model", ["resnet18", "bert"])
def test_the_cli_page_renders_in_chromium_with_the_json_numbers(tmp_path, model):
    args = (["torchvision.models:resnet18", "--input-shape", "3,64,64"] if model == "resnet18"
            else [*BERT, "--input", "input_ids:int64:16"])  # fmt: skip
    page_path, json_path = tmp_path / f"{model}.html", tmp_path / f"{model}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [str(SCRIPT), *args, "--html", str(page_path), "--json", str(json_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(json_path.read_text())
    dom, console = render(page_path, "--dump-dom")
    assert console == []
    page = Page(dom)
    check_numbers(page, report)
    # The script ran to its end: it counted the boxes it made clickable.
    assert page.ready == str(len(page.boxes)) and len(page.boxes) > 10
    # The search box: a filter in the address hides every other layer call.
    word = "layer1" if model == "resnet18" else "attention"
    filtered, console = render(Path(f"{page_path}"), "--dump-dom", _hash=word)
    assert console == []
    hidden = Page(filtered).hidden
    shown = [call for call in page.calls if call not in hidden]
    assert shown and all(word in call[0].lower() for call in shown)
    assert len(hidden) == len(page.calls) - len(shown)
    shot = tmp_path / f"{model}.png"
    render(page_path, f"--screenshot={shot}", "--window-size=1200,900", "--hide-scrollbars")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_html_usage_errors(tmp_path):
    from torchscan import cli

    assert cli.main(["--html", "-"]) == 2
    assert cli.main(["--html", str(tmp_path / "x.html"), "--mode", "structure"]) == 2
    assert cli.main(["--html", str(tmp_path / "missing" / "x.html")]) == 2
