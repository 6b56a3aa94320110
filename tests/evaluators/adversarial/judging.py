"""Judging one adversarial case and checking that it left nothing behind.

``run_case`` evaluates a case's kernel, then checks everything a user would notice: the verdict
(one of the case's allowed statuses, with its phrase), no process left running that carries the
case's marker, no connection to the loopback listener, nothing written outside the sandbox, no
scratch folder beyond the live sandbox's, and an evaluator that still judges the starting kernel
OK. All problems are reported together, so one run shows every way a case got through.
"""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernelswarm.evaluators import SandboxEvaluator
from kernelswarm.search import Candidate, Evaluation, Status

from .cases import Case

SCRATCH_PREFIX = "kernelswarm-sandbox-"
_LINGER_S = 3.0  # how long a killed process group may take to disappear from /proc


@dataclass
class Probes:
    """What a case may try to reach: a loopback listener, a folder and a file outside."""

    listener: socket.socket
    outside: Path
    secret: Path

    @classmethod
    def open(cls, folder: Path) -> Probes:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        outside = folder / "outside"
        outside.mkdir()
        secret = folder / "secret.txt"
        secret.write_text("a file outside the sandbox\n")
        return cls(listener, outside, secret)

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def render(self, case: Case) -> str:
        return case.render(self.port, self.outside, self.secret)

    def escapes(self) -> list[str]:
        """What got out: connections accepted by the listener, files in the outside folder."""
        found = []
        self.listener.settimeout(0.2)
        try:
            conn, peer = self.listener.accept()
            conn.close()
            found.append(f"a connection reached the loopback listener from {peer}")
        except (TimeoutError, OSError):
            pass
        written = sorted(p.name for p in self.outside.iterdir())
        if written:
            found.append(f"files were created outside the sandbox: {written}")
        return found

    def close(self) -> None:
        self.listener.close()


def _process_fields(pid: str) -> dict[str, bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            if stat.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                return None  # a zombie runs nothing
        fields = {}
        for name in ("cmdline", "environ", "comm"):
            with open(f"/proc/{pid}/{name}", "rb") as f:
                fields[name] = f.read()
        return fields
    except OSError:
        return None


def marked_processes(marker: str) -> list[int]:
    """Live processes whose command line, environment or name carries ``marker``."""
    needle, found = marker.encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        fields = _process_fields(entry)
        if fields and any(needle in value for value in fields.values()):
            found.append(int(entry))
    return found


def left_running(marker: str) -> list[str]:
    """Processes carrying ``marker`` still alive after a grace period; they are then killed."""
    deadline = time.monotonic() + _LINGER_S
    while (pids := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:  # started by this test's kernel: end them so that they do not pile up
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return [f"process {pid} carrying the case's marker was still running" for pid in pids]


def scratch_folders() -> list[str]:
    return sorted(p.name for p in Path(tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*"))


def verdict_problem(case: Case, evaluation: Evaluation) -> str | None:
    """Why ``evaluation`` is not a verdict ``case`` may get, or None."""
    status, message = evaluation.status, evaluation.message
    if status is Status.OK and case.ok_below is not None:
        if evaluation.speedup < case.ok_below:
            return None
        return (f"EXPECTED {_names(case.expect)} (or OK below {case.ok_below}x) GOT OK at "
                f"{evaluation.speedup:.2f}x: {message[:200]}")
    if status not in case.expect:
        return f"EXPECTED {_names(case.expect)} GOT {status.value}: {_clip(message)}"
    phrase = case.phrase.get(status)
    if phrase and phrase not in message:
        return f"EXPECTED {status.value} saying {phrase!r} GOT {status.value}: {message[:400]}"
    if case.min_speedup is not None and not evaluation.speedup > case.min_speedup:
        return (f"EXPECTED OK faster than {case.min_speedup}x GOT OK at "
                f"{evaluation.speedup:.2f}x: {message[:200]}")
    return None


def _never_ran(evaluation: Evaluation) -> bool:
    """Refused before it was built or loaded (a screen, the imports check): no run metrics, so
    no process ran it and the evaluator cannot have changed."""
    return evaluation.status in (Status.REJECTED, Status.COMPILE_ERROR) and not evaluation.metrics


def _scratch_problems(live_sandboxes: int) -> list[str]:
    scratch = scratch_folders()
    return [f"scratch folders left behind: {scratch}"] if len(scratch) > live_sandboxes else []


def _clip(text: str, limit: int = 600) -> str:
    """The head and the tail of a long message (a traceback's cause is at its end)."""
    return text if len(text) <= limit else f"{text[:200]} ... {text[-(limit - 200):]}"


def _names(statuses: frozenset[Status]) -> str:
    return "|".join(sorted(s.value for s in statuses))


def run_case(case: Case, evaluator: SandboxEvaluator, start: Candidate, probes: Probes,
             record: Callable[[str, object], None] | None = None,
             live_sandboxes: int | None = None) -> Evaluation | None:
    """Judge ``case`` and assert every property of the module docstring (the honest kernel after
    it is left out when the case was refused before anything of it ran).

    ``record`` (pytest's ``record_property``) keeps the verdict in the test report, passing or not.
    ``live_sandboxes``: the scratch folders allowed to remain (default: the evaluator's spare
    runners, one or several as its memory plan and CPUs allow).
    """
    candidate = start.derive(source=probes.render(case))
    problems: list[str] = []
    try:
        evaluation = evaluator.evaluate(candidate)
        if record is not None:
            record("verdict", evaluation.status.value)
            record("speedup", f"{evaluation.speedup:.2f}")
            record("message", evaluation.message[:300])
    except Exception as exc:  # the evaluator must give a verdict, whatever the kernel did
        evaluation = None
        problems.append(f"EXPECTED {_names(case.expect)} GOT an exception from evaluate: "
                        f"{type(exc).__name__}: {_clip(str(exc))}")
    if evaluation is not None and (problem := verdict_problem(case, evaluation)):
        problems.append(problem)
    problems += left_running(case.marker)
    problems += probes.escapes()
    if evaluation is None or not _never_ran(evaluation):
        problems += _next_honest_problems(evaluator, start)
    spares = getattr(evaluator, "_spares", None)
    live = live_sandboxes if live_sandboxes is not None else \
        len(spares.spares) if spares is not None else 1
    problems += _scratch_problems(live)
    if record is not None:
        record("problems", "\n".join(problems))
    assert not problems, f"{case.language}/{case.name}: " + "\n".join(problems)
    return evaluation


def _next_honest_problems(evaluator: SandboxEvaluator, start: Candidate) -> list[str]:
    try:
        after = evaluator.evaluate(start)
    except Exception as exc:
        return [f"the evaluator failed on the next honest kernel: {type(exc).__name__}: "
                f"{_clip(str(exc))}"]
    if after.status is not Status.OK:
        return [f"the next honest kernel was judged {after.status.value}: {_clip(after.message)}"]
    return []
