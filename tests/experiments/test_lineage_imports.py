"""What a lineage's actor loads before its first candidate: its roles and its compiler, as the
run ships them (packed factories), unpacked in a fresh interpreter. Four lineages each
importing torch (2-3 s of CPU apiece) held up the starting kernel's verdict and the first
candidates on a 2-core machine, only to build C++."""

from __future__ import annotations

import pickle
import subprocess
import sys

from rich.console import Console

from kernelswarm.cluster.packed import PackedFactory
from kernelswarm.experiments.config import load_config
from kernelswarm.experiments.run.prepare import prepare_run

_LINEAGE = """
import pickle, sys
roles_factory, compiler_factory, start = pickle.loads(sys.stdin.buffer.read())
roles = roles_factory.unpack()(7)
compiler = compiler_factory.unpack()()
built = compiler.compile(start.derive(source=start.source + "\\n// a lineage's candidate\\n"))
broken = compiler.compile(start.derive(source=start.source + "\\nnot C++\\n"))
compiler.close()
print("BUILT", built.ok, broken.ok, bool(broken.log))
print("MODULES", " ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


def _as_a_lineage(tmp_path, *overrides: str) -> tuple[str, set[str]]:
    config = load_config(None, [f'run.out_dir="{tmp_path / "runs"}"',
                                f'evaluator.cache_dir="{tmp_path / "cache"}"', *overrides])
    prepared = prepare_run(config, Console(quiet=True))
    part = prepared.spec(1, {"num_cpus": 1}).language_of(0)
    shipped = pickle.dumps((PackedFactory.of(part.make_roles),
                            PackedFactory.of(part.compiler_factory),
                            part.start))
    proc = subprocess.run([sys.executable, "-c", _LINEAGE], input=shipped, capture_output=True,
                          timeout=300)
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    built = next(line for line in out.splitlines() if line.startswith("BUILT"))
    modules = next(line for line in out.splitlines() if line.startswith("MODULES"))
    return built, set(modules.split()[1:])


def test_a_cpp_lineage_builds_its_candidates_without_torch(tmp_path):
    built, modules = _as_a_lineage(tmp_path)
    assert built == "BUILT True False True"  # a build, and a compiler error with its log
    assert "torch" not in modules


def test_the_evaluation_worker_still_judges_with_the_full_evaluator(tmp_path):
    """The lighter compiler is the lineages' only: what judges is the sandboxed evaluator, and
    both build into (and find builds in) the same cache."""
    config = load_config(None, [f'run.out_dir="{tmp_path / "runs"}"',
                                f'evaluator.cache_dir="{tmp_path / "cache"}"'])
    prepared = prepare_run(config, Console(quiet=True))
    part = prepared.spec(1, {"num_cpus": 1}).language_of(0)
    compiler, evaluator = part.compiler_factory(), part.make_evaluator()
    try:
        assert type(evaluator).__name__ == "SandboxEvaluator"
        assert type(compiler).__name__ == "SandboxBuilder"
        first = compiler.compile(part.start)
        again = evaluator.compile(part.start)
        assert first.ok and not first.cached and again.cached
        assert again.binary == first.binary
    finally:
        evaluator.close()
