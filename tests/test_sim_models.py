"""Model catalogue and parameter breakdowns."""
from __future__ import annotations

import pytest

from sim import models


def test_required_models_present():
    for name in ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-2-7b", "mixtral-8x7b"]:
        assert models.get(name).name == name


@pytest.mark.parametrize("name, total_b", [
    ("llama-3.1-8b", 8.03), ("llama-3.1-70b", 70.55), ("llama-3.1-405b", 405.85), ("llama-2-7b", 6.74),
    ("llama-3.2-1b", 1.24), ("gemma-7b", 8.54), ("mixtral-8x7b", 46.70),
])
def test_published_parameter_counts(name, total_b):
    assert models.parameter_breakdown(name).total / 1e9 == pytest.approx(total_b, abs=0.01)


def test_mixtral_total_vs_active():
    b = models.parameter_breakdown("mixtral-8x7b")
    assert b.active / 1e9 == pytest.approx(12.9, abs=0.05)     # Mixtral paper: 12.9 B active of 46.7 B
    assert b.router == 32 * 4096 * 8


def test_breakdown_parts_add_up():
    for name in models.names():
        b = models.parameter_breakdown(name)
        assert sum(b.parts().values()) == b.total


def test_tied_embeddings_store_no_head():
    b = models.parameter_breakdown("llama-3.2-1b")
    assert b.head == 0 and b.embedding == 128256 * 2048
    assert models.parameter_breakdown("llama-3.1-8b").head == 128256 * 4096


def test_head_dim_is_its_own_field():
    g = models.get("gemma-7b")
    assert g.head_dim * g.num_heads != g.hidden_size          # 16 x 256 = 4096 vs 3072
    assert g.linear_shapes()["qkv_proj"] == (3072, 3 * 4096)
    assert g.linear_shapes()["o_proj"] == (4096, 3072)


def test_linear_shapes_of_llama31_8b():
    assert models.get("llama-3.1-8b").linear_shapes() == {
        "qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672), "down_proj": (14336, 4096)}


def test_weight_bytes_by_dtype():
    assert models.weight_bytes("llama-3.1-8b", "fp8") == models.parameter_breakdown("llama-3.1-8b").total
    assert models.weight_bytes("llama-3.1-8b", "int4") == models.parameter_breakdown("llama-3.1-8b").total / 2


def test_unknown_model_lists_valid_names():
    with pytest.raises(ValueError, match="unknown model 'gpt-5'; valid names: llama-3.1-8b, llama-3.1-70b"):
        models.get("gpt-5")


def test_bad_configs_are_rejected():
    base = models.get("llama-3.1-8b")
    from dataclasses import replace
    with pytest.raises(ValueError, match="num_layers must be >= 1"):
        replace(base, num_layers=0)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        replace(base, num_kv_heads=5)
    with pytest.raises(ValueError, match="experts_per_token"):
        replace(base, num_experts=2, experts_per_token=3)
