"""Integrity checks around a kernel's call, inside the runner: observations, not the verdict.

These run in the candidate's own process, so they are inside its reach: native code or a
Python kernel can switch them off, patch what they compare against, or lie in the reply. They
exist to name a cheat plainly when a candidate does not go that far (a launcher calling
PyTorch, a rebound output, a replaced clock); what protects the verdict is outside the runner
(evaluators/judge/): the judge computes every reference and compares the outputs itself, checks
the inputs came back unchanged, re-checks timed outputs on inputs derived from a secret seed,
and cross-checks the reported times against its own clock. A runner serves one candidate and is
killed after it, so nothing patched here outlives the candidate.

What runs here, around every call (correctness and timed calls alike):

==========================================  =====================================================
cheat                                       observed by
==========================================  =====================================================
PyTorch compute in a "custom" kernel        ``ComputeGuard`` around every call of a kernel with
                                            host code (triton, torch-ext): any aten op but
                                            allocation and views; REJECTED
a lazy, subclassed or rebound output        outputs must stay the very ``torch.Tensor`` objects
                                            and storage passed in; a returned tensor is refused
                                            (``checked_entry``); REJECTED
tampering with timers                       the clocks and events checked after every call;
                                            REJECTED
patching torch, the task or this runner     ``ProcessSnapshot`` (taken before the candidate
                                            loads) checked after every call; REJECTED
==========================================  =====================================================

Limits: an aten op issued from C++ inside a torch extension is seen only where it goes through
the dispatcher; the guard watches the calling thread only, so PyTorch compute on a thread the
call starts and joins is not seen; a kernel that computes with NumPy or plain Python on the host
is not seen here at all (on a GPU the judge rejects a call that launches no kernel; on the CPU interpreter the
timing cross-check and the re-checked outputs still hold it to its real speed and results).
"""

from __future__ import annotations

import builtins
import math
import operator
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from types import FrameType, ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops a kernel's host code may issue: allocation, zero-filling a workspace, and views
# (metadata only). Anything else is PyTorch doing the work the kernel is judged on.
ALLOWED_TORCH_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "zero_", "fill_", "lift_fresh",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "slice", "select",
    "narrow", "t", "transpose", "permute", "unsqueeze", "squeeze", "expand", "alias", "detach",
    "unbind", "split", "split_with_sizes", "chunk", "view_as", "flatten", "unflatten", "movedim",
    "view_as_real", "view_as_complex", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_contiguous", "is_non_overlapping_and_dense",
})

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS_FILE = __file__


def _package_dir(name: str) -> str | None:
    spec = find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "")


# Triton's own launch machinery (the CPU interpreter copies arguments with torch) may use torch.
_TRITON_DIR = _package_dir("triton")


class IntegrityViolation(Exception):
    """Raised inside a call when the kernel did what a kernel may not (a REJECTED verdict)."""


@dataclass(frozen=True)
class TorchCall:
    """One aten op the guard saw, and the candidate's code line that issued it (if known)."""

    op: str
    where: str


class ComputeGuard(TorchDispatchMode):
    """Records aten compute issued while a kernel's call runs (allocation and views allowed).

    An op is attributed to the nearest Python frame outside torch: ops issued by triton's own
    launcher are not the kernel's; ops issued from C++ (a torch extension calling ``at::mul``)
    are attributed to the task's launcher frame and count. Nothing is raised inside the call
    (the kernel could catch it); the caller asks for the ``verdict`` afterwards.
    """

    def __init__(self, source_file: str | None = None) -> None:
        super().__init__()
        self.source_file = source_file
        self.calls: list[TorchCall] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        name = func.name()  # e.g. "aten::mul.Tensor"
        namespace, _, rest = name.partition("::")
        if namespace != "aten" or rest.split(".")[0] not in ALLOWED_TORCH_OPS:
            frame = _issuing_frame(sys._getframe(1))
            if frame is not None and not (_TRITON_DIR and
                                          frame.f_code.co_filename.startswith(_TRITON_DIR)):
                self.calls.append(TorchCall(name, self._where(frame)))
        return func(*args, **(kwargs or {}))

    def _where(self, frame: FrameType) -> str:
        if self.source_file and frame.f_code.co_filename == self.source_file:
            return f"line {frame.f_lineno} of the kernel"
        if frame.f_code.co_name.startswith("launch_"):  # the task's launcher called native code
            return "the kernel's native code"
        return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"

    def verdict(self) -> str | None:
        if not self.calls:
            return None
        ops = list(dict.fromkeys(c.op for c in self.calls))
        first = self.calls[0]
        more = f"; also {', '.join(ops[1:4])}" if len(ops) > 1 else ""
        return (f"calls PyTorch compute ({first.op} at {first.where}{more}): a custom kernel "
                f"must do the work in its own code; PyTorch may only allocate and view tensors")


