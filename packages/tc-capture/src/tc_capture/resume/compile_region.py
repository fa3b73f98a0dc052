"""Capture one region of a frame (from a start offset to a return or a graph break) and turn it
into a cache entry: guards, the compiled graph, and the generated runner."""

from __future__ import annotations

import dis
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import tc_ir

from ..cache import sources as S
from ..cache.guards import compile_guards
from ..interp import BreakHere, Frame, Session, Stop, Unsupported
from ..interp.base import UNBOUND
from ..interp.symbols import finish as finish_sizes
from ..interp.variables import CellV, V
from .codegen import Rebuild, generate_runner
from .export_meta import returns_spec, user_input

log_breaks = tc_ir.logs.get_logger("graph_breaks")
log_guards = tc_ir.logs.get_logger("guards")
log_graph = tc_ir.logs.get_logger("graph")


class GraphBreakError(RuntimeError):
    """Raised under ``fullgraph=True`` at the first graph break, naming its reason and location."""

    def __init__(self, reason: str, filename: str | None, lineno: int | None):
        super().__init__(f"graph break at {filename}:{lineno}: {reason}")
        self.reason, self.filename, self.lineno = reason, filename, lineno


class CompileError(RuntimeError):
    """tc failed to compile a region under ``fullgraph=True`` (an error inside tc, named with the
    user's file:line), or a back end was told to raise rather than fall back."""


@dataclass
class Break:
    reason: str
    filename: str | None
    lineno: int | None
    nested: bool = False  # inside a call the region inlined: that call is compiled as its own frame

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}: {self.reason}"


def distinct_breaks(breaks: list[Break]) -> list[Break]:
    """The breaks to report: a break inside an inlined call ends the caller's region at the call
    *and* the callee's at its own instruction; it is listed once, as the callee's (when the
    callee's frame was compiled and reported it)."""
    own = {(b.reason, b.filename, b.lineno) for b in breaks if not b.nested}
    return [b for b in breaks if not (b.nested and (b.reason, b.filename, b.lineno) in own)]


@dataclass
class Entry:
    guard: Callable
    why: Callable
    run: Callable
    graph: tc_ir.Graph | None
    guard_texts: list[str]
    guard_source: str
    runner_source: str
    break_ip: int | None  # instruction index to run in Python after the runner, None if final
    breaks: list[Break] = field(default_factory=list)
    kw_names: tuple = ()  # a KW_NAMES that ran just before the break instruction


def frame_names(code, offset: int, stack_depth: int) -> list[str]:
    return list(code.co_varnames) + [f"stack{i}" for i in range(stack_depth)]


def _initial_frame(session: Session, code, globals_, F, C, offset: int, nargs: int) -> Frame:
    names = code.co_varnames
    locals_: dict[str, V] = {}
    count = nargs if offset == 0 else len(names)
    for i in range(count):
        if F[i] is not UNBOUND:
            locals_[names[i]] = session.wrap(F[i], S.local(i, names[i]))
    stack = [session.wrap(F[i], S.Source(f"F[{i}]", f"stack{i - count}")) for i in range(count, len(F))]
    cells: dict[str, V] = {}
    for k, name in enumerate(code.co_freevars + code.co_cellvars):
        cell = C[k] if k < len(C) else None
        if cell is None:
            continue
        try:
            contents = session.wrap(cell.cell_contents, S.cell(k, name))
        except ValueError:
            contents = None
        cells[name] = CellV(contents, S.Source(f"C[{k}]", name))
    insts, index_of = __import__("tc_capture.bytecode", fromlist=["decode"]).decode(code)
    return Frame(session, code, globals_, locals_, cells, ip=index_of[offset], stack=stack)


