# Type stub for the C extension python/torchscan/_wire.c (compare_reports' input encoder).
from typing import Any

def encode(report: Any, /) -> str | None: ...
