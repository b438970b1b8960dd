"""One report of a ``torch.distributed`` job: each rank counts itself (its FLOPs, and the bytes
of its collectives), one merge makes a report of them all.

``merge_reports`` merges reports already at hand (or files written per rank); ``gather_reports``
gathers every rank's report over the process group first. ``torchscan merge rank*.json`` does
the same from the command line. See docs/distributed.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from ._native import ops
from ._parse import parse_report
from .report import FlopReport, MergedReport, ThroughputReport

__all__ = ["gather_reports", "merge_reports", "process_context"]

ReportSource = Mapping[str, Any] | str | os.PathLike[str]


def process_context() -> dict[str, Any] | None:
    """This process's place in an initialized ``torch.distributed`` job (its rank, the world
    size, the default group's backend), or None outside one: what a FlopReport's
    ``context.distributed`` says."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": str(dist.get_backend())}


def _load(source: object, what: str, index: int) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except OSError as error:
            raise ValueError(f"{what}[{index}]: cannot read {str(path)!r} ({error.strerror or error})") from None
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            raise ValueError(f"{what}[{index}]: {str(path)!r} is not a JSON report ({error})") from None
        if not isinstance(loaded, dict):
            raise TypeError(f"{what}[{index}]: {str(path)!r} holds a {type(loaded).__name__}, not a report")
        return loaded
    raise TypeError(
        f"{what}[{index}] must be a report (a dict) or the path of a JSON file, got {type(source).__name__}"
    )


def _sources(value: object, what: str) -> list[Mapping[str, Any]]:
    if isinstance(value, (str, bytes, os.PathLike, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(f"{what} must be a list of reports or paths, got {type(value).__name__}")
    return [_load(item, what, i) for i, item in enumerate(value)]


def merge_reports(
    reports: Sequence[FlopReport | ReportSource],
    throughput: Sequence[ThroughputReport | ReportSource] | None = None,
) -> MergedReport:
    """Merges the FlopReports of a job's ranks into one MergedReport.

    ``reports``: one FlopReport per rank (dicts, or paths of the JSON files each rank wrote), in
    any order: each names its rank in ``context.distributed`` (reports measured outside
    ``torch.distributed`` have none and are taken in the order given). ``throughput``: each
    rank's ``Throughput(...).report()``, in the same order, for the job's FLOP rate, MFU and
    slowest rank. Sums follow the status rules of every metric (any partial rank makes the
    merged total partial). Raises ValueError for a missing or repeated rank, reports of
    different jobs, or a file that is not a report; TypeError for other inputs.
    """
    payload: dict[str, Any] = {"reports": _sources(reports, "reports")}
    if throughput is not None:
        payload["throughput"] = _sources(throughput, "throughput")
    return cast(MergedReport, parse_report(ops.merge_reports(json.dumps(payload))))


def gather_reports(
    report: FlopReport,
    throughput: ThroughputReport | None = None,
) -> MergedReport:
    """Gathers every rank's ``report`` (and ``throughput``, if every rank gives one) over the
    default process group and returns the MergedReport, on every rank.

    A collective: every rank must call it, like ``torch.distributed.all_gather_object``, which
    it uses (the reports travel as JSON text).
    Call it after the measurement: its own traffic is not counted. Raises RuntimeError outside
    an initialized process group.
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("gather_reports needs an initialized torch.distributed process group")
    if not isinstance(report, Mapping):
        raise TypeError(f"report must be a FlopReport (a dict), got {type(report).__name__}")
    if throughput is not None and not isinstance(throughput, Mapping):
        raise TypeError(f"throughput must be a ThroughputReport (a dict) or None, got {type(throughput).__name__}")
    mine = json.dumps({"report": report, "throughput": throughput})
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    parts = [parse_report(text) for text in gathered]
    timed = [p["throughput"] for p in parts]
    given = [t for t in timed if t is not None]
    if given and len(given) != len(timed):
        raise ValueError("some ranks gave a ThroughputReport and others did not: give one on every rank, or none")
    return merge_reports([p["report"] for p in parts], timed if given else None)
