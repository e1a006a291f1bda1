"""GPU catalogue: spec-sheet numbers, each with its source.

Every number is the vendor's published figure (dense, i.e. without 2:4 sparsity),
in SI units: bytes, bytes per second, FLOP per second.

>>> get("H100-SXM").hbm_bandwidth_bytes_per_s
3350000000000.0
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

GB = 1e9
TB = 1e12
KiB = 1024
MiB = 1024 ** 2


@dataclass(frozen=True)
class GPU:
    """One accelerator's spec-sheet numbers. Inputs to every roofline computation."""

    name: str                            # catalogue key, e.g. "H100-SXM"
    display_name: str                    # e.g. "NVIDIA H100 SXM5 80GB"
    arch: str                            # "hopper", "ampere", "ada", "blackwell"
    hbm_bytes: float                     # device memory capacity, bytes
    hbm_bandwidth_bytes_per_s: float     # peak device-memory bandwidth
    dense_flops: Mapping[str, float]     # dtype -> dense tensor FLOP/s ("bf16", "fp16", "fp8", "fp4", "int8")
    sm_count: int
    register_file_bytes_per_sm: int
    smem_l1_bytes_per_sm: int            # combined L1 / shared memory per SM
    l2_bytes: int
    nvlink_bandwidth_bytes_per_s: float | None   # total per GPU, both directions; None if no NVLink
    sources: Mapping[str, str] = field(default_factory=dict)   # field -> citation

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s for `dtype`; ValueError lists the dtypes this chip has."""
        try:
            return self.dense_flops[dtype]
        except KeyError:
            raise ValueError(f"{self.name} has no dense {dtype!r} throughput; "
                             f"valid dtypes: {', '.join(sorted(self.dense_flops))}") from None


_H100_SRC = "R4: NVIDIA H100 Tensor Core GPU datasheet; R30: NVIDIA Hopper Architecture In-Depth"

CATALOGUE: dict[str, GPU] = {
    "H100-SXM": GPU(
        name="H100-SXM", display_name="NVIDIA H100 SXM5 80GB", arch="hopper",
        hbm_bytes=80 * GB,                          # R4
        hbm_bandwidth_bytes_per_s=3.35 * TB,        # R4: HBM3 3.35 TB/s
        dense_flops={"bf16": 989e12, "fp16": 989e12,  # R4: 1,979 TFLOP/s is the 2:4-sparse figure
                     "fp8": 1979e12, "int8": 1979e12},  # R4: 3,958 sparse
        sm_count=132,                               # R30
        register_file_bytes_per_sm=256 * KiB,       # R30
        smem_l1_bytes_per_sm=256 * KiB,             # R30
        l2_bytes=50 * MiB,                          # R30
        nvlink_bandwidth_bytes_per_s=900 * GB,      # R4: NVLink 900 GB/s
        sources={"all": _H100_SRC},
    ),
    "H200": GPU(
        name="H200", display_name="NVIDIA H200 SXM 141GB", arch="hopper",
        hbm_bytes=141 * GB,                         # NVIDIA H200 datasheet
        hbm_bandwidth_bytes_per_s=4.8 * TB,         # NVIDIA H200 datasheet: HBM3e 4.8 TB/s
        dense_flops={"bf16": 989e12, "fp16": 989e12,  # same Hopper compute as H100 SXM
                     "fp8": 1979e12, "int8": 1979e12},
        sm_count=132,
        register_file_bytes_per_sm=256 * KiB,
        smem_l1_bytes_per_sm=256 * KiB,
        l2_bytes=50 * MiB,
        nvlink_bandwidth_bytes_per_s=900 * GB,
        sources={"all": "NVIDIA H200 Tensor Core GPU datasheet; compute as H100 SXM (R4, R30)"},
    ),
}


def names() -> list[str]:
    """Catalogue keys, in display order."""
    return list(CATALOGUE)


def get(name: str) -> GPU:
    """Look up a GPU by catalogue key; ValueError lists the valid names."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}; valid names: {', '.join(CATALOGUE)}") from None
