"""Kernel files in candidates/ and best/ carry the knob values they were judged with: built alone
they give the same binary, and eval and resume read back the very candidate that was judged."""

from __future__ import annotations

import ast
import hashlib

from kernelswarm.evaluators import EvaluatorSettings
from kernelswarm.evaluators.languages import get_language
from kernelswarm.evaluators.languages.compile_cache import CompileCache
from kernelswarm.experiments.evaluation.kernel_file import file_candidate
from kernelswarm.experiments.sinks.sources import read_kernel_file, self_contained_source
from kernelswarm.search import Candidate, Origin, load_task
from tests.conftest import SILU_TASK

# A knob the source needs (no default of its own) and that changes the code: UNROLL.
UNROLLED = """#include <math.h>
#include <stdint.h>

extern "C" void silu_and_mul(float* out, const float* x, int64_t tokens, int64_t d) {
    for (int64_t t = 0; t < tokens; ++t) {
        const float* row = x + t * 2 * d;
        for (int64_t i = 0; i < d; i += UNROLL) {
            for (int64_t u = 0; u < UNROLL && i + u < d; ++u) {
                float g = row[i + u];
                out[t * d + i + u] = g / (1.0f + expf(-g)) * row[d + i + u];
            }
        }
    }
}
"""


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_cpp_file_built_alone_gives_the_judged_binary(compile_cache, tmp_path):
    start = load_task(SILU_TASK).starting_candidate("cpp")
    judged = start.derive(source=UNROLLED, knob_space={"UNROLL": (1, 4)}, knobs={"UNROLL": 4})
    other = judged.derive(knobs={"UNROLL": 1})
    text = self_contained_source(judged)
    assert "#define UNROLL 4" in text.splitlines()[:8]
    alone = start.derive(source=text, knob_space={})  # the file, no knob at all
    assert alone.knob_values == {}
    language = get_language("cpp", EvaluatorSettings(cache_dir=compile_cache))
    cache = CompileCache(tmp_path / "cache")
    built = {name: cache.build(language, c, 60.0) for name, c in
             (("judged", judged), ("alone", alone), ("other", other))}
    assert all(b.artifact is not None for b in built.values()), {
        n: b.result.log for n, b in built.items()}
    assert _sha(built["alone"].artifact) == _sha(built["judged"].artifact)
    assert _sha(built["other"].artifact) != _sha(built["judged"].artifact)  # the knob matters


def test_eval_reads_back_the_judged_candidate_from_its_file():
    task = load_task(SILU_TASK, "cuda")
    for language, knobs in (("cuda", {"BLOCK": 512}), ("triton", {"BLOCK": 256})):
        start = task.starting_candidate(language)
        judged = start.derive(knobs=knobs, lineage=2, origin=Origin(role="tuner"))
        text = self_contained_source(judged)
        assert text != judged.source
        read, source = read_kernel_file(text, language, judged.entry)
        assert read == knobs and source == judged.source
        again = file_candidate(start, text, Origin(role="user", move="eval"))
        assert again.id == judged.id and again.knob_values == knobs


def test_a_triton_file_run_alone_launches_the_judged_knobs():
    start = load_task(SILU_TASK, "cuda").starting_candidate("triton")
    judged = start.derive(knobs={"BLOCK": 256})
    text = self_contained_source(judged)
    entry = next(n for n in ast.parse(text).body
                 if isinstance(n, ast.FunctionDef) and n.name == judged.entry)
    defaults = dict(zip([a.arg for a in entry.args.args][-len(entry.args.defaults):],
                        [ast.literal_eval(d) for d in entry.args.defaults], strict=True))
    assert defaults["BLOCK"] == 256
    assert "BLOCK=1024" in start.source and "BLOCK=1024" not in text


def test_a_file_without_knobs_or_header_is_left_as_it_is():
    start = load_task(SILU_TASK).starting_candidate("cpp")
    assert self_contained_source(start) == start.source
    assert read_kernel_file(start.source, "cpp", start.entry) == (None, start.source)
    plain = Candidate.create(language="cpp", source="int x;", entry="f")
    assert file_candidate(plain, "int y;", Origin()).source == "int y;"
