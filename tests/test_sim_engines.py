"""The engine comparison: every claim carries a source and a date, and the chooser keeps exactly
the engines whose documented features meet every need."""
from __future__ import annotations

import datetime
import tomllib
from pathlib import Path

import pytest

from sim import engines as E

REFERENCES = {r["key"] for r in tomllib.loads(
    (Path(__file__).resolve().parents[1] / "site" / "references.toml").read_text())["references"]}
CLAIMS = [(e.key, f, e.claims.get(f)) for e in E.ENGINES for f in E.FEATURES]


@pytest.mark.parametrize("engine, feature, claim", CLAIMS, ids=[f"{e}-{f}" for e, f, _ in CLAIMS])
def test_every_claim_has_a_source_a_date_and_a_status(engine, feature, claim):
    assert claim is not None, f"{engine} says nothing about {feature}"
    assert claim.source in REFERENCES, f"{engine}.{feature}: source {claim.source!r} is not in references.toml"
    assert datetime.date.fromisoformat(claim.as_of) <= datetime.date(2026, 12, 31)
    assert claim.status in E.STATUSES and claim.detail.strip()
    if claim.status == "not confirmed":
        assert claim.tags == (), "an unconfirmed claim cannot satisfy a need"


def test_the_engines_the_chapter_names_are_all_there():
    assert {"vllm", "sglang", "trtllm", "llamacpp", "tgi"} <= {e.key for e in E.ENGINES}
    assert all(set(e.claims) == set(E.FEATURES) for e in E.ENGINES)


def test_tgi_is_archived_on_the_date_the_plan_states():
    tgi = E.get("tgi")
    assert not tgi.maintained and "2026-03-21" in tgi.claims["status"].detail


def fitting(**needs) -> list[str]:
    r = E.choose_engines(E.EngineNeedsParams(**needs))
    assert r.fitting == [name for name, ok in zip(r.engines, r.fits) if ok]
    return r.fitting


@pytest.mark.parametrize("needs, expected", [
    ({}, ["vLLM", "SGLang", "TensorRT-LLM", "llama.cpp", "LMDeploy", "MLC LLM"]),
    ({"include_unmaintained": True}, ["vLLM", "SGLang", "TensorRT-LLM", "llama.cpp", "LMDeploy", "MLC LLM", "TGI"]),
    ({"hardware": "apple"}, ["vLLM", "llama.cpp", "MLC LLM"]),
    ({"hardware": "browser"}, ["MLC LLM"]),
    ({"hardware": "ascend"}, ["vLLM", "SGLang", "LMDeploy"]),
    ({"quantization": "gguf"}, ["vLLM", "llama.cpp"]),
    ({"quantization": "awq_gptq"}, ["vLLM", "SGLang", "TensorRT-LLM", "LMDeploy"]),   # LMDeploy by AWQ alone
    ({"quantization": "fp4", "multi_gpu": "multi_node"}, ["SGLang", "TensorRT-LLM"]),
    ({"multi_gpu": "ep"}, ["vLLM", "SGLang", "TensorRT-LLM"]),
    ({"hardware": "amd", "multi_gpu": "tp", "prefix_reuse": True, "speculative": True}, ["vLLM", "SGLang"]),
    ({"speculative": True, "include_unmaintained": True}, ["vLLM", "SGLang", "TensorRT-LLM", "llama.cpp", "TGI"]),
])
def test_chooser_keeps_exactly_the_engines_that_meet_every_need(needs, expected):
    assert fitting(**needs) == expected


def test_reasons_name_the_missing_need_and_the_claim_behind_it():
    r = E.choose_engines(E.EngineNeedsParams(hardware="amd", prefix_reuse=True))
    why = dict(zip(r.engines, r.reasons))
    assert why["TensorRT-LLM"] == "AMD GPU: not listed (NVIDIA GPUs)"
    assert why["llama.cpp"].startswith("prefix reuse across requests: only in part (cache_prompt")
    assert why["vLLM"] == "meets: AMD GPU; prefix reuse across requests"
    spec = E.choose_engines(E.EngineNeedsParams(speculative=True))
    why_not = dict(zip(spec.engines, spec.reasons))
    assert why_not["MLC LLM"] == "speculative decoding: not confirmed in its documentation"


def test_table_is_engines_by_features():
    r = E.choose_engines()
    assert len(r.status) == len(r.engines) == len(E.ENGINES)
    assert all(len(row) == len(r.features) == len(E.FEATURES) for row in r.status + r.source + r.as_of)
    assert r.needs == ["NVIDIA GPU", "maintained"]
    cells = dict(zip(r.engines, r.summary))
    assert cells["TGI"][0] == "archived" and cells["llama.cpp"][r.features.index("quantized checkpoints")] == "GGUF"
    assert cells["TensorRT-LLM"][-1] == "NVIDIA" and cells["MLC LLM"][1] == "not confirmed"


@pytest.mark.parametrize("field, value, match", [
    ("hardware", "gaudi2", "valid hardware keys: nvidia"),
    ("quantization", "int3", "valid quantization needs: any"),
    ("multi_gpu", "zero", "valid multi-GPU needs: none"),
])
def test_bad_needs_are_refused_by_name(field, value, match):
    with pytest.raises(ValueError, match=f"{field}.*{match}"):
        E.EngineNeedsParams(**{field: value})


def test_unknown_engine_lists_the_keys():
    with pytest.raises(ValueError, match="valid keys: vllm, sglang"):
        E.get("ollama")
