"""GPU catalogue: spec-sheet numbers, each with its source, and the memory hierarchy they imply.

Every throughput is the vendor's published *dense* figure (without 2:4 sparsity), in SI
units: bytes, bytes per second, FLOP per second. Capacities of on-chip memories are in
binary units (KiB, MiB) as the architecture documents give them. Device memory is what the
driver reports (`nvidia-smi --query-gpu=memory.total`, in MiB), not the datasheet's label:
an "80 GB" H100 SXM has 81,559 MiB = 85.5e9 bytes.

>>> get("H100-SXM").hbm_bandwidth_bytes_per_s
3350000000000.0
>>> get("H100-SXM").memory_bytes, get("H100-SXM").memory_label
(85520809984, '80 GB')
>>> names()
['H100-SXM', 'H200', 'A100-80GB', 'B200', 'L40S', 'RTX-4090']
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Union

import numpy as np

GB = 1e9
TB = 1e12
KiB = 1024
MiB = 1024 ** 2

SMEM_BYTES_PER_CLOCK_PER_SM = 128     # 32 banks x 4 bytes per clock (CUDA C++ Programming Guide, shared memory)
REGISTER_OPERAND_BYTES_PER_LANE = 12  # one FMA reads 3 fp32 operands of 4 bytes each
A100_L2_BYTES_PER_CLOCK = 5120        # NVIDIA A100 Tensor Core GPU Architecture whitepaper: L2 read bandwidth


@dataclass(frozen=True)
class GPU:
    """One accelerator's spec-sheet numbers. Inputs to every roofline computation."""

    name: str                            # catalogue key, e.g. "H100-SXM"
    display_name: str                    # e.g. "NVIDIA H100 SXM5 80GB"
    arch: str                            # "hopper", "ampere", "ada", "blackwell"
    memory_mib: int                      # device memory as the driver reports it (nvidia-smi memory.total), MiB
    memory_label: str                    # the datasheet's marketing figure, for display only, e.g. "80 GB"
    hbm_bandwidth_bytes_per_s: float     # peak device-memory bandwidth
    dense_flops: Mapping[str, float]     # dtype -> dense tensor FLOP/s ("bf16", "fp16", "fp8", "fp4", "int8")
    sm_count: int
    register_file_bytes_per_sm: int
    smem_l1_bytes_per_sm: int            # combined L1 / shared memory per SM
    l2_bytes: int
    nvlink_bandwidth_bytes_per_s: float | None   # total per GPU, both directions; None if no NVLink
    sources: Mapping[str, str] = field(default_factory=dict)   # field -> citation
    memory_type: str = "HBM"             # "HBM3", "GDDR6X", ...
    boost_clock_hz: float | None = None  # SM clock used to derive on-chip bandwidths; None if unpublished
    fp32_lanes_per_sm: int | None = None  # FP32 cores per SM (register-operand derivation)
    l2_bytes_per_clock: int | None = None  # published L2 read bandwidth per clock, if any
    device_names: tuple[str, ...] = ()   # what torch.cuda.get_device_name() reports for this part
    device_name_patterns: tuple[str, ...] = ()  # regexes (whole name, any case) that recognise it

    @property
    def memory_bytes(self) -> int:
        """Device memory capacity in bytes: the driver-reported MiB x 2**20."""
        return self.memory_mib * MiB

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core FLOP/s for `dtype`; ValueError lists the dtypes this chip has."""
        try:
            return self.dense_flops[dtype]
        except KeyError:
            raise ValueError(f"{self.name} has no dense {dtype!r} throughput; "
                             f"valid dtypes: {', '.join(sorted(self.dense_flops))}") from None

    @property
    def nvlink_bytes_per_s_per_direction(self) -> float | None:
        """NVLink bandwidth one way (half the bidirectional datasheet total); None without NVLink."""
        if self.nvlink_bandwidth_bytes_per_s is None:
            return None
        return self.nvlink_bandwidth_bytes_per_s / 2


_H100_SRC = "R4: NVIDIA H100 Tensor Core GPU datasheet; R30: NVIDIA Hopper Architecture In-Depth"
_H100_CLOCK = "clock implied by the R4 datasheet's 67 TFLOP/s FP32 over 132 SMs x 128 FP32 lanes x 2 FLOP"
_H200_SRC = "NVIDIA H200 Tensor Core GPU datasheet; compute as H100 SXM (R4, R30)"
_A100_SRC = ("NVIDIA A100 Tensor Core GPU datasheet (80GB SXM); "
             "NVIDIA A100 Tensor Core GPU Architecture whitepaper")
_B200_SRC = "NVIDIA HGX B200 / DGX B200 datasheets (8-GPU totals divided by 8; dense = half the sparse figure)"
_B200_ONCHIP = ("CUDA C++ Programming Guide, compute capability 10.0 (64K 32-bit registers and a 256 KB "
                "unified L1/shared memory per SM); SM count and L2 size are not on the datasheet: "
                "148 SMs and 126 MB L2 as reported by CUDA device queries in public B200 measurements")
_L40S_SRC = ("NVIDIA L40S datasheet (dense figures; the '*with sparsity' ones are about twice); "
             "NVIDIA Ada Lovelace architecture whitepaper (SM layout)")
_L40S_CLOCK = "clock implied by the L40S datasheet's 91.6 TFLOP/s FP32 over 142 SMs x 128 FP32 lanes x 2 FLOP"
_4090_SRC = ("NVIDIA Ada Lovelace GPU architecture whitepaper, RTX 4090 column "
             "(tensor figures with FP32 accumulate, dense)")

# Device memory as the driver reports it: `nvidia-smi` memory.total, copied from public reports.
_SMI = "nvidia-smi memory.total as reported by the driver"
_H100_MEM = (f"{_SMI}: 81559MiB for 'NVIDIA H100 80GB HBM3' (driver 550.54.15), "
             "github.com/NVIDIA/nccl/issues/1264; the same in github.com/modal-labs/modal-client/pull/2797")
_H200_MEM = f"{_SMI}: 143771MiB for 'NVIDIA H200' (public nvidia-smi logs of 8-GPU H200 SXM systems, driver 570.158.01)"
_A100_MEM = f"{_SMI}: 81920MiB for A100 80GB, github.com/modal-labs/modal-client/pull/2797"
_B200_MEM = f"{_SMI}: 183359MiB for 'NVIDIA B200' (driver 580.95.05), github.com/NVIDIA/TensorRT-LLM/issues/10278"
_L40S_MEM = (f"{_SMI}: 46068MiB for 'NVIDIA L40S' (driver 595.71.05), "
             "github.com/akash-network/provider-configs/pull/99; the same in github.com/modal-labs/modal-client/pull/2797")
_4090_MEM = f"{_SMI}: 24564MiB for 'NVIDIA GeForce RTX 4090' (driver 550.163.01), github.com/RLinf/RLinf/issues/255"

CATALOGUE: dict[str, GPU] = {
    "H100-SXM": GPU(
        name="H100-SXM", display_name="NVIDIA H100 SXM5 80GB", arch="hopper",
        memory_mib=81_559, memory_label="80 GB",     # nvidia-smi, see _H100_MEM
        hbm_bandwidth_bytes_per_s=3.35 * TB,        # R4: HBM3 3.35 TB/s
        dense_flops={"bf16": 989e12, "fp16": 989e12,  # R4: 1,979 TFLOP/s is the 2:4-sparse figure
                     "fp8": 1979e12, "int8": 1979e12},  # R4: 3,958 sparse
        sm_count=132,                               # R30
        register_file_bytes_per_sm=256 * KiB,       # R30
        smem_l1_bytes_per_sm=256 * KiB,             # R30
        l2_bytes=50 * MiB,                          # R30
        nvlink_bandwidth_bytes_per_s=900 * GB,      # R4: NVLink 900 GB/s
        sources={"all": _H100_SRC, "boost_clock_hz": _H100_CLOCK, "memory_mib": _H100_MEM},
        memory_type="HBM3",                         # R4
        boost_clock_hz=1.98e9,                      # 67e12 / (132 * 128 * 2), see _H100_CLOCK
        fp32_lanes_per_sm=128,                      # R30: 128 FP32 cores per SM
        device_names=("NVIDIA H100 80GB HBM3",),  # torch.cuda.get_device_name()
        device_name_patterns=(r"(NVIDIA )?H100 80GB HBM3",),
    ),
    "H200": GPU(
        name="H200", display_name="NVIDIA H200 SXM 141GB", arch="hopper",
        memory_mib=143_771, memory_label="141 GB",   # nvidia-smi, see _H200_MEM
        hbm_bandwidth_bytes_per_s=4.8 * TB,         # NVIDIA H200 datasheet: HBM3e 4.8 TB/s
        dense_flops={"bf16": 989e12, "fp16": 989e12,  # same Hopper compute as H100 SXM
                     "fp8": 1979e12, "int8": 1979e12},
        sm_count=132,
        register_file_bytes_per_sm=256 * KiB,
        smem_l1_bytes_per_sm=256 * KiB,
        l2_bytes=50 * MiB,
        nvlink_bandwidth_bytes_per_s=900 * GB,
        sources={"all": _H200_SRC, "boost_clock_hz": _H100_CLOCK, "memory_mib": _H200_MEM},
        memory_type="HBM3e",                        # NVIDIA H200 datasheet
        boost_clock_hz=1.98e9,                      # H200 datasheet lists the same 67 TFLOP/s FP32 as H100 SXM
        fp32_lanes_per_sm=128,                      # R30
        device_names=("NVIDIA H200",),  # torch.cuda.get_device_name()
        device_name_patterns=(r"(NVIDIA )?H200",),
    ),
    "A100-80GB": GPU(
        name="A100-80GB", display_name="NVIDIA A100 SXM4 80GB", arch="ampere",
        memory_mib=81_920, memory_label="80 GB",     # nvidia-smi, see _A100_MEM
        hbm_bandwidth_bytes_per_s=2039 * GB,       # A100 datasheet (80GB SXM): 2,039 GB/s
        dense_flops={"bf16": 312e12, "fp16": 312e12,  # A100 datasheet: 624 TFLOP/s is the sparse figure
                     "int8": 624e12},               # A100 datasheet: 1,248 TOPS sparse; no fp8 on Ampere
        sm_count=108,                               # A100 whitepaper
        register_file_bytes_per_sm=256 * KiB,       # A100 whitepaper: 64K 32-bit registers per SM
        smem_l1_bytes_per_sm=192 * KiB,             # A100 whitepaper: 192 KB combined L1/shared per SM
        l2_bytes=40 * MiB,                          # A100 whitepaper
        nvlink_bandwidth_bytes_per_s=600 * GB,      # A100 datasheet: NVLink 600 GB/s
        sources={"all": _A100_SRC, "memory_mib": _A100_MEM},
        memory_type="HBM2e",                        # A100 datasheet
        boost_clock_hz=1.41e9,                      # A100 whitepaper: 1410 MHz boost
        fp32_lanes_per_sm=64,                       # A100 whitepaper: 64 FP32 cores per SM
        l2_bytes_per_clock=A100_L2_BYTES_PER_CLOCK,  # A100 whitepaper: 5120 bytes/clk L2 read
        device_names=("NVIDIA A100-SXM4-80GB",),  # torch.cuda.get_device_name()
        device_name_patterns=(r"(NVIDIA )?A100-SXM4?-80GB",),
    ),
    "B200": GPU(
        name="B200", display_name="NVIDIA B200 180GB", arch="blackwell",
        memory_mib=183_359, memory_label="180 GB",   # nvidia-smi, see _B200_MEM (HGX B200: 1,440 GB for 8)
        hbm_bandwidth_bytes_per_s=8 * TB,           # HGX B200 datasheet: 64 TB/s for 8 GPUs
        dense_flops={"bf16": 2.25e15, "fp16": 2.25e15,  # HGX B200: 36 PFLOP/s sparse for 8 GPUs
                     "fp8": 4.5e15, "int8": 4.5e15,     # HGX B200: 72 PFLOP/s (POPS) sparse for 8 GPUs
                     "fp4": 9e15},                      # HGX B200: 144 PFLOP/s sparse for 8 GPUs
        sm_count=148,                               # see _B200_ONCHIP
        register_file_bytes_per_sm=256 * KiB,       # CUDA Programming Guide, cc 10.0
        smem_l1_bytes_per_sm=256 * KiB,             # CUDA Programming Guide, cc 10.0
        l2_bytes=126 * MiB,                         # see _B200_ONCHIP
        nvlink_bandwidth_bytes_per_s=1800 * GB,     # HGX B200 datasheet: NVLink 5, 1.8 TB/s per GPU
        sources={"all": _B200_SRC, "on-chip": _B200_ONCHIP, "memory_mib": _B200_MEM,
                 "boost_clock_hz": "not published by NVIDIA; on-chip bandwidths are left undetermined"},
        memory_type="HBM3e",                        # HGX B200 datasheet
        device_names=("NVIDIA B200",),  # torch.cuda.get_device_name()
        device_name_patterns=(r"(NVIDIA )?B200",),
    ),
    "L40S": GPU(
        name="L40S", display_name="NVIDIA L40S 48GB", arch="ada",
        memory_mib=46_068, memory_label="48 GB",     # nvidia-smi, see _L40S_MEM
        hbm_bandwidth_bytes_per_s=864 * GB,         # L40S datasheet: 864 GB/s
        dense_flops={"bf16": 362.05e12, "fp16": 362.05e12,  # L40S datasheet: BF16/FP16 tensor 362.05 TFLOP/s dense
                     "fp8": 733e12, "int8": 733e12},        # L40S datasheet: 1,466 with sparsity
        sm_count=142,                               # Ada whitepaper / L40S product brief
        register_file_bytes_per_sm=256 * KiB,       # Ada whitepaper: 64K 32-bit registers per SM
        smem_l1_bytes_per_sm=128 * KiB,             # Ada whitepaper: 128 KB L1/shared per SM
        l2_bytes=96 * MiB,                          # Ada whitepaper: 96 MB on AD102 as used by L40S
        nvlink_bandwidth_bytes_per_s=None,          # L40S datasheet: no NVLink (PCIe Gen4 x16)
        sources={"all": _L40S_SRC, "boost_clock_hz": _L40S_CLOCK, "memory_mib": _L40S_MEM},
        memory_type="GDDR6",
        boost_clock_hz=2.52e9,                      # 91.6e12 / (142 * 128 * 2), see _L40S_CLOCK
        fp32_lanes_per_sm=128,                      # Ada whitepaper
        device_names=("NVIDIA L40S",),  # torch.cuda.get_device_name()
        device_name_patterns=(r"(NVIDIA )?L40S",),
    ),
    "RTX-4090": GPU(
        name="RTX-4090", display_name="NVIDIA GeForce RTX 4090 24GB", arch="ada",
        memory_mib=24_564, memory_label="24 GB",     # nvidia-smi, see _4090_MEM
        hbm_bandwidth_bytes_per_s=1008 * GB,        # Ada whitepaper: 1,008 GB/s
        dense_flops={"bf16": 165.2e12, "fp16": 165.2e12,  # Ada whitepaper, FP32 accumulate (330.3 with FP16 accumulate)
                     "fp8": 330.3e12,                     # Ada whitepaper, FP32 accumulate
                     "int8": 660.6e12},                   # Ada whitepaper
        sm_count=128,                               # Ada whitepaper
        register_file_bytes_per_sm=256 * KiB,       # Ada whitepaper
        smem_l1_bytes_per_sm=128 * KiB,             # Ada whitepaper
        l2_bytes=72 * MiB,                          # Ada whitepaper: 72 MB on RTX 4090
        nvlink_bandwidth_bytes_per_s=None,          # no NVLink on RTX 4090
        sources={"all": _4090_SRC, "memory_mib": _4090_MEM},
        memory_type="GDDR6X",
        boost_clock_hz=2.52e9,                      # Ada whitepaper: 2520 MHz boost
        fp32_lanes_per_sm=128,                      # Ada whitepaper
        device_names=("NVIDIA GeForce RTX 4090",),  # torch.cuda.get_device_name()
        device_name_patterns=(r"(NVIDIA )?(GeForce )?RTX 4090",),
    ),
}


def names() -> list[str]:
    """Catalogue keys, in display order."""
    return list(CATALOGUE)


def get(name: str) -> GPU:
    """Look up a GPU by catalogue key; ValueError lists the valid names."""
    try:
        return CATALOGUE[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown GPU {name!r}; valid names: {', '.join(CATALOGUE)}") from None


def resolve(gpu: Union[str, GPU]) -> GPU:
    """A GPU given either as a catalogue key or as a GPU object."""
    return gpu if isinstance(gpu, GPU) else get(gpu)


# --------------------------------------------------------------------------------------------
# Device identity: which catalogue GPU a device that torch reports is
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceIdentity:
    """What a device name means for the guide: its catalogue GPU (if any) and its slug.

    `key` is None for a device the catalogue does not describe; `reason` then says why
    (a MIG slice, a variant with other memory or clocks, an unknown part). Such a device
    is calibrated for itself only and no figure uses it.
    """

    name: str                            # as torch reports it
    key: str | None                      # catalogue key, e.g. "H100-SXM"
    slug: str                            # file-name form: the key's, else the name's
    reason: str | None = None            # why key is None


def device_slug(name: str) -> str:
    """A file-name-safe lower-case form of a device or catalogue name.

    >>> device_slug("H100-SXM")
    'h100-sxm'
    >>> device_slug("NVIDIA A10G")
    'nvidia-a10g'
    """
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def cpu_slug(name: str, threads: int) -> str:
    """The slug of a CPU run with `threads` torch threads (a CPU is never a catalogue GPU).

    >>> cpu_slug("AMD EPYC", 1)
    'cpu-amd-epyc-1-thread'
    """
    return device_slug(f"cpu {name} {threads} thread{'s' * (threads != 1)}")


def identify_device(name: str) -> DeviceIdentity:
    """The catalogue GPU that `torch.cuda.get_device_name()` names, or why there is none.

    Each catalogue entry owns the patterns that recognise it (`device_name_patterns`,
    matched against the whole name, any case). A MIG slice (a fraction of the SMs and
    memory) is never its whole GPU, and a variant no pattern names (H200 NVL, A100 PCIe,
    RTX 4090 D) is not taken for its sibling.

    >>> identify_device("NVIDIA H100 80GB HBM3").key
    'H100-SXM'
    >>> identify_device("NVIDIA H200 NVL").key is None
    True
    >>> identify_device("NVIDIA H100 80GB HBM3 MIG 1g.10gb").slug
    'nvidia-h100-80gb-hbm3-mig-1g-10gb'
    """
    text = " ".join(str(name).split())
    if re.search(r"\bMIG\b", text, flags=re.IGNORECASE):
        return DeviceIdentity(text, None, device_slug(text),
                              "a MIG slice (a share of one GPU's SMs and memory), not a whole "
                              "catalogue GPU")
    for gpu in CATALOGUE.values():
        if any(re.fullmatch(p, text, flags=re.IGNORECASE) for p in gpu.device_name_patterns):
            return DeviceIdentity(text, gpu.name, device_slug(gpu.name))
    return DeviceIdentity(text, None, device_slug(text),
                          f"no catalogue GPU is named {text!r} (catalogue: {', '.join(CATALOGUE)})")


# --------------------------------------------------------------------------------------------
# Memory hierarchy (figure ch03-hierarchy)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HierarchyParams:
    """Controls of the memory-hierarchy figure."""

    gpu: str = "H100-SXM"


@dataclass(frozen=True)
class HierarchyResult:
    """Capacity and bandwidth of each memory level of one GPU, fastest first."""

    gpu: str                             # display name
    levels: list[str]                    # ["registers", "shared memory / L1", "L2 cache", "HBM" or "GDDR"]
    capacity_bytes: np.ndarray           # (levels,) whole chip
    bandwidth_bytes_per_s: np.ndarray    # (levels,) whole chip; nan where no figure can be given
    bandwidth_basis: list[str]           # per level: how the bandwidth was obtained
    bandwidth_over_dram: np.ndarray      # (levels,) bandwidth / DRAM bandwidth
    dram_over_capacity: np.ndarray       # (levels,) DRAM capacity / capacity: how many times smaller the level is
    capacity_text: list[str]             # per level: "50.0 MiB" on chip, "85.5 GB" for DRAM
    bandwidth_text: list[str]            # per level: "3.35 TB/s", "not known" where nan
    note: str                            # where each number comes from, with the sources


def _capacity_text(level: str, nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB" if level in ("HBM", "GDDR") else f"{nbytes / 2 ** 20:,.1f} MiB"


def _bandwidth_text(bytes_per_s: float) -> str:
    if math.isnan(bytes_per_s):
        return "not known"
    tbs = bytes_per_s / 1e12
    return f"{tbs:,.0f} TB/s" if tbs >= 100 else f"{tbs:,.3g} TB/s"


def memory_hierarchy(gpu: Union[str, GPU, HierarchyParams] = HierarchyParams()) -> HierarchyResult:
    """Capacity and bandwidth of registers, shared memory/L1, L2 and DRAM for one GPU.

    Capacities are per SM times the SM count. Bandwidths other than DRAM are derived,
    and each level says how:

    - registers: SMs x FP32 lanes x 12 bytes (three 4-byte operands per FMA) x clock,
      the operand traffic that keeps every FP32 lane busy;
    - shared memory/L1: SMs x 128 bytes per clock (32 banks of 4 bytes) x clock. For the
      A100 this gives 108 x 128 x 1.41e9 = 19.5 TB/s, the "about 19 TB/s" of R27;
    - L2: the A100 whitepaper's 5,120 bytes per clock at the A100 clock; other chips have
      no published L2 bandwidth, so the same bytes per clock is assumed at their clock;
    - DRAM: the datasheet.

    Where the clock is unpublished (B200) the on-chip bandwidths are nan.

    >>> r = memory_hierarchy("A100-80GB")
    >>> round(float(r.bandwidth_bytes_per_s[1]) / 1e12, 1)
    19.5
    """
    g = resolve(gpu.gpu if isinstance(gpu, HierarchyParams) else gpu)
    clock = g.boost_clock_hz
    dram = "GDDR" if g.memory_type.startswith("GDDR") else "HBM"
    levels = ["registers", "shared memory / L1", "L2 cache", dram]
    capacity = np.array([g.register_file_bytes_per_sm * g.sm_count,
                         g.smem_l1_bytes_per_sm * g.sm_count,
                         g.l2_bytes, g.memory_bytes], dtype=float)
    nan = math.nan
    if clock is None:
        reg_bw = smem_bw = l2_bw = nan
        basis = ["unknown: clock not published"] * 3
    else:
        lanes = g.fp32_lanes_per_sm
        reg_bw = nan if lanes is None else g.sm_count * lanes * REGISTER_OPERAND_BYTES_PER_LANE * clock
        smem_bw = g.sm_count * SMEM_BYTES_PER_CLOCK_PER_SM * clock
        if g.l2_bytes_per_clock is not None:
            l2_bw = g.l2_bytes_per_clock * clock
            l2_basis = f"published: {g.l2_bytes_per_clock} bytes/clock x {clock / 1e9:.2f} GHz"
        else:
            l2_bw = A100_L2_BYTES_PER_CLOCK * clock
            l2_basis = (f"assumed: no published figure; A100's {A100_L2_BYTES_PER_CLOCK} bytes/clock "
                        f"x {clock / 1e9:.2f} GHz")
        basis = [f"derived: {g.sm_count} SMs x {lanes} FP32 lanes x 12 B x {clock / 1e9:.2f} GHz",
                 f"derived: {g.sm_count} SMs x 128 B/clock x {clock / 1e9:.2f} GHz",
                 l2_basis]
    basis.append("datasheet")
    bandwidth = np.array([reg_bw, smem_bw, l2_bw, g.hbm_bandwidth_bytes_per_s], dtype=float)
    return HierarchyResult(gpu=g.display_name, levels=levels, capacity_bytes=capacity,
                           bandwidth_bytes_per_s=bandwidth, bandwidth_basis=basis,
                           bandwidth_over_dram=bandwidth / g.hbm_bandwidth_bytes_per_s,
                           dram_over_capacity=g.memory_bytes / capacity,
                           capacity_text=[_capacity_text(lv, float(c)) for lv, c in zip(levels, capacity)],
                           bandwidth_text=[_bandwidth_text(float(b)) for b in bandwidth],
                           note=(f"{g.display_name}. Capacities: per-SM sizes x {g.sm_count} SMs and L2 as published; "
                                 f"{dram} as the driver reports it ({g.memory_mib:,} MiB; sold as {g.memory_label}). "
                                 f"Bandwidths: only {dram}'s is on the datasheet. Registers and shared memory are "
                                 f"derived from the clock and the width of the hardware (three 4-byte operands per "
                                 f"FP32 lane per clock; 128 bytes per clock per SM); L2 is published per clock for the "
                                 f"A100 only and assumed at the same bytes per clock elsewhere; where the clock is "
                                 f"unpublished the on-chip bandwidths are left unknown. "
                                 f"Sources: {'; '.join(g.sources.values())}."))