def capture_region(code, globals_, F, C, offset: int, nargs: int, fullgraph: bool, name: str, dynamic=None):
    """Run the symbolic interpreter from ``offset``; returns (session, result or Stop, Break|None).
    ``dynamic``: the ``symbols.DynamicPolicy`` choosing which input dims are size symbols."""
    break_at: set[int] = set()
    cause: Unsupported | None = None
    for _ in range(4):
        session = Session(name, frame_names(code, offset, max(0, len(F) - len(code.co_varnames))), fullgraph, dynamic)
        session.top_globals = globals_
        grad = torch.is_grad_enabled()
        try:
            frame = _initial_frame(session, code, globals_, F, C, offset, nargs)
            frame.break_at = frozenset(break_at)
            out = frame.run()
            brk = Break(cause.reason, cause.filename, cause.lineno, cause.nested) if cause is not None else None
            return session, out, brk
        except BreakHere as e:
            if fullgraph:
                raise GraphBreakError(e.cause.reason, e.cause.filename, e.cause.lineno) from None
            if e.offset in break_at:
                raise RuntimeError(f"tc_capture: break at offset {e.offset} repeated") from e
            break_at.add(e.offset)
            cause = e.cause
        finally:
            torch._C._set_grad_enabled(grad)
            for state in reversed(session.autocast_stack):
                torch.amp.autocast_mode._exit_autocast(state)
    raise RuntimeError("tc_capture: capture did not settle")


def build_entry(code, globals_, session: Session, out, brk: Break | None, backend, name: str,
                offset: int = 0) -> Entry:
    graph = session.graph
    gated = [(n, s, v) for n, s, v in session.inputs if s.gated]
    plain = [(n, s, v) for n, s, v in session.inputs if not s.gated]
    order = {id(n): i for i, (n, _, _) in enumerate(plain + gated)}
    graph.nodes.sort(key=lambda n: (0, order[id(n)]) if n.op == "input" else (1, 0))
    rb = Rebuild(session.guards.ref)
    if isinstance(out, Stop):
        frame = out.frame
        locals_ = ", ".join(rb.expr(frame.locals[n]) if n in frame.locals else "UNBOUND"
                            for n in code.co_varnames)
        stack = ", ".join(rb.expr(v) for v in frame.stack)
        cells = ", ".join(rb.expr(frame.cells[n]) if n in frame.cells else "None"
                          for n in code.co_freevars + code.co_cellvars)
        result, break_ip = f"([{locals_}], [{stack}], [{cells}])", out.ip
        kw_names = frame.kw_names
    else:
        result, break_ip, kw_names = rb.expr(out), None, ()
    # Values read from the frame state were read before the region's own effects: read them
    # again (into R) before the effects are applied, or a popped dict key would be gone.
    rb.lines.append(f"R = {result}")
    rb.side_effects(session)
    result = "R"
    if offset == 0 and not isinstance(out, Stop):
        _export_meta(code, graph, out, rb.outputs, plain + gated)
    graph.output(tuple(rb.outputs))
    session.guard_distinct_state()
    finish_sizes(session.sizes, graph, session.guards)  # specs over tc_ir symbols, size guards
    guard, why, guard_src, ms, root_key = compile_guards(session.guards, [s.expr for _, s, _ in gated], globals_)
    lead, trail = hoist_grad_mode(graph, torch.is_grad_enabled())
    # Where the region starts in the user's code: back ends name it when they fall back.
    graph.meta["location"] = (code.co_filename, line_at(code, offset))
    compiled = None
    if graph.calls:
        with torch.set_grad_enabled(torch.is_grad_enabled() if lead is None else lead):
            compiled = backend(graph, [v for _, _, v in plain + gated])
        _log_graph(graph)
    if trail is not None:
        rb.lines.insert(0, f"_set_grad({trail})")
    scope = {n: o for n, o in session.guards.objects.values()}
    scope["MS"], scope["G"] = ms, globals_
    prologue = [] if lead is None else [f"_set_grad({lead})"]
    run, run_src = generate_runner(name, [s.expr for _, s, _ in plain], bool(gated), root_key, compiled,
                                   rb.lines, result, scope, prologue)
    if log_guards.isEnabledFor(10):
        log_guards.debug("guards of %s:\n%s\n%s", name, "\n".join(session.guards.descriptions()), guard_src)
    if brk is not None:
        log_breaks.debug("graph break in %s at %s:%s: %s", code.co_name, brk.filename, brk.lineno, brk.reason)
    return Entry(guard, why, run, graph if graph.calls else None, session.guards.descriptions(), guard_src,
                 run_src, break_ip, [brk] if brk else [], kw_names)


