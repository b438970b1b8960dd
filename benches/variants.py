"""Variants the benchmarks share (imported by the scripts beside it: run them from any directory
as `python benches/NAME.py`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from unittest import mock

import torchscan


def labels_by_hooks(work: Callable[[], object]) -> None:
    """`measure_flops(work)` labelling module calls by hooks (`TORCHSCAN_MODULE_LABELS=hooks`,
    the way labels were read before labelling by frames); the environment is put back as it was."""
    with mock.patch.dict(os.environ, {"TORCHSCAN_MODULE_LABELS": "hooks"}):
        torchscan.measure_flops(work)
