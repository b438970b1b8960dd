"""Reports parsed from the core's JSON without the cyclic collector running meanwhile.

A report's JSON becomes many dicts and lists at once (a resnet50 AnalysisReport: about 20,000).
Each of them counts toward the collector's next pass while the parse runs, and the passes that
run mid-parse find them all alive: they are promoted toward the oldest generation, whose
growth triggers full collections of the whole process (every object torch, the model and the
user's code hold: some 300,000 objects, tens of milliseconds each). Parsed with the collector
paused, they stay young: a report the caller drops is freed by reference counting and never
seen by the collector; one the caller keeps is collected like any of its own data
(`benches/crawl_collector.py`: half the collector's time per mobilenet_v3_small crawl).
"""

from __future__ import annotations

import gc
import json
from typing import Any

__all__ = ["parse_report"]

# Below this size a parse creates too few containers to trigger a pass worth avoiding.
_PAUSE_FROM = 32 * 1024


def parse_report(text: str) -> Any:
    """``json.loads(text)``, with the cyclic collector paused for a large text.

    The collector is a process-wide switch: it is turned back on only if it was on, so a
    caller that disabled it keeps it disabled (another thread that disables it during the parse
    finds it on again afterwards: the price of a switch with no owner)."""
    if len(text) < _PAUSE_FROM or not gc.isenabled():
        return json.loads(text)
    gc.disable()
    try:
        return json.loads(text)
    finally:
        gc.enable()
