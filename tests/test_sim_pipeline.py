"""Stages of one forward call and where the weights live."""
from __future__ import annotations

import pytest

from sim import models, pipeline


def test_llama31_8b_pipeline():
    r = pipeline.describe_pipeline()
    b = models.parameter_breakdown("llama-3.1-8b")
    assert r.stage_repeats == [1, 1, 32, 32, 1, 1]
    read = dict(zip(r.stages, r.stage_weights_read))
    assert read["embed"] == 4096                       # one row of the table
    assert read["attention"] == b.attention and read["mlp"] == b.mlp
    assert read["head"] == 128256 * 4096 + 4096
    assert r.part_share.sum() == pytest.approx(1)
    assert r.part_share[r.parts.index("mlp")] == pytest.approx(0.70, abs=0.01)
    assert r.stage_flops[r.stages.index("mlp")] == 2 * b.mlp


def test_kv_is_reused_q_is_not():
    r = pipeline.describe_pipeline(pipeline.PipelineParams(tokens=5))
    assert r.kv_reads_per_token.tolist() == [5, 4, 3, 2, 1]
    assert r.q_reads_per_token.tolist() == [1] * 5


def test_tied_and_moe_models():
    tied = pipeline.describe_pipeline(pipeline.PipelineParams(model="llama-3.2-1b"))
    assert tied.tied_embeddings and tied.part_params[tied.parts.index("head")] == 0
    assert tied.stage_part[tied.stages.index("head")] == "embedding"
    moe = pipeline.describe_pipeline(pipeline.PipelineParams(model="mixtral-8x7b"))
    assert moe.stage_weights_read[moe.stages.index("mlp")] < moe.part_params[moe.parts.index("mlp")] / 3
    assert moe.active_params < moe.total_params


def test_bad_input():
    with pytest.raises(ValueError, match="unknown model"):
        pipeline.PipelineParams(model="x")


def test_the_result_carries_the_sampler_and_the_text_the_figure_shows():
    from sim import sampling

    sp = sampling.SamplingParams(temperature=0.5, top_p=0.9)
    r = pipeline.describe_pipeline(pipeline.PipelineParams(tokens=5, sampling=sp))
    assert repr(r.sampling) == repr(sampling.apply_sampling(sp))
    assert r.stage_weights_text == ["none", "4,096", "1.34 B", "5.64 B", "525 M", "none"]
    assert set(r.stage_notes) == {*r.stages, "repeat"}
    assert "70% of the stored weights" in r.stage_notes["mlp"]           # 5.64 B of 8.03 B
    assert "read 5 times" in r.stage_notes["repeat"]
    assert "reuses its embedding table" in pipeline.describe_pipeline(
        pipeline.PipelineParams(model="llama-3.2-1b")).stage_notes["head"]
    assert r.note.startswith("Llama 3.1 8B: 8.03 B weights stored")
