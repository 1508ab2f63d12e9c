"""A segment's machine: the processor's vector units are read from its flags."""

import torch

from lra.run.machine import cpu_model, describe, vector_units


def test_vector_units_from_cpuinfo_flags():
    epyc = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma\n"
    xeon = "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: sse2 avx avx2 avx512f avx512bw amx_bf16 amx_tile\n"
    assert vector_units(epyc) == "avx2" and vector_units(xeon) == "avx512+amx"
    assert vector_units("processor : 0\n") == "unknown"
    assert cpu_model(epyc) == "AMD EPYC 7B13" and cpu_model(xeon) == "Intel(R) Xeon(R) Processor"


def test_describe_names_every_field():
    machine = describe(torch.device("cpu"), processes=1)
    assert set(machine) == {"cpu", "vector", "cores", "threads", "device", "processes", "subnormals", "malloc"}
    assert machine["device"] == "cpu" and machine["cores"] >= 1 and machine["threads"] >= 1
