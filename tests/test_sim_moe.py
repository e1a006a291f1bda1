"""Mixture of experts and latent attention (sim.moe, sim.mla): the models' parameter counts
against their model cards, the experts a step touches against the closed form, the step's
bytes against sim.forward's for a catalogue model, and the cache per token from the shapes."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim import hardware
from sim.forward import decode_weight_bytes
from sim.kv import kv_bytes_per_token
from sim.mla import MlaParams, mla_attention
from sim.moe import MOE_MODELS, MoeParams, experts_touched, moe_decode, routing_probabilities
from sim.ops import expected_experts_touched
from sim.quant import Precision


@pytest.mark.parametrize("key, total, active", [
    ("mixtral-8x7b", 46.7e9, 12.9e9),         # Mixtral paper: 47 B (46.7 B on its model card), 13 B active
    ("qwen3-235b-a22b", 235e9, 22e9),         # Qwen3 report, Table 2
    ("deepseek-v3", 671e9, 37e9),             # DeepSeek-V3 report: 671 B, 37 B activated
])
def test_parameter_counts_match_the_model_cards(key, total, active):
    m = MOE_MODELS[key]
    assert m.total_params == pytest.approx(total, rel=0.005)
    assert m.active_params == pytest.approx(active, rel=0.02)


def test_uniform_routing_is_the_closed_form_and_the_sum_agrees():
    for key, m in MOE_MODELS.items():
        p = routing_probabilities(m.routed_experts, m.experts_per_token, 0.0)
        assert p.sum() == pytest.approx(m.experts_per_token) and np.allclose(p, m.experts_per_token / m.routed_experts)
        tokens = np.array([1, 2, 7, 32, 256, 4096])
        closed = [expected_experts_touched(m.routed_experts, m.experts_per_token, t) for t in tokens]
        assert experts_touched(p, tokens) == pytest.approx(closed)
        nudged = p * (1 + 1e-12 * np.arange(len(p)))      # the general sum, not the closed form's branch
        assert experts_touched(nudged, tokens) == pytest.approx(closed, rel=1e-9)
    assert experts_touched(routing_probabilities(256, 8, 0.0), 1) == pytest.approx(8.0)


@pytest.mark.parametrize("skew", [0.25, 1.0, 3.0])
def test_skewed_routing_keeps_k_experts_a_token_and_none_above_certain(skew):
    p = routing_probabilities(256, 8, skew)
    assert p.sum() == pytest.approx(8.0) and p.max() <= 1.0 + 1e-12 and np.all(np.diff(p) <= 1e-15)
    assert p[0] > 8 / 256
    # the step at batch 1 still reads k experts; a skewed router touches fewer at a middling batch
    assert experts_touched(p, 1) == pytest.approx(8.0)
    assert experts_touched(p, 64) < expected_experts_touched(256, 8, 64)


def test_mixtral_step_bytes_are_sim_forwards():
    for seqs in (1, 2, 3, 16, 64):
        r = moe_decode(MoeParams(model="mixtral-8x7b", weights="bf16", ep_gpus=8, batch=seqs))
        assert r.step_bytes_at_batch == pytest.approx(decode_weight_bytes("mixtral-8x7b", Precision(), seqs), rel=1e-5)
    assert r.moe_step_bytes[0] == pytest.approx(decode_weight_bytes("mixtral-8x7b", Precision(), 1), rel=1e-5)


def test_one_token_reads_what_a_dense_model_of_the_active_size_reads():
    for key in MOE_MODELS:
        r = moe_decode(MoeParams(model=key, ep_gpus=8, batch=1))
        assert r.step_bytes_at_batch == pytest.approx(r.dense_step_bytes)
        assert r.moe_step_bytes[-1] == pytest.approx(r.all_weight_bytes, rel=1e-6)     # 131,072 tokens: all


def test_compute_bound_batches_are_the_smallest_that_reach_the_ridge():
    r = moe_decode()                                    # DeepSeek-V3, fp8 on an H100
    g = hardware.get("H100-SXM")
    ridge = g.dense_flops["fp8"] / g.hbm_bandwidth_bytes_per_s
    assert r.ridge == ridge and round(ridge) == 591
    assert r.compute_bound_batch_dense == math.ceil(ridge / 2)     # 2 FLOP a weight a token, a byte a weight
    B = int(r.compute_bound_batch_moe)
    intensity = lambda t: 2 * t * 8 / expected_experts_touched(256, 8, t)       # noqa: E731
    assert intensity(B) >= ridge > intensity(B - 1)
    assert B == pytest.approx(ridge * 256 / (2 * 8), rel=0.01)     # every expert touched: Bk/E tokens each


def test_memory_per_gpu_and_the_all_to_all():
    m, r = MOE_MODELS["deepseek-v3"], moe_decode(MoeParams(ep_gpus=64))
    assert r.tp_bytes_per_gpu == pytest.approx(m.total_params / 64)
    assert r.ep_bytes_per_gpu == pytest.approx(m.total_params - m.routed_params * 63 / 64)
    assert r.dispatch_bytes_per_token_layer == 8 * 7168 * 1 * 63 / 64       # fp8 out
    assert r.combine_bytes_per_token_layer == 8 * 7168 * 2 * 63 / 64        # bf16 back
    nvlink = hardware.get("H100-SXM").nvlink_bandwidth_bytes_per_s / 2
    assert r.a2a_step_s["NVLink"] == pytest.approx(4096 / 64 * (8 * 7168 * 3 * 63 / 64) * 58 / nvlink)
    assert r.busiest_gpu_load == pytest.approx(1.0) and r.gpu_load.mean() == pytest.approx(1.0)
    hot = moe_decode(MoeParams(skew=1.0))
    assert hot.gpu_load.mean() == pytest.approx(1.0) and hot.busiest_gpu_load > 5


@pytest.mark.parametrize("kw, message", [
    (dict(model="mixtral-8x7b", ep_gpus=16), "8 routed experts"),
    (dict(ep_gpus=3), "must be an integer|must divide"),
    (dict(skew=-0.1), "skew"),
    (dict(gpu="A100-80GB"), "GPUs"),
    (dict(batch=0), "batch"),
    (dict(batch=10 ** 9), "batch"),
])
def test_bad_input_is_refused_with_a_message(kw, message):
    with pytest.raises(ValueError, match=message):
        MoeParams(**kw)


def test_latent_attention_caches_576_elements_a_layer():
    r = mla_attention()
    v = {x.key: x for x in r.variants}
    assert v["mla"].kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert v["mha"].kv_bytes_per_token == 61 * 128 * (192 + 128) * 2
    assert v["gqa"].kv_bytes_per_token == 61 * 8 * 320 * 2 and v["mqa"].kv_bytes_per_token == 61 * 320 * 2
    assert v["mla"].intensity == pytest.approx(128 * 2 * (576 + 512) / (576 * 2))      # 241.8 FLOP/byte
    assert v["mha"].intensity == pytest.approx(1.0)
    assert r.model_kv["Llama 3.1 8B"] == kv_bytes_per_token("llama-3.1-8b") == 131_072
    g = hardware.get("H200")
    c = 32768                     # the default context
    for x in r.variants:
        assert x.step_s == pytest.approx(max(c * x.kv_bytes_per_token / g.hbm_bandwidth_bytes_per_s,
                                             c * x.flops_per_context_token / g.dense_flops["bf16"]))
        assert x.tokens_that_fit == int(r.kv_budget_bytes // x.kv_bytes_per_token)
    assert v["mla"].bound == "compute" and v["gqa"].bound == "memory"
    assert r.kv_budget_bytes == pytest.approx(8 * (0.9 * g.memory_bytes - 2 * 2 ** 30) - MOE_MODELS["deepseek-v3"].total_params)


def test_an_fp8_cache_halves_bytes_and_a_deployment_too_small_holds_none():
    a, b = mla_attention(), mla_attention(MlaParams(kv_dtype="fp8"))
    for x, y in zip(a.variants, b.variants):
        assert y.kv_bytes_per_token == x.kv_bytes_per_token / 2
    small = mla_attention(MlaParams(gpu="H100-SXM", gpus=8))     # 8 x 80 GB cannot hold 671 GB and a cache
    assert small.kv_budget_bytes == 0 and all(x.tokens_that_fit == 0 for x in small.variants)
    with pytest.raises(ValueError, match="KV dtypes"):
        MlaParams(kv_dtype="int4")


def test_choosing_mixtral_spreads_its_experts_over_the_gpus_it_can():
    """ch21-moe: Mixtral's 8 routed experts cannot go over the default 64 GPUs; choosing it sets
    the EP menu to 8 and the figure computes (no refusal), while EP over more stays a clear refusal."""
    import widgets

    view = widgets.build("ch21-moe")
    model, ep, numbers = view.controls["model"], view.controls["ep"], view.readouts["numbers"]
    assert ep.value == 64
    model.value = "mixtral-8x7b"
    assert ep.value == 8 and "fig-warning" not in numbers.object and "46.7 B stored" in numbers.object
    ep.value = 16
    assert "Not computed" in numbers.object and "8 routed experts" in numbers.object
    model.value = "deepseek-v3"
    assert ep.value == 16 and "fig-warning" not in numbers.object
