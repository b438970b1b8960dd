"""A safe first contact (issue 44): summary()/crawl_module turn the common input mistakes into
the command's hints (the contract's error types unchanged), `make demo` says what it builds,
and docs/cpp.md names the library where the build puts it."""

import re
import subprocess
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

import torchscan

ROOT = Path(__file__).resolve().parents[2]


class Tokens(nn.Module):
    """A tiny language model: token ids -> embeddings -> logits."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10)

    def forward(self, ids):
        return self.head(self.embed(ids))


def notes(error):
    return "\n".join(getattr(error.value, "__notes__", []))


def test_float_token_ids_get_the_dtype_hint(capsys):
    with pytest.raises(RuntimeError, match="indices") as error:
        torchscan.summary(Tokens(), (8,))
    assert "the model seems to take integer inputs (token ids): give dtype=torch.int64 with input_shape" in notes(error)
    with pytest.raises(RuntimeError) as given:
        torchscan.crawl_module(Tokens(), args=(torch.zeros(1, 8),))
    assert "give args=(ids,) with integer (int64) ids" in notes(given)
    # The hint's fix works.
    report = torchscan.crawl_module(Tokens(), (8,), dtype=torch.int64)
    assert report["inputs"]["args"][0]["dtype"] == "torch.int64"


def test_a_shape_without_channels_gets_the_batch_hint():
    with pytest.raises(RuntimeError, match="to have 3 channels, but got 1 channels") as error:
        torchscan.summary(torchvision.models.resnet18(), (224, 224))
    text = notes(error)
    assert "the generated inputs were (1, 224, 224)" in text
    assert "each input_shape is given without the batch dimension, which crawl_module (a batch of 1) adds" in text
    assert "(3, 224, 224) rather than (1, 3, 224, 224)" in text


def test_a_tensor_for_input_shape_says_args():
    with pytest.raises(TypeError, match=r"got Tensor\. To analyse a forward on given tensors, pass them as args="):
        torchscan.summary(nn.Linear(2, 2), torch.zeros(1, 2))


def test_a_forward_error_without_a_known_mistake_has_no_note():
    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("my own error")

    with pytest.raises(ValueError, match="my own error") as error:
        torchscan.crawl_module(Fails(), (2,))
    assert not getattr(error.value, "__notes__", [])


def test_make_demo_says_what_it_builds_before_building():
    result = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    announce = next(i for i, line in enumerate(lines) if "building torchscan's native library" in line)
    build = next(i for i, line in enumerate(lines) if "pip install -q --no-build-isolation" in line)
    assert announce < build
    assert "about 4 minutes" in lines[announce]


def test_docs_cpp_names_where_the_builds_put_the_library():
    text = (ROOT / "docs" / "cpp.md").read_text()
    setup = (ROOT / "setup.py").read_text()
    # `make setup` (setup.py) builds into target/package-torch<TORCH>/; cargo's default is target/.
    assert re.search(r'"target" / f"package-torch\{TORCH\}"', setup)
    assert "target/package-torch<TORCH>/release/libtorchscan.a" in text
    assert "cargo build --release --lib   # -> target/release/libtorchscan.a" in text
    makefile = (ROOT / "examples" / "cpp" / "Makefile").read_text()
    assert "TORCHSCAN_LIB ?= $(ROOT)/target/release/libtorchscan.a" in makefile
