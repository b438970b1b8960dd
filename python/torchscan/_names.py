"""Module paths: one path per module and one module per path, whatever its attribute names.

PyTorch joins attribute names with dots (``named_modules``), so a child registered under a name
that holds a dot (``setattr(m, "a.0", child)``) gets the path of another module (``a`` -> ``0``),
and a name with a lone surrogate (``nn.ModuleDict({"\\ud800": ...})``) cannot be written as UTF-8.
torchscan writes each name as a path component with three escapes: a backslash as ``\\\\``, a dot
as ``\\.``, a lone surrogate as ``\\udXXX``. Every other name (all of them, in practice) is
unchanged, and the escaping is injective, so two modules never share a path.
"""

from __future__ import annotations

from collections.abc import Iterator

from torch import nn

__all__ = ["escape_name", "module_aliases", "named_modules"]

_ESCAPES = {ord("\\"): "\\\\", ord("."): "\\.", **{code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)}}


def escape_name(name: str) -> str:
    """``name`` as a path component (see the module docstring)."""
    if name.isascii() and "." not in name and "\\" not in name:
        return name
    return name.translate(_ESCAPES)


def _places(root: nn.Module) -> Iterator[tuple[str, str, int, nn.Module, bool]]:
    """``(path, name, depth, module, first)`` of every place a module is registered under, as
    ``named_modules()`` walks them (depth first, ``None`` entries skipped), with escaped paths;
    ``first``: the module's first place (only there are its children walked)."""
    seen: set[int] = set()
    stack: list[tuple[str, str, int, nn.Module]] = [("", "", 0, root)]
    while stack:
        path, name, depth, module = stack.pop()
        first = id(module) not in seen
        yield path, name, depth, module, first
        if not first:
            continue
        seen.add(id(module))
        children = []
        for key, child in module._modules.items():
            if child is not None:
                component = escape_name(key)
                children.append((f"{path}.{component}" if path else component, component, depth + 1, child))
        stack.extend(reversed(children))


def named_modules(root: nn.Module) -> Iterator[tuple[str, str, int, nn.Module]]:
    """``(path, name, depth, module)`` of ``root`` and its submodules, as ``named_modules()``
    walks them (depth first, each module once, ``None`` entries skipped), with escaped paths.
    ``name`` is the escaped attribute name, the path's last component (``""`` for the root)."""
    for path, name, depth, module, first in _places(root):
        if first:
            yield path, name, depth, module


def module_aliases(root: nn.Module) -> dict[int, list[tuple[str, str, int]]]:
    """The further places of modules registered under several names: ``id(module)`` ->
    ``(path, name, depth)`` of each place after the one ``named_modules`` gives it, in the same
    walk order (an aliased module's children keep their first paths)."""
    aliases: dict[int, list[tuple[str, str, int]]] = {}
    for path, name, depth, module, first in _places(root):
        if not first:
            aliases.setdefault(id(module), []).append((path, name, depth))
    return aliases
