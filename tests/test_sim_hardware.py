"""GPU catalogue and memory hierarchy."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim import hardware

REQUIRED = ["H100-SXM", "H200", "A100-80GB", "B200", "L40S", "RTX-4090"]


def test_catalogue_has_the_required_gpus():
    assert hardware.names() == REQUIRED


@pytest.mark.parametrize("name", REQUIRED)
def test_every_gpu_is_sourced_and_sane(name):
    g = hardware.get(name)
    assert g.sources and all(g.sources.values())
    assert g.memory_bytes > 1e9 and g.hbm_bandwidth_bytes_per_s > 1e11
    assert g.sources["memory_mib"].startswith("nvidia-smi memory.total")
    assert {"bf16", "fp16", "int8"} <= set(g.dense_flops)
    assert g.sm_count > 0 and g.register_file_bytes_per_sm == 256 * 1024
    assert g.l2_bytes > 0 and g.smem_l1_bytes_per_sm >= 128 * 1024
    # every tensor dtype is at least as fast as bf16
    assert min(g.dense_flops.values()) == g.dense_flops["bf16"]


def test_fp8_and_fp4_only_where_the_chip_has_them():
    assert "fp8" not in hardware.get("A100-80GB").dense_flops
    assert "fp4" in hardware.get("B200").dense_flops
    assert "fp4" not in hardware.get("H100-SXM").dense_flops
    with pytest.raises(ValueError, match="valid dtypes: bf16, fp16, int8"):
        hardware.get("A100-80GB").peak_flops("fp8")


def test_published_dense_figures():
    assert hardware.get("A100-80GB").peak_flops("bf16") == 312e12
    assert hardware.get("A100-80GB").hbm_bandwidth_bytes_per_s == 2.039e12
    assert hardware.get("B200").peak_flops("bf16") == 2.25e15 and hardware.get("B200").peak_flops("fp4") == 9e15
    assert hardware.get("L40S").hbm_bandwidth_bytes_per_s == 864e9
    assert hardware.get("L40S").peak_flops("bf16") == 362.05e12     # L40S datasheet, dense (733 with sparsity)
    assert hardware.get("RTX-4090").nvlink_bandwidth_bytes_per_s is None


# memory.total as nvidia-smi reports it on each device, MiB (the sources name the reports)
DRIVER_MIB = {"H100-SXM": 81_559, "H200": 143_771, "A100-80GB": 81_920, "B200": 183_359, "L40S": 46_068,
              "RTX-4090": 24_564}


@pytest.mark.parametrize("name", REQUIRED)
def test_capacity_is_the_driver_reported_mib_not_the_label(name):
    g = hardware.get(name)
    assert g.memory_mib == DRIVER_MIB[name]
    assert g.memory_bytes == DRIVER_MIB[name] * 2 ** 20
    label_bytes = float(g.memory_label.removesuffix(" GB")) * 1e9
    # the label is a rounded figure (decimal GB, or GiB written "GB" as on the A100: +7.4%), never the capacity
    assert g.memory_bytes != label_bytes and abs(g.memory_bytes / label_bytes - 1) < 0.08


def test_h100_has_85_5_GB_not_80():
    g = hardware.get("H100-SXM")
    assert g.memory_bytes == 85_520_809_984 and g.memory_label == "80 GB"
    assert g.memory_bytes / 2 ** 30 == pytest.approx(79.65, abs=0.01)


def test_clocks_reproduce_the_datasheet_fp32_figures():
    # the clock each GPU entry uses is the one implied by its datasheet FP32 rate
    for name, fp32 in [("H100-SXM", 67e12), ("L40S", 91.6e12), ("RTX-4090", 82.6e12), ("A100-80GB", 19.5e12)]:
        g = hardware.get(name)
        assert g.sm_count * g.fp32_lanes_per_sm * 2 * g.boost_clock_hz == pytest.approx(fp32, rel=0.01)


def test_unknown_gpu_lists_valid_names():
    with pytest.raises(ValueError, match="unknown GPU 'H800'; valid names: H100-SXM, H200, A100-80GB"):
        hardware.get("H800")


def test_resolve_accepts_names_and_objects():
    g = hardware.get("H200")
    assert hardware.resolve(g) is g and hardware.resolve("H200") is g


def test_nvlink_one_way_is_half_the_total():
    assert hardware.get("H100-SXM").nvlink_bytes_per_s_per_direction == 450e9
    assert hardware.get("L40S").nvlink_bytes_per_s_per_direction is None


@pytest.mark.parametrize("name", REQUIRED)
def test_hierarchy_is_ordered(name):
    r = hardware.memory_hierarchy(name)
    assert r.levels[:3] == ["registers", "shared memory / L1", "L2 cache"]
    cap = r.capacity_bytes
    assert cap[3] > 100 * cap[2] and cap[2] > cap[1]       # DRAM dwarfs L2, which exceeds all shared memory
    assert cap[0] >= cap[1]                                # the register file is as large as L1/shared memory
    bw = r.bandwidth_bytes_per_s
    if not np.isnan(bw[0]):
        assert np.all(np.diff(bw) < 0)                     # and slower
    assert len(r.bandwidth_basis) == 4 and r.bandwidth_basis[-1] == "datasheet"
    assert r.bandwidth_over_dram[-1] == 1.0


def test_h100_hierarchy_values():
    r = hardware.memory_hierarchy("H100-SXM")
    assert r.capacity_bytes[0] == 132 * 256 * 1024
    assert r.bandwidth_bytes_per_s[1] == pytest.approx(132 * 128 * 1.98e9)    # 33.5 TB/s
    assert r.bandwidth_basis[2].startswith("assumed")      # no published H100 L2 bandwidth: labelled so
    # the ladder the chapter teaches: about 120x HBM's bandwidth in the registers, 1/2,471 of its capacity
    assert round(r.bandwidth_over_dram[0]) == 120 and round(r.dram_over_capacity[0]) == 2471
    assert round(r.dram_over_capacity[2]) == 1631 and r.capacity_bytes[3] == 81_559 * 2 ** 20


def test_b200_on_chip_bandwidth_is_left_unknown():
    r = hardware.memory_hierarchy("B200")
    assert all(math.isnan(x) for x in r.bandwidth_bytes_per_s[:3])
    assert r.bandwidth_bytes_per_s[3] == 8e12


def test_hierarchy_carries_the_text_the_figure_prints():
    r = hardware.memory_hierarchy("H100-SXM")
    assert r.capacity_text == ["33.0 MiB", "33.0 MiB", "50.0 MiB", "85.5 GB"]      # 132 x 256 KiB; 81,559 MiB
    assert r.bandwidth_text[-1] == "3.35 TB/s" and r.bandwidth_text[0] == "401 TB/s"
    assert "as the driver reports it (81,559 MiB; sold as 80 GB)" in r.note
    b200 = hardware.memory_hierarchy("B200")                 # clock unpublished: on-chip bandwidths unknown
    assert b200.bandwidth_text[:3] == ["not known"] * 3
