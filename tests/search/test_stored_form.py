"""Evaluation's typed figures and their stored form: what a program reads, and what older runs'
files hold, read the same."""

from __future__ import annotations

import json
import math

from kernelswarm.search.evaluation import Evaluation, Status
from kernelswarm.search.measured import (
    BaselineSource,
    EvaluationCost,
    KernelResources,
    KernelTime,
    MachineFigures,
    NcuKernel,
    Profile,
)
from kernelswarm.search.stored_form import stored_detail, typed_detail
from tests.search.old_records import OLD_METRICS, OLD_RESOURCES


def _read(resources: dict, metrics: dict) -> Evaluation:
    stored = json.loads(json.dumps([resources, metrics]))  # as the Parquet columns carry them
    return Evaluation("c", Status.OK, **typed_detail(*stored))


def test_an_old_record_reads_into_the_fields():
    e = _read(OLD_RESOURCES, OLD_METRICS)
    assert e.binary == "b1n4ry" and e.reused_from == "c0ffee"
    assert e.machine == MachineFigures(
        OLD_METRICS["device"], 52428800, 2900.5, 700000.0, "bf16 8192 cubed", 14.5,
        {"driver": "550.54", "power_limit_w": 700})
    assert e.baselines == BaselineSource("cuda: NVIDIA H100", "abc123", True,
                                         {"liger": "not installed"}, {"torch": "2.5.1"})
    assert e.dropped_checks == {"d=-5,tokens=2": "the task cannot run it"}
    [kernel] = e.kernel_resources
    assert (kernel.kernel, kernel.registers, kernel.spill_bytes) == ("silu_and_mul_bf16", 32, 12)
    assert kernel.other == {"const_bytes": 0, "max_threads_per_block": 1024}
    assert e.profile.launches == {"tokens=1": (KernelTime("silu_and_mul_bf16", 1, 3.5),)}
    assert e.profile.ncu_shape == "tokens=1"
    assert e.profile.ncu[0].dram_throughput_pct == 81.0 and e.profile.ncu[0].l2_hit_rate_pct is None
    assert e.profile.ncu[0].top_stalls == (("long_scoreboard", 5.5),)
    assert e.cost == EvaluationCost({"runner_wait": 0.01, "correctness": 0.5, "timing": 2.0},
                                    {"load": 0.1, "time": 1.9}, 1.25,
                                    "forked from the runner template", "device")
    # what stays free-form: display detail only
    assert set(e.resources) == {"artifact_bytes", "arch", "nvrtc", "launches"}
    assert set(e.metrics) == {"flush_bytes", "calibration", "flush_cache", "warmup",
                              "isolation", "timing_rel_se"}


def test_the_stored_form_is_what_older_versions_wrote():
    e = _read(OLD_RESOURCES, OLD_METRICS)
    resources, metrics = stored_detail(e)
    assert resources == OLD_RESOURCES and metrics == OLD_METRICS


def test_every_field_survives_a_round_trip():
    e = Evaluation(
        "c", Status.OK, binary="h", reused_from="b",
        machine=MachineFigures("cpu: x", 1 << 20, 10.0, 50.0, timer_overhead_us=1.0),
        baselines=BaselineSource(error="torch.compile failed"),
        dropped_checks={"n=1": "why"},
        kernel_resources=(KernelResources("k", registers=40, spill_load_bytes=0,
                                          other={"const_bytes": 8}),),
        profile=Profile({"n=1": (KernelTime("k", 2, 1.5),)}, "n=1",
                        (NcuKernel("k", time_us=1.4, top_stalls=(("wait", 1.0),)),)),
        cost=EvaluationCost({"timing": 1.0}, {"time": 0.9}, 2.0, "spawned", "host"))
    assert _read(*stored_detail(e)) == e
    assert _read({}, {}) == Evaluation("c", Status.OK)


def test_values_of_the_wrong_type_are_dropped_not_raised():
    e = _read({"kernels": {"k": {"registers": "many", "spill_store_bytes": True}, "j": 3},
               "binary": None},
              {"profile": {"n=1": [{"kernel": "k", "calls": "x", "device_us": 2.0}, 7],
                           "n=2": "junk"},
               "ncu": {"shape": "n=1", "error": "ncu is not installed"},
               "baselines": "none", "extra_checks_dropped": [1], "copy_bandwidth_gbs": "fast",
               "phase_s": {"timing": "long"}})
    assert e.kernel_resources == (KernelResources("k"),) and e.binary == ""
    assert e.profile == Profile({"n=1": (KernelTime("k", 0, 2.0),)}, "n=1",
                                ncu_error="ncu is not installed")
    assert e.machine is None and e.baselines is None and e.dropped_checks == {}
    assert e.cost.phase_s == {} and math.isnan(e.cost.runner_start_s)
