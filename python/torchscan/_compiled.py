"""torch.compile's inductor backend: compiled graphs priced once, counted each time they run.

Inductor turns pointwise, reduction, normalization and pooling work into generated kernels that
never pass the dispatcher, so no RecordFunction event reports them. torchscan prices each graph
when inductor compiles it instead:

- ``compile_fx`` (inductor's entry point) is wrapped. Before inductor compiles a Dynamo graph,
  AOTAutograd traces it once more without inductor's decompositions and with the default
  partition (no recomputation): the forward and backward (or inference) ATen graphs that eager
  mode would run, with each node's module (``nn_module_stack``, and ``fwd_nn_module_stack`` for
  backward nodes). Each graph is replayed on the meta device in a recording session, with the
  node's module path as scope, and kept natively as a priced graph (``src/priced.rs``).
- The graphs inductor compiles (``CompiledFxGraph``) are tagged with the priced graph of the same
  kind (forward, backward, inference). Each run is bracketed by ``torchscan.compiled_begin`` and
  ``torchscan.compiled_end(graph, completed)``: sessions observing the thread count nothing the
  run dispatches, and the end adds the graph's price (operators, categories, phase, and module
  labels below the module call that ran it) when the run completed.
- A graph that cannot be priced (dynamic shapes, an operator with no meta kernel, a tracing
  failure), or one compiled by another path (AOTInductor, a cache entry loaded without
  compiling), is marked by one ``torchscan.inductor_graph`` event per run instead, which sessions
  report as uncounted compiled code (``uncounted_compiled_code``): the total is ``partial``, never
  a silent undercount.

The tracing torch.compile does on fake tensors is not counted (the observer recognises
fake-tensor propagation), and the pricing replay runs with every observing session suppressed.
Both wrappers are installed when their inductor modules are imported (now, or later through an
import hook), so that graphs compiled before a measurement started are priced too.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import re
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from ._native import ops

_OUTPUT_CODE = "torch._inductor.output_code"
_COMPILE_FX = "torch._inductor.compile_fx"
_WRAPPED = "__torchscan_wrapped__"
_GRAPH = "_torchscan_priced_graph"
_lock = threading.Lock()
_local = threading.local()
_log = logging.getLogger("torchscan")


# Runs: begin/end around priced graphs, the uncounted mark around the others.


def _count_runs(call: Callable[[Any, Sequence[Any]], Any]) -> Callable[[Any, Sequence[Any]], Any]:
    mark = ops.inductor_graph.default
    begin = ops.compiled_begin.default
    end = ops.compiled_end.default

    @functools.wraps(call)
    def __call__(self: Any, inputs: Sequence[Any]) -> Any:
        graph = getattr(self, _GRAPH, None)
        if graph is None:
            mark()
            return call(self, inputs)
        begin()
        completed = False
        try:
            result = call(self, inputs)
            completed = True
            return result
        finally:
            end(graph, completed)

    setattr(__call__, _WRAPPED, True)
    return __call__


def _wrap_output_code(module: ModuleType) -> None:
    for name in ("CompiledFxGraph", "CompiledAOTI"):
        cls = getattr(module, name, None)
        call = vars(cls).get("__call__") if isinstance(cls, type) else None
        if call is not None and not getattr(call, _WRAPPED, False):
            cls.__call__ = _count_runs(call)  # type: ignore[method-assign]


# Compilation: price the graph, then tag what inductor compiles from it.


def _wrap_compile_fx(module: ModuleType) -> None:
    original = getattr(module, "compile_fx", None)
    if original is None or getattr(original, _WRAPPED, False):
        return
    signature = inspect.signature(original)
    default_inner = signature.parameters["inner_compile"].default

    @functools.wraps(original)
    def compile_fx(*args: Any, **kwargs: Any) -> Any:
        if getattr(_local, "compiling", False):
            return original(*args, **kwargs)  # inductor's own recursive call: already tagged
        bound = signature.bind(*args, **kwargs)
        graphs = _price(bound.arguments["model_"], bound.arguments["example_inputs_"])
        if graphs is None:
            return original(*args, **kwargs)
        inner = bound.arguments.get("inner_compile", default_inner)
        bound.arguments["inner_compile"] = _tagging(inner, graphs)
        _local.compiling = True
        try:
            # AOTAutograd's cache would load compiled graphs without calling inner_compile.
            with torch._functorch.config.patch(enable_autograd_cache=False):
                return original(*bound.args, **bound.kwargs)
        finally:
            _local.compiling = False

    setattr(compile_fx, _WRAPPED, True)
    module.compile_fx = compile_fx  # type: ignore[attr-defined]


def _tagging(inner: Callable[..., Any], graphs: dict[str, int]) -> Callable[..., Any]:
    """inductor's inner compile, tagging each compiled graph with the priced graph of its kind."""

    @functools.wraps(inner)
    def inner_compile(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        compiled = inner(gm, example_inputs, **kwargs)
        kind = "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"
        graph = graphs.get(kind)
        if graph is not None:
            try:
                setattr(compiled, _GRAPH, graph)
            except (AttributeError, TypeError):
                pass  # not a CompiledFxGraph: its runs are not priced (nor marked)
        return compiled

    return inner_compile


def _price(gm: Any, example_inputs: Sequence[Any]) -> dict[str, int] | None:
    """{kind: priced graph id} for the Dynamo graph `gm`; None when it cannot be priced."""
    try:
        traced = _trace(gm, example_inputs)
        if "joint" in traced:
            joint = traced["joint"]
            return {"forward": _record(joint, "forward"), "backward": _record(joint, "backward")}
        return {"inference": _record(traced["inference"], "forward")}
    except Exception as error:  # the graph's runs are reported as uncounted compiled code
        _log.debug("torchscan: a compiled graph could not be priced: %r", error)
        return None


def _trace(gm: Any, example_inputs: Sequence[Any]) -> dict[str, torch.fx.GraphModule]:
    """The ATen graph eager mode runs for `gm`: AOTAutograd's trace without decompositions,
    {"joint": forward and backward} or {"inference"}. The joint graph is priced as traced, not as
    a partitioner splits it (a partitioner may recompute forward work in the backward graph)."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import default_partition

    captured: dict[str, torch.fx.GraphModule] = {}

    def partition(joint: torch.fx.GraphModule, inputs: Any, **kwargs: Any) -> Any:
        captured["joint"] = joint
        return default_partition(joint, inputs, **kwargs)

    def inference(graph: torch.fx.GraphModule, inputs: Any) -> Any:
        captured["inference"] = graph
        return make_boxed_func(graph.forward)

    def nop(graph: torch.fx.GraphModule, inputs: Any) -> Any:
        return make_boxed_func(graph.forward)

    with torch._guards.tracing(None), torch._functorch.config.patch(enable_autograd_cache=False):
        aot_module_simplified(
            gm,
            list(example_inputs),
            fw_compiler=nop,
            bw_compiler=nop,
            inference_compiler=inference,
            partition_fn=partition,
            decompositions={},
        )
    if not captured:
        raise RuntimeError("AOTAutograd produced no graph")
    return captured


def _record(graph: torch.fx.GraphModule, side: str) -> int:
    """Replays `graph` on the meta device in a recording session that counts the nodes of one
    `side` ("forward" or "backward"); the priced graph's id. Every session observing this
    thread is suppressed meanwhile: the replay is not the workload's."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # Compilation may run under a fake-tensor mode, which would answer the markers itself.
    with unset_fake_temporarily(), torch.no_grad():
        ops.compiled_begin()
        try:
            inputs = [_meta(node.meta.get("val")) for node in graph.graph.nodes if node.op == "placeholder"]
            handle = ops.open_session("")
            try:
                _Replay(graph, handle, side).run(*inputs)
            except BaseException:
                ops.discard_session(handle)
                raise
            return int(ops.price_session(handle))
        finally:
            ops.compiled_end(-1, False)


def _meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided:
            raise ValueError(f"a {value.layout} input cannot be replayed on the meta device")
        shape = [_concrete(s) for s in value.shape]
        stride = [_concrete(s) for s in value.stride()]
        return torch.empty_strided(shape, stride, dtype=value.dtype, device="meta")
    return _concrete(value) if isinstance(value, torch.SymInt) else value


def _concrete(value: Any) -> int:
    if isinstance(value, torch.SymInt):
        # A dynamic size: one price would not fit every run.
        raise ValueError(f"dynamic size {value}")
    return int(value)


def _sides(graph: torch.fx.Graph) -> dict[torch.fx.Node, str]:
    """Each node's side of a joint graph as AOTAutograd's default partition places them: up to
    the last node traced in forward, forward (tangents aside); after it, backward. A graph
    without backward tags (an inference graph) is all forward."""
    nodes = list(graph.nodes)
    last = max((i for i, n in enumerate(nodes) if n.meta.get("partitioner_tag") == "is_forward"), default=None)
    if last is None or not any(n.meta.get("partitioner_tag") == "is_backward" for n in nodes):
        return dict.fromkeys(nodes, "forward")
    return {
        n: "forward" if i <= last and not n.name.startswith("tangents") else "backward" for i, n in enumerate(nodes)
    }


class _Replay(torch.fx.Interpreter):
    """Runs a graph's nodes on meta tensors, each inside its module's scope; the other side's
    nodes run with counting suppressed."""

    def __init__(self, graph: torch.fx.GraphModule, handle: int, side: str) -> None:
        super().__init__(graph)
        self._handle = handle
        self._side = side
        self._sides = _sides(graph.graph)
        self._labels: dict[torch.fx.Node, list[str]] = {}
        self._order = {node: i for i, node in enumerate(graph.graph.nodes)}

    def run_node(self, n: torch.fx.Node) -> Any:
        if self._sides[n] != self._side:
            ops.compiled_begin()
            try:
                return super().run_node(n)
            finally:
                ops.compiled_end(-1, False)
        labels = self._labels_of(n)
        for label in labels:
            ops.push_scope(self._handle, label)
        try:
            return super().run_node(n)
        finally:
            for _ in labels:
                ops.pop_scope(self._handle)

    def _labels_of(self, n: torch.fx.Node) -> list[str]:
        labels = _module_labels(n)
        if not labels and self._side == "backward":
            # Backward work of no module (the sum of two gradients of one tensor): eager mode's
            # engine does it after the node that produced the later gradient, and gives it that
            # node's module. That is the input computed last here.
            later = [a for a in n.all_input_nodes if self._sides.get(a) == "backward" and a in self._labels]
            if later:
                labels = self._labels[max(later, key=self._order.__getitem__)]
        self._labels[n] = labels
        return labels

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor) and value.device.type != "meta":
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        return value