def hoist_grad_mode(graph: tc_ir.Graph, entered_in: bool = True) -> tuple[bool | None, bool | None]:
    """Grad-mode switches before the region's first op and after its last leave the graph and run
    around it: ``(mode to set before the graph, mode to set after)``.

    An optimizer's ``step`` turns grad mode off for its whole body (``_use_grad_for_differentiable``)
    and restores it at the end. Switched inside the graph, the back end would see a call made
    with grad mode on, with parameters that require grad, and build a training graph whose
    in-place updates of leaf parameters autograd forbids; switched around it, the graph runs,
    and is compiled, as the inference graph it is.
    """
    calls = graph.calls
    switches = [n for n in calls if n.target is torch._C._set_grad_enabled]
    if not switches:
        return None, None
    # The back end restores the grad mode it was called in, so the mode the region ends in is
    # always set after the graph (it was left off after `with no_grad(): ...; return x * y`).
    trail = switches[-1].args[0]
    lead_n = 0
    while lead_n < len(calls) and calls[lead_n].target is torch._C._set_grad_enabled:
        lead_n += 1
    trail_n = 0
    while trail_n < len(calls) - lead_n and calls[-1 - trail_n].target is torch._C._set_grad_enabled:
        trail_n += 1
    for node in calls[len(calls) - trail_n:]:
        graph.erase(node)
    # A leading switch may run around the graph only when no other switch is left inside it:
    # otherwise the back end would compile the ops after that switch in the wrong mode.
    if lead_n == 0 or len(switches) > lead_n + trail_n:
        return _run_mixed_with_grad(graph, calls[0], entered_in), trail
    lead = calls[lead_n - 1].args[0]
    for node in calls[:lead_n]:
        graph.erase(node)
    return lead, trail


def _run_mixed_with_grad(graph: tc_ir.Graph, first: tc_ir.Node, entered_in: bool) -> bool:
    """A graph that switches grad mode inside is handed to the back end, and run, with grad mode
    on, starting with an explicit switch to the mode the region was entered in: a back end that
    picks inference or training from the ambient mode would otherwise drop the gradients of ops
    after an ``enable_grad`` in a region entered with grad mode off."""
    if not entered_in:
        node = graph.call(torch._C._set_grad_enabled, False, spec=None)
        graph.nodes.remove(node)
        graph.nodes.insert(graph.nodes.index(first), node)
    return True


def _export_meta(code, graph: tc_ir.Graph, out, outputs: list, inputs: list) -> None:
    """Return structure and input provenance of a frame captured whole (see ``export_meta``)."""
    try:
        returns, user_inputs = returns_spec(out, outputs), [user_input(s, v) for _, s, v in inputs]
    except (TypeError, ValueError, SyntaxError):
        return  # described only where every piece can be; export reports the gap
    graph.meta["returns"], graph.meta["user_inputs"] = returns, user_inputs
    graph.meta["arg_names"] = list(code.co_varnames[:count_args(code)])


def _log_graph(graph: tc_ir.Graph) -> None:
    """Graph text only when a log or a dump asks for it: formatting is not free, and it must not
    run (or be able to fail) on every capture."""
    if log_graph.isEnabledFor(10):
        log_graph.debug("%s", graph.format(data=False, header="tc_capture"))
    if os.environ.get("TC_DEBUG_DIR"):
        tc_ir.logs.dump("capture", graph.name, lambda: graph.format(data=False))


def line_at(code, offset: int) -> int:
    """The user's line for a region starting at ``offset`` (the ``def`` line for a whole frame)."""
    if offset == 0:
        return code.co_firstlineno
    line = code.co_firstlineno
    for start, lineno in dis.findlinestarts(code):
        if start > offset:
            break
        if lineno is not None:
            line = lineno
    return line


def count_args(code) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    return n + bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)


