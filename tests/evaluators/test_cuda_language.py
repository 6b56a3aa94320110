"""The cuda language without a GPU: screen rules, settings, NVRTC builds, error classification,
timing plans and profile parsing. NVRTC builds need ``cuda.core`` (skipped, with the reason,
where it is not installed); nothing here needs a GPU.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelswarm.evaluators import EvaluatorSettings, SandboxEvaluator
from kernelswarm.evaluators.languages import CudaLanguage, get_language
from kernelswarm.evaluators.languages.cuda import CUDA_SCREEN_RULES
from kernelswarm.evaluators.languages.cuda_errors import CudaDriverError, classify
from kernelswarm.evaluators.languages.nvrtc import read_artifact
from kernelswarm.evaluators.languages.screen import screen
from kernelswarm.evaluators.measure.gpu_state import throttle_names
from kernelswarm.evaluators.measure.gpu_timing import plan_copies
from kernelswarm.evaluators.measure.profiling import parse_ncu_csv
from kernelswarm.search import Status, load_task
from tests.conftest import SILU_TASK

GPU_KERNELS = Path(__file__).parent / "gpu" / "kernels"
needs_nvrtc = pytest.mark.skipif(
    importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.core") is None,
    reason="NVRTC through cuda.core is not installed (pip install cuda-core cuda-bindings "
           "nvidia-cuda-nvrtc)")


def _start():
    return load_task(SILU_TASK, "cuda").starting_candidate("cuda")


def test_the_starting_kernel_passes_the_screen():
    assert screen(_start().source, CUDA_SCREEN_RULES) is None


@pytest.mark.parametrize("line, rule", [
    ("cudaStream_t s;", "streams and events"),
    ("cudaMemcpyAsync(a, b, n, cudaMemcpyDeviceToDevice);", "the CUDA runtime API"),
    ("child<<<1, 1>>>(out);", "device-side launches"),
    ("long long t = clock64();", "timers"),
    ('asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));', "timers"),
    ('printf("%d", 1);', "printf"),
    ("float* p = (float*)malloc(64);", "device allocation"),
    ("__managed__ int counter;", "device allocation"),
    ('#include "other.cuh"', "non-system includes"),
    ("#include </etc/passwd>", "non-system includes"),
    ("#include <cuda/../../../etc/passwd>", "non-system includes"),
    ("#define CAT(a, b) a##b", "token pasting"),
])
def test_screen_refuses_what_a_cuda_kernel_may_not_use(line, rule):
    finding = screen(f"extern \"C\" __global__ void k(float* out) {{\n{line}\n}}\n",
                     CUDA_SCREEN_RULES)
    assert finding is not None and finding.rule.name == rule
    assert finding.line == 2


def test_programmatic_dependent_launch_intrinsics_are_allowed():
    assert screen("cudaGridDependencySynchronize();", CUDA_SCREEN_RULES) is None


@pytest.mark.parametrize("value, arch", [("9.0", "sm_90"), ("90", "sm_90"), ("sm_90a", "sm_90a"),
                                         ("sm_100", "sm_100"), ("12.0", "sm_120")])
def test_cuda_arch_is_normalised(value, arch):
    assert EvaluatorSettings(device="cuda", cuda_arch=value).cuda_arch == arch
    assert get_language("cuda", EvaluatorSettings(cuda_arch=value)).arch == arch


@pytest.mark.parametrize("kwargs, field", [
    ({"cuda_arch": "hopper"}, "cuda_arch"), ({"cuda_graph_below_us": 0}, "cuda_graph_below_us"),
    ({"ncu": "yes"}, "ncu"), ({"device": "cuda", "memory_limit_mb": 4096}, "memory_limit_mb"),
])
def test_invalid_gpu_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"EvaluatorSettings.{field}"):
        EvaluatorSettings(**kwargs)


def test_cuda_errors_are_classified_with_advice_and_stickiness():
    illegal = classify(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert illegal is not None and illegal.sticky and illegal.code == 700
    assert "bounds guard" in illegal.describe("on shape x")
    launch = classify(CudaDriverError(1, "CUDA_ERROR_INVALID_VALUE", "launching `k`"))
    assert launch is not None and not launch.sticky and "1024 threads" in launch.advice
    assert classify(ValueError("not cuda")) is None
    assert classify(RuntimeError("shape mismatch")) is None


def test_copies_make_every_call_cold_or_cap_the_graph():
    small = plan_copies(footprint_bytes=64 * 1024, l2_bytes=50 * 2 ** 20)
    assert small.copies == 512 and not small.cold_reuse  # capped: replays use each copy once
    medium = plan_copies(footprint_bytes=8 * 2 ** 20, l2_bytes=50 * 2 ** 20)
    assert medium.cold_reuse and (medium.copies - 1) * 8 * 2 ** 20 >= 100 * 2 ** 20
    large = plan_copies(footprint_bytes=600 * 2 ** 20, l2_bytes=50 * 2 ** 20)
    assert large.copies == 1 and large.cold_reuse  # its own traffic evicts the L2


def test_throttle_reasons_are_named():
    assert throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]


def test_ncu_raw_csv_is_parsed_into_metrics_and_top_stalls():
    text = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Kernel Name","gpu__time_duration.sum","dram__throughput.avg.pct_of_peak_sustained'
        '_elapsed","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
        '"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"',
        '"","","nsecond","%","ratio","ratio"',
        '"0","silu_and_mul_bf16","12,288","87.5","9.5","1.25"',
    ])
    found = parse_ncu_csv(text)["silu_and_mul_bf16"]
    assert found["time_us"] == pytest.approx(12.288)
    assert found["dram_throughput_pct"] == 87.5
    assert [s["reason"] for s in found["top_stalls"]] == ["long_scoreboard", "wait"]


@needs_nvrtc
def test_nvrtc_builds_the_starting_kernel_without_a_gpu(tmp_path):
    evaluator = SandboxEvaluator(SILU_TASK, "cuda", EvaluatorSettings(
        device="cuda", cuda_arch="sm_90", cache_dir=tmp_path))
    start = evaluator.start_candidate
    result = evaluator.compile(start)
    assert result.ok, result.log
    (artifact,) = tmp_path.glob("*.kscubin")
    header, cubin = read_artifact(artifact)
    assert cubin.startswith(b"\x7fELF") and header["arch"] == "sm_90"
    assert header["knobs"] == {"BLOCK": 256}
    assert header["kernels"]["silu_and_mul_bf16"]["registers"] > 0
    assert evaluator.compile(start).cached
    other = evaluator.compile(start.derive(knobs={"BLOCK": 128}))
    assert other.ok and not other.cached and len(list(tmp_path.glob("*.kscubin"))) == 2


@needs_nvrtc
@pytest.mark.parametrize("kernel, status, needle", [
    ("compile_error", Status.COMPILE_ERROR, 'identifier "undeclared_scale" is undefined'),
    ("reads_clock", Status.COMPILE_ERROR, "a clock register"),
])
def test_build_failures_carry_nvrtcs_reason(tmp_path, kernel, status, needle):
    evaluator = SandboxEvaluator(SILU_TASK, "cuda", EvaluatorSettings(
        device="cuda", cuda_arch="sm_90", cache_dir=tmp_path))
    source = (GPU_KERNELS / f"{kernel}.cu").read_text()
    evaluation = evaluator.evaluate(evaluator.start_candidate.derive(source=source))
    assert evaluation.status is status
    assert needle in evaluation.message


@needs_nvrtc
def test_a_missing_entry_point_is_a_compile_error_naming_the_kernels(tmp_path):
    language = CudaLanguage("sm_90")
    source = 'extern "C" __global__ void other(float* out) { out[0] = 1.0f; }\n'
    result = SandboxEvaluator(SILU_TASK, "cuda", EvaluatorSettings(
        device="cuda", cuda_arch="sm_90", cache_dir=tmp_path)).compile(
        _start().derive(source=source))
    assert not result.ok and "no kernel `silu_and_mul_bf16` (kernels: other)" in result.log
    assert language.arch == "sm_90"
