"""What microsoft/vidur published and how its files read: the models it profiled (with
their published configs), its device and op names, the columns of its CSV files, and
the checked readers of those columns (times in milliseconds, as published).

`python -m gpu_traces.import_profiles vidur` turns these into traces.
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

VIDUR_REPOSITORY = "https://github.com/microsoft/vidur"
LICENCE_NAME = "MIT"
LICENCE_COPY = "LICENSE.vidur"
MS = 1e-3                       # vidur's times are milliseconds
VIDUR_REPEATS = 20              # ACTIVE_STEPS of vidur/profiling/{mlp,collectives} at the imported commit
FP16_BYTES = 2                  # vidur profiles fp16 (model.to(dtype=torch.float16), collective buffers fp16)

# Token counts kept from vidur's grid (1, 2, 4, 8, then steps of 8 and 32 up to 4096, 259
# counts): a geometric-ish subset dense enough to follow every knee, so that the shipped
# traces stay a few MB. `--all-tokens` keeps every row. Recorded in each trace.
KEPT_TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
               448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096)
# Message sizes kept from the network profiles (2,048 + 8,192 i elements, up to 993 sizes):
# the size nearest each of 2,048 x 2^(j/2), j = 0..30.
KEPT_SIZE_TARGETS = tuple(2048 * 2 ** (j / 2) for j in range(31))


@dataclass(frozen=True)
class ProfiledModel:
    """The shape of one profiled model, from its published config."""

    hidden: int                 # hidden_size / n_embd
    heads: int                  # query heads
    kv_heads: int               # key/value heads
    ffn: int                    # intermediate size of the MLP (per matrix)
    gated: bool                 # gate and up projections (SiLU x up), fused as one GEMM by vidur
    bias: bool                  # biases on every linear layer
    qkv_bias: bool              # a bias on the QKV projection only
    norm: str                   # "rms_norm" | "layer_norm"
    sequential: bool            # attention then MLP with a residual add between (False: parallel block)
    config: str                 # where the numbers come from

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _hf(repo: str) -> str:
    return f"https://huggingface.co/{repo}/blob/main/config.json"


# The models vidur profiled, by the name its folders use. Numbers from each model's
# published config (Hugging Face config.json); vidur's own model configs
# (vidur/config/model_config.py) agree, and every CSV row carries n_head, n_kv_head,
# n_embd, n_expanded_embd and use_gated_mlp, which the importer checks against these.
PROFILED_MODELS: dict[str, ProfiledModel] = {
    "meta-llama/Llama-2-7b-hf": ProfiledModel(4096, 32, 32, 11008, True, False, False, "rms_norm",
                                              True, _hf("meta-llama/Llama-2-7b-hf")),
    "meta-llama/Llama-2-70b-hf": ProfiledModel(8192, 64, 8, 28672, True, False, False, "rms_norm",
                                               True, _hf("meta-llama/Llama-2-70b-hf")),
    "meta-llama/Meta-Llama-3-8B": ProfiledModel(4096, 32, 8, 14336, True, False, False, "rms_norm",
                                                True, _hf("meta-llama/Meta-Llama-3-8B")),
    "meta-llama/Meta-Llama-3-70B": ProfiledModel(8192, 64, 8, 28672, True, False, False,
                                                 "rms_norm", True,
                                                 _hf("meta-llama/Meta-Llama-3-70B")),
    "codellama/CodeLlama-34b-Instruct-hf": ProfiledModel(
        8192, 64, 8, 22016, True, False, False, "rms_norm", True,
        _hf("codellama/CodeLlama-34b-Instruct-hf")),
    "internlm/internlm-20b": ProfiledModel(5120, 40, 40, 13824, True, False, False, "rms_norm",
                                           True, _hf("internlm/internlm-20b")),
    # Qwen-72B's config states intermediate_size 49152 = gate + up together (24576 each)
    "Qwen/Qwen-72B": ProfiledModel(8192, 64, 64, 24576, True, False, True, "rms_norm", True,
                                   _hf("Qwen/Qwen-72B")),
    # phi-2: a parallel block (attention and MLP on the same LayerNorm output), GELU MLP
    "microsoft/phi-2": ProfiledModel(2560, 32, 32, 10240, False, True, True, "layer_norm", False,
                                     _hf("microsoft/phi-2")),
}

# vidur's device folder -> (catalogue GPU, why). vidur names devices "h100" and "a100"; its
# network profiles name the servers "h100_dgx" and "a100_dgx" (DGX servers carry the SXM
# parts), and its device configs (vidur/config/device_sku_config.py) give both 80 GB.
VIDUR_DEVICES = {
    "h100": ("H100-SXM", "vidur's 'h100' with network profiles of an 'h100_dgx': the H100 in a "
                         "DGX H100 server is the SXM5 80GB part"),
    "a100": ("A100-80GB", "vidur's 'a100' with network profiles of an 'a100_dgx' (a DGX "
                          "A100 carries SXM4 parts) and 80 GB in vidur's A100 device config"),
}
NETWORK_DEVICE = re.compile(r"^(h100|a100)_")

# vidur op -> (kind, our name); ops not listed here are dropped, with the reason in DROPPED_OPS
GEMM_OPS = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj",
            "mlp_up_proj": "gate_up_proj", "mlp_down_proj": "down_proj"}
NORM_OPS = ("input_layernorm", "post_attention_layernorm")
DROPPED_OPS = {
    "emb": "embedding lookup: a gather, not a kernel the calibration models",
    "attn_rope": "rotary embedding: not a kernel the calibration models",
}
STATS = ("min", "max", "mean", "median", "std")
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp",
                 "num_tokens", "num_tensor_parallel_workers")
NETWORK_COLUMNS = ("num_workers", "size", "collective", "devices_per_node")


class ImportError_(ValueError):
    """A source file that cannot be imported; the message names the file, row and column."""


# ------------------------------------------------------------------------------------
# Reading rows
# ------------------------------------------------------------------------------------

def _read_csv(path: Path, display: str, required: Sequence[str]) -> list[dict]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ImportError_(f"{display}: cannot read ({e.strerror})") from None
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    missing = [c for c in required if c not in header]
    if missing:
        raise ImportError_(f"{display}: header: missing column{'s' * (len(missing) > 1)} "
                           f"{', '.join(missing)}")
    rows = list(reader)
    if not rows:
        raise ImportError_(f"{display}: no data rows")
    for i, r in enumerate(rows, start=1):
        if None in r or any(v is None for v in r.values()):
            raise ImportError_(f"{display}: row {i}: {len(header)} columns in the header, "
                               f"a different number in the row")
    return rows


def _number(row: dict, col: str, display: str, i: int, *, positive: bool = True,
            integer: bool = False) -> float:
    raw = row[col]
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise ImportError_(f"{display}: row {i}, column {col}: {raw!r} is not a number") from None
    if not math.isfinite(x):
        raise ImportError_(f"{display}: row {i}, column {col}: {raw!r} is not finite")
    if integer and x != int(x):
        raise ImportError_(f"{display}: row {i}, column {col}: {raw!r} is not a whole number")
    if positive and x <= 0:
        raise ImportError_(f"{display}: row {i}, column {col}: {raw!r} must be positive "
                           f"(a time or size cannot be zero or negative)")
    if x < 0:
        raise ImportError_(f"{display}: row {i}, column {col}: {raw!r} is negative")
    return int(x) if integer else x


def _time(row: dict, op: str, display: str, i: int) -> dict:
    """The trace's time record from one op's statistics (ms -> s; nothing else changes)."""
    v = {s: _number(row, f"time_stats.{op}.{s}", display, i, positive=(s != "std"))
         for s in STATS}
    if not v["min"] <= v["median"] <= v["max"]:
        raise ImportError_(f"{display}: row {i}, column time_stats.{op}.median: "
                           f"{v['median']} ms is not between min {v['min']} and max {v['max']}")
    return {"median_s": v["median"] * MS, "min_s": v["min"] * MS, "max_s": v["max"] * MS,
            "mean_s": v["mean"] * MS, "std_s": v["std"] * MS, "repeats": VIDUR_REPEATS}


def _stat_columns(ops: Iterable[str]) -> list[str]:
    return [f"time_stats.{op}.{s}" for op in ops for s in STATS]
