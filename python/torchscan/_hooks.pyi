# Type stub for the C extension python/torchscan/_hooks.c (the module hooks' native fast path).
from collections.abc import Callable
from typing import Any

from torch import nn

def pre(module: nn.Module, args: Any, /) -> None: ...
def post(module: nn.Module, /, *rest: Any) -> None: ...
def name_tree(session: int, root: nn.Module, label: str, /) -> dict[int, nn.Module]: ...
def bind(
    table: list[int],
    name_unnamed: Callable[[int, nn.Module], bool],
    module_type: type[nn.Module],
    escape_name: Callable[[str], str],
    /,
) -> None: ...
