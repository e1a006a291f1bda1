"""Inference engines compared feature by feature, and a chooser that filters them by need.

Every entry of the table is a `Claim`: what the engine's own documentation (or a cited
secondary source where no primary one was found) says about one feature, the key of that
source in site/references.toml, and the date the source was read (`as_of`). Where the
documentation read does not state a feature, the claim says "not confirmed": it is not a
"no", only the absence of a statement.

Status values: "yes", "partial" (stated with a limit that the detail names), "no",
"not confirmed". The chooser treats only "yes" as meeting a need.

>>> choose_engines(EngineNeedsParams(hardware="apple")).fitting
['vLLM', 'llama.cpp', 'MLC LLM']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.checks import check_choice, checked_params

AS_OF = "2026-12-01"                # the date the documentation below was read
STATUSES = ("yes", "partial", "no", "not confirmed")
FEATURES = ("status", "paging", "continuous_batching", "prefix_reuse", "speculative", "quantization",
            "parallelism", "hardware")
FEATURE_LABELS = {"status": "project status", "paging": "paged KV cache",
                  "continuous_batching": "continuous batching", "prefix_reuse": "prefix reuse across requests",
                  "speculative": "speculative decoding", "quantization": "quantized checkpoints",
                  "parallelism": "multi-GPU", "hardware": "hardware"}
HARDWARE = {"nvidia": "NVIDIA GPU", "amd": "AMD GPU", "intel_gpu": "Intel GPU", "apple": "Apple silicon",
            "cpu": "x86 or Arm CPU", "tpu": "Google TPU", "ascend": "Huawei Ascend NPU",
            "browser": "web browser (WebGPU)"}
QUANT_NEEDS = {"any": "any (or none)", "fp8": "FP8", "awq_gptq": "4-bit AWQ or GPTQ", "gguf": "GGUF",
               "fp4": "FP4 (NVFP4 or MXFP4)"}
QUANT_TAGS = {"fp8": ("fp8",), "awq_gptq": ("awq", "gptq"), "gguf": ("gguf",), "fp4": ("fp4",)}  # need -> tags
TAG_LABELS = {"nvidia": "NVIDIA", "amd": "AMD", "intel_gpu": "Intel GPU", "apple": "Apple", "cpu": "CPU",
              "tpu": "TPU", "ascend": "Ascend", "browser": "browser", "fp8": "FP8", "awq": "AWQ", "gptq": "GPTQ",
              "gguf": "GGUF", "fp4": "FP4", "tp": "one server", "multi_node": "multi-node", "ep": "EP"}
MULTI_GPU_NEEDS = {"none": "one GPU is enough", "tp": "split over the GPUs of one server",
                   "multi_node": "span several servers", "ep": "expert parallelism for MoE"}


@dataclass(frozen=True)
class Claim:
    """What one source says about one feature of one engine."""

    status: str                 # one of STATUSES
    detail: str                 # the specific statement, in the guide's words
    source: str                 # key in site/references.toml
    tags: tuple = ()            # machine-readable values the chooser matches (hardware, formats, parallelism)
    as_of: str = AS_OF          # date the source was read (ISO 8601)

    def __post_init__(self) -> None:
        check_choice("status", self.status, STATUSES, "claim statuses")


@dataclass(frozen=True)
class Engine:
    """One inference engine and its claims, one per feature."""

    key: str
    name: str
    maintained: bool            # False: maintenance mode or archived
    claims: dict                # feature -> Claim


def _c(status, detail, source, *tags) -> Claim:
    return Claim(status, detail, source, tuple(tags))


NC = "not confirmed"

ENGINES: tuple = (
    Engine("vllm", "vLLM", True, {
        "status": _c("yes", "actively developed", "VLLM_DOCS"),
        "paging": _c("yes", "PagedAttention: the cache in fixed-size blocks with block tables", "R6"),
        "continuous_batching": _c("yes", "continuous batching of incoming requests", "VLLM_DOCS"),
        "prefix_reuse": _c("yes", "automatic prefix caching (hashed full blocks)", "VLLM_DOCS"),
        "speculative": _c("yes", "speculative decoding (draft models, n-gram, EAGLE and others)", "VLLM_DOCS"),
        "quantization": _c("yes", "AWQ, GPTQ, FP8 and INT8 W8A8, INT4 W4A16, GGUF, bitsandbytes", "VLLM_QUANT",
                           "fp8", "awq", "gptq", "gguf"),
        "parallelism": _c("yes", "tensor and pipeline parallelism across servers; expert and data parallelism",
                          "R34", "tp", "multi_node", "ep"),
        "hardware": _c("yes", "NVIDIA CUDA, AMD ROCm, Intel XPU; x86, Arm and Apple-silicon CPUs; TPU, Gaudi, "
                              "Ascend through plugins", "VLLM_HW",
                       "nvidia", "amd", "intel_gpu", "cpu", "apple", "tpu", "ascend"),
    }),
    Engine("sglang", "SGLang", True, {
        "status": _c("yes", "actively developed", "SGLANG_README"),
        "paging": _c("yes", "paged attention", "SGLANG_README"),
        "continuous_batching": _c("yes", "continuous batching with an overlapped CPU scheduler", "SGLANG_README"),
        "prefix_reuse": _c("yes", "RadixAttention: cached prefixes kept in a radix tree", "R28"),
        "speculative": _c("yes", "EAGLE-2/3, MTP, draft model, n-gram", "SGLANG_SPEC"),
        "quantization": _c("yes", "FP4, FP8, INT4, AWQ, GPTQ", "SGLANG_README", "fp8", "awq", "gptq", "fp4"),
        "parallelism": _c("yes", "tensor, pipeline, expert and data parallelism; multi-node deployment",
                          "SGLANG_README", "tp", "multi_node", "ep"),
        "hardware": _c("yes", "NVIDIA, AMD, Intel Xeon CPUs, Google TPU, Ascend NPU", "SGLANG_DOCS",
                       "nvidia", "amd", "cpu", "tpu", "ascend"),
    }),
    Engine("trtllm", "TensorRT-LLM", True, {
        "status": _c("yes", "actively developed by NVIDIA", "TRTLLM_DOCS"),
        "paging": _c("yes", "paged KV cache", "TRTLLM_DOCS"),
        "continuous_batching": _c("yes", "in-flight batching", "TRTLLM_DOCS"),
        "prefix_reuse": _c("yes", "KV cache reuse across requests", "TRTLLM_DOCS"),
        "speculative": _c("yes", "draft model, n-gram, Medusa, EAGLE", "TRTLLM_DOCS"),
        "quantization": _c("yes", "FP8, NVFP4 and MXFP4, INT4 AWQ and GPTQ, INT8 SmoothQuant", "TRTLLM_DOCS",
                           "fp8", "awq", "gptq", "fp4"),
        "parallelism": _c("yes", "tensor, pipeline and expert parallelism, multi-node", "TRTLLM_DOCS",
                          "tp", "multi_node", "ep"),
        "hardware": _c("yes", "NVIDIA GPUs", "TRTLLM_DOCS", "nvidia"),
    }),
    Engine("llamacpp", "llama.cpp", True, {
        "status": _c("yes", "actively developed", "R29"),
        "paging": _c(NC, "the server's KV cache is shared by slots; block paging is not stated", "LLAMACPP_SERVER"),
        "continuous_batching": _c("yes", "continuous batching, parallel decoding for several users",
                                  "LLAMACPP_SERVER"),
        "prefix_reuse": _c("partial", "cache_prompt: a request reuses the cached prefix of the previous request "
                                      "in its slot", "LLAMACPP_SERVER"),
        "speculative": _c("yes", "speculative decoding with a draft model", "LLAMACPP_SERVER"),
        "quantization": _c("yes", "GGUF files with 1.5- to 8-bit integer quantization", "R29", "gguf"),
        "parallelism": _c("partial", "--split-mode layer (layers per GPU) or row (matrices split) over the GPUs "
                                     "of one machine", "LLAMACPP_SERVER", "tp"),
        "hardware": _c("yes", "Apple silicon (Metal), x86 and Arm CPUs, NVIDIA (CUDA), AMD (HIP), Vulkan, "
                              "SYCL, MUSA", "R29", "apple", "cpu", "nvidia", "amd", "intel_gpu"),
    }),
    Engine("lmdeploy", "LMDeploy", True, {
        "status": _c("yes", "actively developed", "LMDEPLOY"),
        "paging": _c("yes", "paged attention in the TurboMind engine", "LMDEPLOY"),
        "continuous_batching": _c("yes", "persistent batching (continuous batching)", "LMDEPLOY"),
        "prefix_reuse": _c("partial", "a conversation's cache is kept between turns; sharing a prefix between "
                                      "different requests is not stated", "LMDEPLOY"),
        "speculative": _c(NC, "not stated in the pages read", "LMDEPLOY"),
        "quantization": _c("yes", "4-bit AWQ weights (W4A16), INT8 and INT4 KV cache", "LMDEPLOY", "awq"),
        "parallelism": _c("yes", "tensor parallelism", "LMDEPLOY", "tp"),
        "hardware": _c("yes", "NVIDIA GPUs (TurboMind); Huawei Ascend (PyTorch engine)", "LMDEPLOY",
                       "nvidia", "ascend"),
    }),
    Engine("mlc", "MLC LLM", True, {
        "status": _c("yes", "actively developed", "MLC_LLM"),
        "paging": _c(NC, "not stated in the pages read", "MLC_LLM"),
        "continuous_batching": _c(NC, "not stated in the pages read", "MLC_LLM"),
        "prefix_reuse": _c(NC, "not stated in the pages read", "MLC_LLM"),
        "speculative": _c(NC, "not stated in the pages read", "MLC_LLM"),
        "quantization": _c("partial", "its own compiled formats, e.g. q4f16_1 (4-bit weights, fp16 compute)",
                           "MLC_LLM"),
        "parallelism": _c("partial", "multi-GPU on CUDA and ROCm; the kind of split is not stated", "MLC_LLM"),
        "hardware": _c("yes", "NVIDIA (CUDA, Vulkan), AMD (ROCm, Vulkan), Intel (Vulkan), Apple (Metal), "
                              "browsers (WebGPU), iOS, Android", "MLC_LLM",
                       "nvidia", "amd", "intel_gpu", "apple", "browser"),
    }),
    Engine("tgi", "TGI", False, {
        "status": _c("no", "maintenance mode from December 2025; repository archived on 2026-03-21", "TGI_ARCHIVED"),
        "paging": _c("yes", "Paged Attention", "TGI_DOCS"),
        "continuous_batching": _c("yes", "continuous batching of incoming requests", "TGI_DOCS"),
        "prefix_reuse": _c(NC, "not stated in the pages read", "TGI_DOCS"),
        "speculative": _c("yes", "Medusa heads and n-gram speculation", "TGI_DOCS"),
        "quantization": _c("yes", "bitsandbytes, GPTQ, AWQ, Marlin, EETQ, EXL2, FP8", "TGI_DOCS",
                           "fp8", "awq", "gptq"),
        "parallelism": _c("yes", "tensor parallelism over several GPUs", "TGI_DOCS", "tp"),
        "hardware": _c("partial", "NVIDIA GPUs; other accelerators not confirmed here", "TGI_DOCS", "nvidia"),
    }),
)


def get(key: str) -> Engine:
    """Look up an engine by key; ValueError lists the valid keys."""
    for e in ENGINES:
        if e.key == key:
            return e
    raise ValueError(f"unknown engine {key!r}; valid keys: {', '.join(e.key for e in ENGINES)}")


@checked_params
@dataclass(frozen=True)
class EngineNeedsParams:
    """What a deployment needs; the chooser keeps the engines whose documentation states all of it."""

    hardware: str = "nvidia"            # key of HARDWARE
    quantization: str = "any"           # key of QUANT_NEEDS: the checkpoint format to load
    multi_gpu: str = "none"             # key of MULTI_GPU_NEEDS
    prefix_reuse: bool = False          # requests share long prefixes (system prompts, agents)
    speculative: bool = False           # lower latency per user through speculative decoding
    include_unmaintained: bool = False  # also list engines in maintenance mode or archived

    def __post_init__(self) -> None:
        check_choice("hardware", self.hardware, tuple(HARDWARE), "hardware keys")
        check_choice("quantization", self.quantization, tuple(QUANT_NEEDS), "quantization needs")
        check_choice("multi_gpu", self.multi_gpu, tuple(MULTI_GPU_NEEDS), "multi-GPU needs")


@dataclass(frozen=True)
class EngineChoiceResult:
    """The comparison table and which engines fit the needs, with the reason for each."""

    engines: list               # display names, table order
    fits: np.ndarray            # (engines,) bool
    fitting: list               # names of the engines that fit, table order
    reasons: list               # per engine: the needs it meets, or the first need it misses and why
    features: list              # feature labels, column order
    status: list                # [engine][feature] claim status
    summary: list               # [engine][feature] short cell text: the status, or the matched values
    detail: list                # [engine][feature] claim detail
    source: list                # [engine][feature] reference key
    as_of: list                 # [engine][feature] date the source was read
    needs: list                 # the needs applied, in words
    note: str


def _summary(feature: str, c: Claim) -> str:
    """A table cell: the values a need can match (formats, layouts, hardware), else the status."""
    if feature == "status":
        return "maintained" if c.status == "yes" else "archived"
    if c.tags:
        return ", ".join(TAG_LABELS[t] for t in c.tags)
    return c.status


def _miss(e: Engine, feature: str, need: str) -> str:
    c = e.claims[feature]
    if c.status == NC:
        return f"{need}: not confirmed in its documentation"
    return f"{need}: only in part ({c.detail})" if c.status == "partial" else f"{need}: {c.detail}"


def _check(e: Engine, p: EngineNeedsParams) -> tuple[bool, str]:
    """Whether engine `e` meets every need of `p`, and why (or the first need it misses)."""
    met = []
    if not e.maintained and not p.include_unmaintained:
        return False, f"not maintained: {e.claims['status'].detail}"
    hw = e.claims["hardware"]
    if p.hardware not in hw.tags:
        return False, f"{HARDWARE[p.hardware]}: not listed ({hw.detail})"
    met.append(HARDWARE[p.hardware])
    if p.quantization != "any":
        q = e.claims["quantization"]
        if not set(QUANT_TAGS[p.quantization]) & set(q.tags):
            return False, f"{QUANT_NEEDS[p.quantization]}: not listed ({q.detail})"
        met.append(QUANT_NEEDS[p.quantization])
    if p.multi_gpu != "none":
        par = e.claims["parallelism"]
        if p.multi_gpu not in par.tags:
            return False, f"{MULTI_GPU_NEEDS[p.multi_gpu]}: not listed ({par.detail})"
        met.append(MULTI_GPU_NEEDS[p.multi_gpu])
    for wanted, feature in ((p.prefix_reuse, "prefix_reuse"), (p.speculative, "speculative")):
        if wanted:
            if e.claims[feature].status != "yes":
                return False, _miss(e, feature, FEATURE_LABELS[feature])
            met.append(FEATURE_LABELS[feature])
    return True, "meets: " + "; ".join(met)


def choose_engines(params: EngineNeedsParams = EngineNeedsParams()) -> EngineChoiceResult:
    """Filter the engines by need: hardware, checkpoint format, multi-GPU layout, prefix reuse, speculation.

    Only claims with status "yes" (or, for hardware, formats and layouts, a listed tag) meet a
    need; "partial" and "not confirmed" do not, and the reason says which claim failed.

    >>> choose_engines(EngineNeedsParams(quantization="fp4", multi_gpu="multi_node")).fitting
    ['SGLang', 'TensorRT-LLM']
    """
    p = params
    checked = [_check(e, p) for e in ENGINES]
    needs = [HARDWARE[p.hardware]]
    if p.quantization != "any":
        needs.append(QUANT_NEEDS[p.quantization] + " checkpoints")
    if p.multi_gpu != "none":
        needs.append(MULTI_GPU_NEEDS[p.multi_gpu])
    needs += [FEATURE_LABELS[f] for wanted, f in ((p.prefix_reuse, "prefix_reuse"),
                                                   (p.speculative, "speculative")) if wanted]
    if not p.include_unmaintained:
        needs.append("maintained")
    grid = [[e.claims[f] for f in FEATURES] for e in ENGINES]
    return EngineChoiceResult(
        engines=[e.name for e in ENGINES], fits=np.array([ok for ok, _ in checked]),
        fitting=[e.name for e, (ok, _) in zip(ENGINES, checked) if ok],
        reasons=[why for _, why in checked], features=[FEATURE_LABELS[f] for f in FEATURES],
        status=[[c.status for c in row] for row in grid],
        summary=[[_summary(f, c) for f, c in zip(FEATURES, row)] for row in grid],
        detail=[[c.detail for c in row] for row in grid],
        source=[[c.source for c in row] for row in grid], as_of=[[c.as_of for c in row] for row in grid],
        needs=needs,
        note=(f"Each entry restates what the engine's documentation said when read on {AS_OF} (the key names the "
              "source on the references page). 'Not confirmed' means the pages read did not state it, not that "
              "the engine lacks it. Engines change often: check the current documentation before deciding."))
