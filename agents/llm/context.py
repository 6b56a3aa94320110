"""What the prompts say about a lineage, as Markdown sections: the task and its calling contract,
the kernel, knob conventions, the profile, the machine, the history, elites of other lineages.

Each function renders one section from the search's own objects; the templates place them.
Long texts (sources of other lineages, compiler logs) are cut to keep prompts bounded.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Iterable
from typing import Any

from kernelswarm.search import (
    NCU_COUNTERS,
    SPECS,
    Attempt,
    Candidate,
    Evaluation,
    Feedback,
    KernelResources,
    LineageView,
    Profile,
    Task,
)

ELITE_SOURCE_CHARS = 4000
LOG_CHARS = 3000
METRICS_CHARS = 2000



def _fmt(value: Any) -> str:
    """A figure as prompts show it: "n/a" where it was not measured (NaN), "inf" where it is
    infinite (an error the checker measured as such)."""
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:.4g}"  # "inf", "-inf"
    return str(value)


def _cut(text: str, limit: int, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} characters cut ...]\n"
    return marker + text[-limit:] if keep_end else text[:limit] + marker


def _fenced(source: str, language: str) -> str:
    return f"```{SPECS[language].fence_tag}\n{source.rstrip()}\n```"


def task_section(task: Task, language: str) -> str:
    """The task, its shapes and tolerances, and the calling contract in ``language``."""
    kernel = task.kernel(language)
    launcher = getattr(task.module, SPECS[language].launcher, None)
    try:
        contract = inspect.getsource(launcher) if launcher is not None else ""
    except (OSError, TypeError):
        contract = ""
    lines = [f"Task `{task.name}`: {task.description or '(no description)'}",
             f"Language: {language}; entry point: `{kernel.entry}`."]
    extras = {k: v for k, v in kernel.spec.items()}
    if extras:
        lines.append(f"Entry point details: {json.dumps(extras, default=str)}")
    lines.append("Tuning shapes (scored): " + "; ".join(s.label for s in task.tuning_shapes))
    lines.append(f"Held-out shapes (checked, never scored): {len(task.heldout_shapes)}, with odd "
                 "and non-power-of-two sizes: the kernel must handle any size.")
    tolerances = ", ".join(f"{d}: atol {t.atol:g}, rtol {t.rtol:g}"
                           for d, t in sorted(task.tolerances.items()))
    lines.append(f"Tolerances: {tolerances}.")
    if contract:
        lines.append("The task calls the compiled entry point like this (the calling contract, "
                     "which the kernel must keep):\n```python\n" + contract.rstrip() + "\n```")
    return "\n".join(lines)


def kernel_section(candidate: Candidate) -> str:
    knobs = ", ".join(f"{k}={v}" for k, v in candidate.knobs) or "none"
    space = ", ".join(f"{k}: {list(v)}" for k, v in candidate.knob_space) or "none"
    return (f"Candidate {candidate.id} ({candidate.origin.move or candidate.origin.role}); "
            f"knob values: {knobs}; knob space: {space}.\n"
            + _fenced(candidate.source, candidate.language))


def evaluation_of(candidate: Candidate, view: LineageView) -> Evaluation | None:
    """The known verdict on ``candidate`` among those the view holds."""
    pairs = [p for p in (view.best, view.global_best, *view.migrants) if p is not None]
    return next((e for c, e in pairs if c.id == candidate.id), None)


def profile_section(evaluation: Evaluation | None) -> str:
    """Per shape: time, the starting kernel's, speedups, roofline fraction; then resources and
    profiler metrics where the evaluator reported them."""
    if evaluation is None:
        return "No profile of this kernel yet."
    lines = [f"Status {evaluation.status.value}; speedup vs the starting kernel "
             f"{evaluation.speedup:.3f}x (geometric mean).",
             "| shape | correct | time us | start us | vs start | vs PyTorch | roofline |",
             "|---|---|---|---|---|---|---|"]
    for s in evaluation.shapes:
        lines.append(f"| {s.shape} | {s.correct} | {_fmt(s.time_us)} | {_fmt(s.start_time_us)} "
                     f"| {_fmt(s.speedup_vs_start)} | {_fmt(s.speedup_vs_eager)} "
                     f"| {_fmt(s.roofline_fraction)} |")
    if evaluation.resources:
        lines.append(f"Resources: {json.dumps(dict(evaluation.resources), default=str)}")
    lines += [_kernel_resources_line(k) for k in evaluation.kernel_resources]
    if evaluation.profile is not None:
        lines.append(_cut(_profile_text(evaluation.profile), METRICS_CHARS))
    return "\n".join(lines)


def _kernel_resources_line(k: KernelResources) -> str:
    figures = [f"{_fmt(v)} {what}" for v, what in (
        (k.registers, "registers per thread"), (k.spill_bytes, "bytes spilled"),
        (k.static_shared_bytes, "bytes of static shared memory"),
        (k.local_bytes_per_thread, "bytes of local memory per thread")) if v is not None]
    return f"Kernel `{k.kernel}`: {', '.join(figures) or 'no resources reported'}."


def _profile_text(profile: Profile) -> str:
    """The kernels each shape launched (torch.profiler) and Nsight Compute's counters."""
    lines = []
    for shape, launched in profile.launches.items():
        kernels = "; ".join(f"`{k.kernel}` x{k.calls} {_fmt(k.device_us)} us" for k in launched)
        lines.append(f"Launched on {shape}: {kernels or 'no kernel'}.")
    if profile.ncu_error:
        lines.append(f"Nsight Compute failed: {profile.ncu_error}")
    for k in profile.ncu:
        counters = ", ".join(f"{name} {_fmt(getattr(k, name))}" for name in NCU_COUNTERS
                             if getattr(k, name) is not None)
        stalls = ", ".join(f"{reason} {_fmt(cycles)}" for reason, cycles in k.top_stalls)
        lines.append(f"Nsight Compute on {profile.ncu_shape}, `{k.kernel}`: {counters}"
                     + (f"; top stalls (cycles per issue): {stalls}" if stalls else "") + ".")
    return "\n".join(lines)


