"""One device identity: each catalogue GPU owns the names that recognise it, and every tool
(recorder, calibrator, test traces, validator) asks the same function."""
from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_traces import calibrate
from sim import hardware, kernel_model
from sim.hardware import identify_device
from tests.synthetic import synthesize_trace


@pytest.mark.parametrize("key", hardware.names())
def test_each_catalogue_gpu_recognises_its_own_device_names(key):
    gpu = hardware.get(key)
    assert gpu.device_names and gpu.device_name_patterns
    for name in gpu.device_names:
        ident = identify_device(name)
        assert (ident.key, ident.slug, ident.reason) == (key, hardware.device_slug(key), None)
        # what torch reports may differ in case and spacing, never in words
        assert identify_device("  " + name.upper().replace(" ", "  ")).key == key


@pytest.mark.parametrize("name", [
    "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA H200 MIG 3g.71gb",
    "NVIDIA A100-SXM4-80GB MIG 7g.80gb",
])
def test_mig_slices_are_never_their_whole_gpu(name):
    ident = identify_device(name)
    assert ident.key is None and "MIG" in ident.reason
    assert "mig" in ident.slug and ident.slug not in {hardware.device_slug(k) for k in hardware.names()}


@pytest.mark.parametrize("name", [
    "NVIDIA H200 NVL", "NVIDIA H100 NVL", "NVIDIA H100 PCIe", "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 4090 D", "NVIDIA GH200 480GB", "NVIDIA A10G",
    "NVIDIA L40", "AMD EPYC 7B13",
])
def test_other_variants_and_unknown_devices_are_refused(name):
    ident = identify_device(name)
    assert ident.key is None and ident.reason
    assert ident.slug == hardware.device_slug(name)


def test_the_recorded_names_of_the_catalogue_parts():
    # the names NVIDIA's driver reports for the parts the catalogue describes
    assert identify_device("NVIDIA A100-SXM4-80GB").key == "A100-80GB"
    assert identify_device("NVIDIA GeForce RTX 4090").key == "RTX-4090"
    assert identify_device("NVIDIA H200").key == "H200"
    assert identify_device("NVIDIA H100 80GB HBM3").key == "H100-SXM"


def test_every_tool_uses_the_one_identity():
    cal = kernel_model.spec_sheet(hardware.get("A100-80GB"))
    cal = replace(cal, flops_per_s={**cal.flops_per_s, "fp8": 2 * cal.flops_per_s["bf16"]})
    trace = synthesize_trace(cal, suite="cuda-quick", device_name="NVIDIA A100-SXM4-80GB")
    assert (trace["device"]["catalogue_key"], trace["device"]["slug"]) == ("A100-80GB", "a100-80gb")
    assert calibrate.device_identity(trace["device"]) == ("A100-80GB", "a100-80gb")
    assert identify_device("NVIDIA H200 NVL").key is None
    mig = synthesize_trace(cal, suite="cuda-quick", device_name="NVIDIA A100-SXM4-80GB MIG 1g.10gb")
    assert mig["device"]["catalogue_key"] is None
