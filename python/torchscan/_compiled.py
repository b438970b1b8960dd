"""torch.compile: compiled graphs priced once and counted each time they run, with module labels.

Inductor turns pointwise, reduction, normalization and pooling work into generated kernels that
never pass the dispatcher, so no RecordFunction event reports them. torchscan prices each graph
when it is compiled instead:

- ``compile_fx`` (inductor's entry point) and AOTAutograd's backend entry (``aot_eager`` and its
  variants) are wrapped. Before the backend compiles a Dynamo graph, AOTAutograd traces it once
  more without decompositions: the joint forward/backward (or inference) ATen graph eager mode
  runs, each node with its modules (``nn_module_stack``; ``fwd_nn_module_stack`` for backward
  nodes). Each side is replayed on the meta device in a recording session, every node inside its
  modules' scopes (module identities), and kept natively as a priced graph (``src/session/priced.rs``).
- The graphs the backend compiles (inductor's ``CompiledFxGraph``, aot_eager's functions) run as
  priced graphs: bracketed by ``torchscan.compiled_begin`` and ``torchscan.compiled_end(graph,
  completed)``, so that sessions observing the thread count nothing the run dispatches, and the
  end adds the graph's price (operators, categories, phase, and the labels each session gave the
  graph's modules) when the run completed.
- A graph that cannot be priced (dynamic shapes, an operator with no meta kernel, a tracing
  failure), or one compiled by another path (AOTInductor, a cache entry loaded without
  compiling), is marked by one ``torchscan.inductor_graph`` event per run instead, which sessions
  report as uncounted compiled code (``uncounted_compiled_code``): the total is ``partial``, never
  a silent undercount. (Under aot_eager an unpriced graph's operators simply count as they run.)
- The ``eager`` backend runs Dynamo's graph as Python code, whose operators count as they run;
  while a session labels modules, it runs node by node inside the nodes' module labels.

The tracing torch.compile does on fake tensors is not counted (the observer recognises
fake-tensor propagation), and the pricing replay runs with every observing session suppressed.
The wrappers are installed when their modules are imported (now, or later through an import
hook), so that graphs compiled before a measurement started are priced too.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.abc
import importlib.machinery
import inspect
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import torch

from . import _labels
from ._guards import hold
from ._native import ops

_OUTPUT_CODE = "torch._inductor.output_code"
_COMPILE_FX = "torch._inductor.compile_fx"
_AOT_AUTOGRAD = "torch._dynamo.backends.common"
_DEBUGGING_BACKENDS = "torch._dynamo.backends.debugging"
_CONVERT_FRAME = "torch._dynamo.convert_frame"
_WRAPPED = "__torchscan_wrapped__"
_GRAPH = "_torchscan_priced_graph"
_lock = threading.Lock()
_local = threading.local()
_log = logging.getLogger("torchscan")


# Runs: begin/end around priced graphs, the uncounted mark around the others.


_begin = ops.compiled_begin.default
_end = ops.compiled_end.default


def _run_priced(graph: int, call: Callable[..., Any], *args: Any) -> Any:
    """One run of a priced graph: what it dispatches is not counted one by one, its price is
    added when it completes."""
    runs = _labels.compiled_runs
    if _labels.labelling():
        _labels.name_compiled_frame(_frame_modules(graph))
    _begin()
    runs.depth = getattr(runs, "depth", 0) + 1
    completed = False
    try:
        result = call(*args)
        completed = True
        return result
    finally:
        runs.depth -= 1
        _end(graph, completed)


@contextlib.contextmanager
def _compiling() -> Iterator[None]:
    """Compilation, which is never the workload's: every session observing the thread is
    suppressed meanwhile. (The observer recognises the tracing on fake tensors by itself; this
    covers the real tensors compilation computes too, such as a factory call it folds into a
    constant, and inductor's benchmarking of the kernels it generates.)"""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # a fake-tensor mode would answer the markers itself
        _begin()
    try:
        yield
    finally:
        with unset_fake_temporarily():
            _end(-1, False)


def _count_runs(call: Callable[[Any, Sequence[Any]], Any]) -> Callable[[Any, Sequence[Any]], Any]:
    mark = ops.inductor_graph.default

    @functools.wraps(call)
    def __call__(self: Any, inputs: Sequence[Any]) -> Any:
        graph = getattr(self, _GRAPH, None)
        if graph is None:
            mark()
            return call(self, inputs)
        return _run_priced(graph, call, self, inputs)

    setattr(__call__, _WRAPPED, True)
    return __call__


def _wrap_output_code(module: ModuleType) -> None:
    for name in ("CompiledFxGraph", "CompiledAOTI"):
        cls = getattr(module, name, None)
        call = vars(cls).get("__call__") if isinstance(cls, type) else None
        if call is not None and not getattr(call, _WRAPPED, False):
            owner: Any = cls  # a class of inductor's, patched in place
            owner.__call__ = _count_runs(call)


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
        with _compiling():
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


def _wrap_aot_autograd(module: ModuleType) -> None:
    """AOTAutograd-based backends other than inductor (``aot_eager`` and its variants): the graph
    is priced as for inductor, and each compiled forward, backward or inference function runs as
    a priced graph, so that the modules inside the compiled region are labelled."""
    cls = getattr(module, "AotAutograd", None)
    original = vars(cls).get("__call__") if isinstance(cls, type) else None
    if original is None or getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def __call__(self: Any, gm: Any, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        if (
            getattr(_local, "compiling", False)
            or type(self.kwargs.get("fw_compiler")).__name__ == "SerializableAOTDispatchCompiler"
            or any(isinstance(x, (list, tuple, dict)) for x in example_inputs)
        ):
            # inductor's own (priced through compile_fx, its compiled graphs tagged), or nested
            # inputs (flattened, then called again).
            return original(self, gm, example_inputs, **kwargs)
        with _compiling():
            # Unpriced (None): its operators count as they run; its runs are marked unlabelled when
            # they call modules that eager mode would label.
            graphs = _price(gm, example_inputs)
            unlabelled = graphs is None and _calls_inner_modules(gm)
            graphs = graphs or {}
            priced = copy.copy(self)
            fw = self.kwargs["fw_compiler"]
            bw = self.kwargs.get("bw_compiler") or fw
            inference = self.kwargs.get("inference_compiler") or fw
            priced.kwargs = {
                **self.kwargs,
                "fw_compiler": _bracketing(fw, graphs.get("forward"), unlabelled),
                "bw_compiler": _bracketing(bw, graphs.get("backward"), unlabelled),
                "inference_compiler": _bracketing(inference, graphs.get("inference"), unlabelled),
            }
            return original(priced, gm, example_inputs, **kwargs)

    setattr(__call__, _WRAPPED, True)
    owner: Any = cls  # AOTAutograd's backend class, patched in place
    owner.__call__ = __call__


def _calls_inner_modules(gm: Any) -> bool:
    """Whether a Dynamo graph calls modules other than those its compiled frame holds: run as it
    is, it would leave them unlabelled. (A `torch.cond` branch calls no module of its own in
    eager mode either: its nodes sit inside the `cond` node.)"""
    frame = {str(id(module)) for module in _compiling_frame_modules()}
    return any(module not in frame for node in gm.graph.nodes for module in _module_labels(node))


def _bracketing(compiler: Callable[..., Any], graph: int | None, unlabelled: bool = False) -> Callable[..., Any]:
    """`compiler`, whose compiled functions run as priced graph `graph`; None: unpriced, they
    run as they are (their operators count as they run), each run marked as `unlabelled` when the
    modules inside the graph run no call of their own that eager mode would label."""
    mark = ops.unlabelled_graph.default

    @functools.wraps(compiler)
    def compile(gm: Any, example_inputs: Any) -> Any:
        with _compiling():  # (a backward graph may be compiled at its first run)
            compiled = compiler(gm, example_inputs)
        if graph is None and not unlabelled:
            return compiled  # runs as it is: nothing to add around its runs

        @functools.wraps(compiled)
        def run(*args: Any) -> Any:
            if graph is None:
                mark()
                return compiled(*args)
            return _run_priced(graph, compiled, *args)

        run._boxed_call = getattr(compiled, "_boxed_call", False)  # type: ignore[attr-defined]
        return run

    return compile


def _wrap_convert_frame(module: ModuleType) -> None:
    """Dynamo's compilation of a frame: besides its tracing on fake tensors, it computes on real
    ones (a factory call with constant arguments, folded); none of it is the workload's. The
    frame's code runs after `_compile` returns (compiled, or as it is)."""
    original = getattr(module, "_compile", None)
    if original is None or getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def _compile(*args: Any, **kwargs: Any) -> Any:
        with _compiling():
            return original(*args, **kwargs)

    setattr(_compile, _WRAPPED, True)
    module._compile = _compile  # type: ignore[attr-defined]


def _wrap_eager_backend(module: ModuleType) -> None:
    """The ``eager`` backend runs Dynamo's graph as Python code: its operators count as they run,
    but the modules Dynamo inlined run no hook. While a session labels modules, the graph runs
    node by node instead (the same operators), each node inside its modules' labels."""
    original = getattr(module, "eager", None)
    if original is None or getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def eager(gm: Any, fake_tensor_inputs: Any, **kwargs: Any) -> Any:
        compiled = original(gm, fake_tensor_inputs, **kwargs)
        frame = [weakref.ref(m) for m in _compiling_frame_modules()]

        @functools.wraps(compiled)
        def run(*args: Any) -> Any:
            if not _labels.labelling():
                return compiled(*args)
            _labels.name_compiled_frame([m for m in (ref() for ref in frame) if m is not None])
            return _Labelled(gm).run(*args)

        return run

    setattr(eager, _WRAPPED, True)
    module.eager = eager  # type: ignore[attr-defined]
    from torch._dynamo.backends import registry

    if registry._COMPILER_FNS.get("eager") is original:
        registry._COMPILER_FNS["eager"] = eager


class _Labelled(torch.fx.Interpreter):
    """Runs a Dynamo graph node by node, each inside the labels of its modules."""

    def run_node(self, n: torch.fx.Node) -> Any:
        entered = _labels.enter_modules([int(m) for m in _module_labels(n)])
        try:
            return super().run_node(n)
        finally:
            _labels.exit_modules(entered)


def _tagging(inner: Callable[..., Any], graphs: dict[str, int]) -> Callable[..., Any]:
    """inductor's inner compile, tagging each compiled graph with the priced graph of its kind."""

    @functools.wraps(inner)
    def inner_compile(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        with _compiling():  # (a backward graph may be compiled at its first run)
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
        if any(n.meta.get("recompute") is not None for g in traced.values() for n in g.graph.nodes):
            # Activation checkpointing inside the graph: its backward recomputes forward work that
            # the joint graph holds once. Not priced (aot_eager then counts as it runs; inductor's
            # runs are reported as uncounted) rather than priced without the recomputation.
            raise ValueError("activation checkpointing inside the compiled graph")
        if "joint" in traced:
            joint = traced["joint"]
            graphs = {"forward": _record(joint, "forward"), "backward": _record(joint, "backward")}
        else:
            graphs = {"inference": _record(traced["inference"], "forward")}
    except Exception as error:  # the graph's runs are reported as uncounted compiled code
        _log.debug("torchscan: a compiled graph could not be priced: %r", error)
        return None
    frame = [weakref.ref(m) for m in _compiling_frame_modules()]
    with hold(_lock):  # a guard: an interrupt on the with line cannot leave it held
        for graph in graphs.values():
            _FRAMES[graph] = frame
    return graphs


# Priced graph -> the modules its compiled frame holds (weakly): a module compiled in place, or
# passed to a compiled function, runs no module hook of its own; it is named when its graph runs.
_FRAMES: dict[int, list[weakref.ReferenceType[torch.nn.Module]]] = {}


def _compiling_frame_modules() -> list[torch.nn.Module]:
    """The modules among the locals of the frame Dynamo is compiling (the module of
    torch.compile(module), the `self` of a compiled forward, a compiled function's module
    arguments); none when compile_fx is called outside Dynamo."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        values = InstructionTranslator.current_tx().f_locals.values()
    except Exception:  # no frame being compiled (a direct compile_fx call)
        return []
    return [v for v in values if isinstance(v, torch.nn.Module)]


def _frame_modules(graph: int) -> list[torch.nn.Module]:
    return [m for m in (ref() for ref in _FRAMES.get(graph, ())) if m is not None]


def _trace(gm: Any, example_inputs: Sequence[Any]) -> dict[str, torch.fx.GraphModule]:
    """The ATen graph eager mode runs for `gm`: AOTAutograd's trace without decompositions,
    {"joint": forward and backward} or {"inference"}. The joint graph is priced as traced, not as
    a partitioner splits it (a partitioner may recompute forward work in the backward graph)."""
    from functorch.compile import make_boxed_func  # type: ignore[import-untyped]
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
        compilers: Any = (nop, nop, inference)  # AOTAutograd's compiler protocol, by duck typing
        aot_module_simplified(
            gm,
            list(example_inputs),
            fw_compiler=compilers[0],
            bw_compiler=compilers[1],
            inference_compiler=compilers[2],
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
    without backward tags (an inference graph) is all forward. torch before 2.10 tags only the
    backward's nodes: there, the tagged nodes and the tangents are the backward."""
    nodes = list(graph.nodes)
    if not any(n.meta.get("partitioner_tag") == "is_backward" for n in nodes):
        return dict.fromkeys(nodes, "forward")
    last = max((i for i, n in enumerate(nodes) if n.meta.get("partitioner_tag") == "is_forward"), default=None)
    if last is None:
        return {
            n: "backward"
            if n.meta.get("partitioner_tag") == "is_backward" or n.name.startswith("tangents")
            else "forward"
            for n in nodes
        }
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
            saved = [a for a in n.all_input_nodes if self._sides.get(a) == "forward" and _module_labels(a)]
            later = [a for a in n.all_input_nodes if self._sides.get(a) == "backward" and a in self._labels]
            if saved:
                # A gradient AOTAutograd could not tie to its forward operator (an in-place
                # activation, `hardswish_`, whose functional form was traced under another
                # sequence number): the module that computed the activation it saved, as eager
                # mode's engine attributes it (its node was created there).
                labels = _module_labels(max(saved, key=self._order.__getitem__))
            elif later:
                # Backward work of no module (the sum of two gradients of one tensor): eager
                # mode's engine does it after the node that produced the later gradient, and
                # gives it that node's module. That is the input computed last here.
                labels = self._labels[max(later, key=self._order.__getitem__)]
        self._labels[n] = labels
        return labels

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        # Every tensor of the replay is on the meta device: so are the devices a node names (a
        # rotary embedding's `.to(x.device)`, a factory's `device=`), or the node would mix
        # devices. Where work runs changes no price.
        args, kwargs = torch.fx.node.map_aggregate((args, kwargs), _on_meta)
        return super().call_function(target, args, kwargs)

    def get_attr(self, target: Any, args: Any, kwargs: Any) -> Any:
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor) and value.device.type != "meta":
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        return value


_META = torch.device("meta")


def _on_meta(value: Any) -> Any:
    return _META if isinstance(value, torch.device) else value


def _module_labels(n: torch.fx.Node) -> list[str]:
    """The modules on the node's call stack, outermost first, by identity (the keys of
    ``nn_module_stack``: Python's ``id`` of each module in decimal, ``id@n`` for its n-th repeated
    call); each session gives them its own labels when the graph runs."""
    if n.op not in ("call_function", "call_method", "call_module"):
        return []  # inputs and parameters: no call of any module
    stack = n.meta.get("nn_module_stack") or n.meta.get("fwd_nn_module_stack")
    modules = (key.split("@", 1)[0] for key in stack or () if isinstance(key, str))
    return [module for module in modules if module.isdigit()]


# Installation, now or when inductor is first imported.

_WRAPPERS: dict[str, Callable[[ModuleType], None]] = {
    _OUTPUT_CODE: _wrap_output_code,
    _COMPILE_FX: _wrap_compile_fx,
    _AOT_AUTOGRAD: _wrap_aot_autograd,
    _DEBUGGING_BACKENDS: _wrap_eager_backend,
    _CONVERT_FRAME: _wrap_convert_frame,
}


def _wrap(name: str, module: ModuleType) -> None:
    with hold(_lock):  # a guard: an interrupt on the with line cannot leave it held
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
