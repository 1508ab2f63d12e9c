"""The runs' machine line: the device or the processor and threads, and where a resume moved the run."""

from results.machines import device_kind, machine_summary

XEON = {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "cores": 1, "threads": 1, "device": "cpu", "processes": 1}


def test_one_segment_names_the_processor_and_threads():
    assert machine_summary([{"from_step": 0, **XEON}]) == "Intel(R) Xeon(R) Platinum 8480+, 1 thread"


def test_a_resume_on_other_threads_or_a_gpu_says_from_which_step():
    segments = [{"from_step": 0, **XEON}, {"from_step": 2815, **XEON, "threads": 2},
                {"from_step": 4000, **XEON, "threads": 2}, {"from_step": 4500, **XEON, "device": "cuda: NVIDIA H200"}]
    assert machine_summary(segments) == ("Intel(R) Xeon(R) Platinum 8480+, 1 thread; from step 2,815: Intel(R) Xeon(R) "
                                         "Platinum 8480+, 2 threads; from step 4,500: cuda: NVIDIA H200")


def test_ddp_processes_are_named():
    assert machine_summary([{"from_step": 0, **XEON, "processes": 2}]).endswith("1 thread x2 processes")


def test_records_without_segments_or_with_malformed_ones_give_an_empty_or_partial_line():
    assert machine_summary(None) == "" and machine_summary("cpu") == "" and machine_summary([]) == ""
    assert machine_summary([3, {"from_step": "x", **XEON}]) == "from step ?: Intel(R) Xeon(R) Platinum 8480+, 1 thread"


def test_the_vector_units_are_named_when_recorded():
    segment = {"from_step": 0, **XEON, "vector": "avx512+amx"}
    assert machine_summary([segment]) == "Intel(R) Xeon(R) Platinum 8480+ (avx512+amx), 1 thread"


def test_a_first_recorded_segment_after_step_0_says_where_it_starts():
    line = machine_summary([{"from_step": 1801, **XEON}])
    assert line == "from step 1,801: Intel(R) Xeon(R) Platinum 8480+, 1 thread"


def test_a_malloc_other_than_glibc_is_named_and_a_change_of_it_starts_a_part():
    glibc, jemalloc = {"from_step": 0, **XEON, "malloc": "glibc"}, {"from_step": 1800, **XEON, "malloc": "jemalloc"}
    assert machine_summary([glibc]) == "Intel(R) Xeon(R) Platinum 8480+, 1 thread"  # the default: as before
    assert machine_summary([glibc, jemalloc]) == ("Intel(R) Xeon(R) Platinum 8480+, 1 thread; from step 1,800: "
                                                  "Intel(R) Xeon(R) Platinum 8480+, 1 thread, jemalloc")


def test_precision_is_named_and_a_backfilled_unknown_cpu_says_so():
    segment = {"from_step": 0, "device": "cpu", "cpu": "unknown", "threads": "unknown", "precision": "32-true"}
    assert machine_summary([segment]) == "CPU of unknown model, threads unknown, fp32"
    gpu = {"from_step": 0, "device": "cuda: NVIDIA H200", "precision": "16-mixed"}
    assert machine_summary([gpu]) == "cuda: NVIDIA H200, fp16 mixed"


def test_the_device_kind_of_a_record():
    cpu = {"from_step": 0, "device": "cpu", "cpu": "AMD EPYC", "threads": 1}
    gpu = {"from_step": 900, "device": "cuda: NVIDIA H200"}
    assert device_kind([cpu]) == "CPU" and device_kind([gpu]) == "GPU (NVIDIA H200)"
    assert device_kind([cpu, gpu]) == "CPU, then GPU (NVIDIA H200)"
    assert device_kind(None) == device_kind([{"device": "unknown"}]) == "unknown"
