"""The prompt sections that show an evaluation's figures: the profile and the machine."""

from __future__ import annotations

from kernelswarm.agents.llm.context import machine_section, profile_section
from kernelswarm.search import Evaluation, ShapeResult, Status
from kernelswarm.search.stored_form import typed_detail
from tests.search.old_records import OLD_METRICS, OLD_RESOURCES


def _profiled() -> Evaluation:
    shape = ShapeResult("tokens=1", correct=True, time_us=4.0, start_time_us=8.0,
                        speedup_vs_start=2.0, roofline_fraction=0.8)
    return Evaluation("c", Status.OK, "ok", shapes=(shape,),
                      **typed_detail(OLD_RESOURCES, OLD_METRICS))


def test_the_profile_section_shows_resources_launches_and_nsight_counters():
    text = profile_section(_profiled())
    assert ("Kernel `silu_and_mul_bf16`: 32 registers per thread, 12 bytes spilled, 0 bytes of "
            "static shared memory") in text
    assert "Launched on tokens=1: `silu_and_mul_bf16` x1 3.5 us." in text
    assert "Nsight Compute on tokens=1, `silu_and_mul_bf16`: time_us 3.4, dram_throughput_pct 81" \
        in text
    assert "long_scoreboard 5.5" in text and "l2_hit_rate_pct" not in text  # not measured
    assert '"launches"' in text  # the free-form resources still shown


def test_the_machine_section_reads_the_machine_figures():
    plain = Evaluation("c", Status.OK, device="cpu: x")
    assert machine_section([None, plain]) == "Device: cpu: x."
    text = machine_section([None, _profiled()])
    assert text == ("Device: cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79 GiB); last-level "
                    "cache (L2 on a GPU) 50.0 MiB; copy bandwidth 2900 GB/s; peak 7e+05 GFLOP/s "
                    "(bf16 8192 cubed).")
