"""An evaluation's ``resources`` and ``metrics`` as the evaluator wrote them before the figures
programs read became fields (machine, baselines, kernel resources, profile, cost): what Parquet
files of older runs hold."""

OLD_RESOURCES = {
    "artifact_bytes": 18432, "binary": "b1n4ry", "arch": "sm_90", "nvrtc": "12.4",
    "kernels": {"silu_and_mul_bf16": {"registers": 32, "static_shared_bytes": 0,
                                      "local_bytes_per_thread": 0, "const_bytes": 0,
                                      "max_threads_per_block": 1024, "spill_store_bytes": 8,
                                      "spill_load_bytes": 4}},
    "launches": [{"kernel": "silu_and_mul_bf16", "grid": [64, 1, 1], "block": [256, 1, 1],
                  "shared_mem": 0, "calls": 3, "occupancy": 1.0}],
}
OLD_METRICS = {
    "device": "cuda: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79 GiB)", "llc_bytes": 52428800,
    "copy_bandwidth_gbs": 2900.5, "peak_gflops": 700000.0, "matmul": "bf16 8192 cubed",
    "timer_overhead_us": 14.5, "gpu": {"driver": "550.54", "power_limit_w": 700},
    "flush_bytes": 104857600, "calibration": "measured", "flush_cache": True, "warmup": 3,
    "baselines": {"device": "cuda: NVIDIA H100", "key": "abc123", "cached": True,
                  "skipped": {"liger": "not installed"}, "versions": {"torch": "2.5.1"}},
    "extra_checks_dropped": {"d=-5,tokens=2": "the task cannot run it"},
    "phase_s": {"runner_wait": 0.01, "correctness": 0.5, "timing": 2.0},
    "runner_start_s": 1.25, "runner_started_as": "forked from the runner template",
    "request_s": {"load": 0.1, "time": 1.9}, "arena": "device",
    "isolation": "namespaces+seccomp", "timing_rel_se": {"tokens=1": 0.004},
    "profile": {"tokens=1": [{"kernel": "silu_and_mul_bf16", "calls": 1, "device_us": 3.5}]},
    "ncu": {"shape": "tokens=1", "kernels": {"silu_and_mul_bf16": {
        "time_us": 3.4, "dram_throughput_pct": 81.0, "memory_throughput_pct": 82.0,
        "sm_throughput_pct": 20.0, "achieved_occupancy_pct": 90.0, "l2_hit_rate_pct": None,
        "top_stalls": [{"reason": "long_scoreboard", "cycles_per_issue": 5.5}]}}},
    "reused_from": "c0ffee",
}
