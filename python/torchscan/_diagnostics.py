"""Diagnostics grouped for people: one entry per distinct (severity, code, message), with the
metrics, layer paths and operators it was reported for (in first-seen order). The command's
text and the HTML report both show them this way: a module type without formulas in 24 layers
is one entry, not 72."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Group", "group_diagnostics"]

# What each group collects, by the diagnostic field it comes from.
Group = dict[str, list[str]]


def group_diagnostics(diagnostics: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Group]:
    groups: dict[tuple[str, str, str], Group] = {}
    for d in diagnostics:
        group = groups.setdefault((d["severity"], d["code"], d["message"]), {"metric": [], "path": [], "operator": []})
        for key, seen in group.items():
            value = d.get(key)
            if isinstance(value, str) and value not in seen:
                seen.append(value)
    return groups