def _issuing_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH_DIR)
                                 or frame.f_code.co_filename == _THIS_FILE):
        frame = frame.f_back
    return frame


def _layout(tensors: Sequence[Any]) -> list[tuple[Any, ...] | None]:
    """Identity of each tensor's storage and view; None for one that is not a plain Tensor."""
    # type() first: a subclass could answer data_ptr() however it likes.
    return [(t.data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, t.device)
            if type(t) is torch.Tensor else None for t in tensors]


def _layout_change(before: list[tuple[Any, ...] | None], tensors: Sequence[Any],
                   what: str) -> str | None:
    for i, (old, new) in enumerate(zip(before, _layout(tensors), strict=True)):
        if old is None:
            continue  # not a plain tensor before the call either (a task's own object)
        if new is None:
            return (f"replaced {what} {i} by a {type(tensors[i]).__name__} (a Tensor subclass "
                    f"or lazy tensor): a kernel writes into the plain tensors it is given")
        if old != new:
            return (f"rebound {what} {i} to other storage or another view (`.data =`, `set_`): "
                    f"a kernel writes into the tensors it is given, in place")
    return None


def guarded_call(call: Callable[[], object], inputs: Sequence[Any], outputs: Sequence[Any],
                 *, host_code: bool, source_file: str | None = None) -> str | None:
    """Run one call of a kernel; return why it is REJECTED, or None.

    Exceptions of ``call`` propagate (``IntegrityViolation`` included). For a language with host
    code the call runs under ``ComputeGuard`` and the tensors' identity is compared before and
    after; the timers are checked for every language (a few identity comparisons).
    """
    if not host_code:
        call()
        return replaced_timers()
    before_out, before_in = _layout(outputs), _layout(inputs)
    guard = ComputeGuard(source_file)
    with guard:
        call()
    return (guard.verdict() or _layout_change(before_out, outputs, "output")
            or _layout_change(before_in, inputs, "input") or replaced_timers())


def checked_entry(fn: Callable[..., Any]) -> Callable[..., None]:
    """``fn`` refusing to return a tensor other than those it was given: results go into the
    outputs, never into a returned (lazy or subclassed) tensor that could compute on access or
    stand in for the real buffer. Returning nothing, or the outputs themselves, is fine."""

    def entry(*args: Any, **kwargs: Any) -> None:
        result = fn(*args, **kwargs)
        given = {id(a) for a in (*args, *kwargs.values()) if type(a) is torch.Tensor}
        foreign = next((t for t in _tensors_in(result) if id(t) not in given), None)
        if foreign is not None:
            raise IntegrityViolation(
                f"returned a {type(foreign).__name__} that is not one of its outputs: a kernel "
                f"writes into the outputs it is given; a returned (lazy or subclassed) tensor is "
                f"never taken as the result")

    entry.__name__ = getattr(fn, "__name__", "entry")
    return entry