def machine_section(evaluations: Iterable[Evaluation | None]) -> str:
    """The device the kernels are timed on, from the figures an evaluation carries."""
    for evaluation in evaluations:
        if evaluation is None:
            continue
        m = evaluation.machine
        if m is not None:
            return (f"Device: {m.device or evaluation.device}; last-level cache (L2 on a GPU) "
                    f"{m.llc_bytes / 2**20:.1f} MiB; copy bandwidth "
                    f"{_fmt(m.copy_bandwidth_gbs)} GB/s; peak {_fmt(m.peak_gflops)} GFLOP/s "
                    f"({m.matmul or 'matmul'}).")
        if evaluation.device:
            return f"Device: {evaluation.device}."
    return "Device: not known yet."


def _attempt_line(a: Attempt) -> str:
    line = f"- step {a.step}: {a.move} -> {a.status}"
    if a.status == "OK":
        line += f", {a.speedup:.3f}x"
    if a.failed_shape:
        line += f", wrong on {a.failed_shape}"
    if a.message and a.status != "OK":
        line += f": {' '.join(a.message.split())[:200]}"
    return line


def history_section(view: LineageView, limit: int) -> str:
    if not view.history:
        return "Nothing tried yet in this lineage."
    shown = view.history[-limit:]
    head = f"(the last {len(shown)} of {len(view.history)})\n" if len(view.history) > limit else ""
    return head + "\n".join(_attempt_line(a) for a in shown)


def feedback_section(feedback: Feedback | None) -> str:
    return feedback.summary if feedback is not None else "No analysis yet."


def elites_section(view: LineageView, limit: int) -> str:
    """Other lineages' best kernels, best first, as inspiration."""
    shown = view.migrants[:limit]
    if not shown:
        return "None yet."
    parts = []
    for candidate, evaluation in shown:
        parts.append(f"Lineage {candidate.lineage}, {evaluation.speedup:.3f}x, via "
                     f"{candidate.origin.move or candidate.origin.role}:\n"
                     + _fenced(_cut(candidate.source, ELITE_SOURCE_CHARS), candidate.language))
    return "\n\n".join(parts)


def failure_section(evaluation: Evaluation) -> str:
    """A failed verdict for structured debugging: status, the trimmed log, the failing shape."""
    lines = [f"Status: {evaluation.status.value}."]
    shape = evaluation.failed_shape()
    if shape is not None:
        lines.append(f"First failing shape: {shape.shape} (max abs err {_fmt(shape.max_abs_err)}"
                     f", max rel err {_fmt(shape.max_rel_err)}).")
    lines.append("Log:\n```text\n" + _cut(evaluation.message.strip(), LOG_CHARS, keep_end=True)
                 + "\n```")
    return "\n".join(lines)
