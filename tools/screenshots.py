"""Regenerates the HTML report's pictures in docs/img/ (`make screenshots`): the page of
`torchscan --html` for resnet18 (with --train and --memory) and a small BERT, taken in headless
Chromium (`apt-get install chromium`) as tests/python/test_html_report.py drives it.

    python tools/screenshots.py [--chromium PATH]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "img"
PAGES = {
    "html-report-resnet18.png": [
        "torchvision.models:resnet18",
        "--input-shape",
        "3,64,64",
        "--batch-size",
        "2",
        "--train",
        "--memory",
    ],
    "html-report-bert.png": [
        "transformers:BertConfig",
        "--kw",
        "num_hidden_layers=2",
        "--kw",
        "hidden_size=32",
        "--kw",
        "num_attention_heads=2",
        "--kw",
        "intermediate_size=64",
        "--kw",
        "vocab_size=100",
        "--input",
        "input_ids:int64:16",
    ],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    options = parser.parse_args()
    if not options.chromium:
        parser.error("headless Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as folder:
        for image, args in PAGES.items():
            page = Path(folder) / image.replace(".png", ".html")
            command = [sys.executable, "-m", "torchscan", *args, "--html", str(page)]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            shot = [options.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1200,1500",
                    f"--screenshot={IMAGES / image}", page.as_uri()]  # fmt: skip
            subprocess.run(shot, check=True, capture_output=True)
            print(f"wrote {(IMAGES / image).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