# The compiled frame's own module: the wrapped module of torch.compile(module) (`fn` when Dynamo
# traces its whole call, global hooks included), or the `self` of its compiled forward (or of a
# graph-break resume inside a submodule's call).
_FRAME_MODULES = ("L['fn']", "L['self']")
_ITEM = re.compile(r"\[(?:'([^']*)'|\"([^\"]*)\"|(\d+))\]")


def _module_labels(n: torch.fx.Node) -> list[str]:
    """The node's modules below the compiled frame's module, as labels relative to it (``2``,
    ``2.0``): the suffixes eager mode's labels have below the label of the module that ran the
    graph. Modules the frame reached otherwise (an argument of a compiled function) get none."""
    stack = n.meta.get("nn_module_stack") or n.meta.get("fwd_nn_module_stack")
    if not stack:
        return []
    labels = []
    for entry in stack.values():
        path = entry[0] if isinstance(entry, tuple) and entry else None
        root = next((r for r in _FRAME_MODULES if isinstance(path, str) and path.startswith(r)), None)
        if path is None or root is None:
            break  # a module the frame did not reach through its own: no label below it
        relative = _ITEM.sub(lambda m: "." + next(g for g in m.groups() if g is not None), path[len(root) :])
        relative = relative.replace("._modules.", ".").lstrip(".")
        if relative:  # the frame's module itself is the base label
            labels.append(relative)
    return labels


# Installation, now or when inductor is first imported.

_WRAPPERS: dict[str, Callable[[ModuleType], None]] = {_OUTPUT_CODE: _wrap_output_code, _COMPILE_FX: _wrap_compile_fx}


def _wrap(name: str, module: ModuleType) -> None:
    with _lock:
        _WRAPPERS[name](module)


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Wraps the inductor functions right after their module is first executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _WRAPPERS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_and_wrap(module: ModuleType) -> None:
            exec_module(module)
            _wrap(fullname, module)

        loader.exec_module = exec_and_wrap  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Prices and counts inductor graphs from now on (idempotent)."""
    pending = False
    for name in _WRAPPERS:
        module = sys.modules.get(name)
        if module is not None:
            _wrap(name, module)
        else:
            pending = True
    if pending and not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())