def _tensors_in(value: object) -> Iterator[Any]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def _timer_table() -> list[tuple[Any, str, str, Any]]:
    """(live namespace, dotted name, attribute, original) of each clock the timing reads.

    The namespaces are held once (a class's mapping proxy stays live), so that the check after
    every call costs a few dictionary lookups; the rest of ``time`` and ``torch.cuda`` is in the
    ``ProcessSnapshot`` checked after every correctness check.
    """
    table = [(vars(time), f"time.{name}", name, getattr(time, name))
             for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns")]
    table += [(vars(torch.cuda), f"torch.cuda.{name}", name, getattr(torch.cuda, name))
              for name in ("Event", "synchronize")]
    event = vars(torch.cuda.Event)
    table += [(event, f"torch.cuda.Event.{name}", name, event.get(name))
              for name in ("record", "elapsed_time", "synchronize")]
    return table


_TIMERS = _timer_table()  # captured when the sandbox imports this module, before any kernel


def replaced_timers() -> str | None:
    """Why the clocks are no longer the originals captured at start, or None."""
    for namespace, dotted, name, original in _TIMERS:
        if namespace.get(name) is not original:
            return (f"replaced {dotted}: a kernel may not touch the clocks or events the "
                    f"evaluator times it with")
    return None


class ProcessSnapshot:
    """The functions and classes the judge relies on, by identity, to find patched ones.

    Taken once the sandbox has checked the starting kernel, before any candidate is loaded;
    covers time, math, builtins, torch (module, ``Tensor`` with its bases, ``cuda``,
    ``nn.functional``), the task module and every loaded ``kernelswarm`` module. A class is
    looked up through its bases, so that a method set on ``torch.Tensor`` which shadows one
    of its C base class counts as a replacement.
    """

    def __init__(self, extra: Iterable[ModuleType] = ()) -> None:
        owners: list[tuple[str, Any]] = [
            ("time", time), ("math", math), ("builtins", builtins), ("torch", torch),
            ("torch.Tensor", torch.Tensor), ("torch.cuda", torch.cuda),
            ("torch.cuda.Event", torch.cuda.Event),
            ("torch.nn.functional", torch.nn.functional)]
        owners += [(m.__name__, m) for m in extra]
        owners += [(name, module) for name, module in list(sys.modules.items())
                   if name.startswith("kernelswarm.") and module is not None]
        self._entries = []
        for label, owner in owners:
            names = dir(owner) if isinstance(owner, type) else list(vars(owner))
            for key in names:
                value = _lookup(owner, key)
                if callable(value):
                    self._entries.append((label, owner, key, value))
        self._spaces = _Namespaces(owners, self._entries)

    def changed(self) -> str | None:
        """Why the process was tampered with (the first replaced name), or None. Checked after
        every call: the namespaces' names and values are compared whole first (a few set and
        identity comparisons, done in C), and the entries one by one only when those differ,
        to name what changed or find that nothing the judge relies on did (a module that
        gained an attribute, say)."""
        if self._spaces.unchanged():
            return None
        for label, owner, key, value in self._entries:
            if _lookup(owner, key) is not value:
                return (f"replaced {label}.{key} in the runner's process: a kernel may not "
                        f"patch PyTorch, the clocks, the task or the evaluator")
        self._spaces.rebase()
        return None


class _Namespaces:
    """Every namespace an entry of a ``ProcessSnapshot`` is looked up in (a module's
    dictionary; each class of an owner's MRO), its names, and the values found there: one
    name added to, removed from or rebound in any of them shows as a difference. A name
    added to a class before the one defining an entry shadows it; the names of every class in
    the MRO are kept for that, callable or not, so that a name removed beside one added does
    not hide it."""

    def __init__(self, owners: list[tuple[str, Any]],
                 entries: list[tuple[str, Any, str, Any]]) -> None:
        # by the identity of the module or class (``vars`` of a class makes a new proxy of
        # its dictionary at each call), each with its live dictionary or proxy
        spaces: dict[int, Any] = {}
        for _, owner in owners:
            for holder in owner.__mro__ if isinstance(owner, type) else (owner,):
                spaces.setdefault(id(holder), vars(holder))
        found: dict[int, tuple[list[str], list[Any]]] = {key: ([], []) for key in spaces}
        for _, owner, key, value in entries:
            names, values = found[id(_defining(owner, key))]
            names.append(key)
            values.append(value)
        self._spaces = [(spaces[k], tuple(names), tuple(values)) for k, (names, values)
                        in found.items()]
        self.rebase()

    def rebase(self) -> None:
        """Take the names as they are now (after the entries were found unchanged)."""
        self._names = [frozenset(space.keys()) for space, _, _ in self._spaces]

    def unchanged(self) -> bool:
        for (space, names, values), keys in zip(self._spaces, self._names, strict=True):
            if space.keys() != keys or not all(map(operator.is_, map(space.get, names),
                                                   values)):
                return False
        return True


def _defining(owner: Any, key: str) -> Any:
    """Where ``_lookup`` finds ``owner.key``: the module, or the first class of its MRO that
    defines it."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if key in vars(klass):
                return klass
    return owner


def _lookup(owner: Any, key: str) -> Any:
    """``owner.key`` as stored (no descriptor runs): through the bases for a class."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if key in vars(klass):
                return vars(klass)[key]
        return None
    return vars(owner).get(key)
