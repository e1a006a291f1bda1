"""From a symptom of a slow or misbehaving deployment to what to measure and where to look.

A small decision table, not a simulation: for each symptom a reader can observe, the
measurements that tell its causes apart and the likely causes in the order to rule them
out, each with how to confirm it, the usual fix, and links to the chapters and figures of
this guide that explain it. Links are page files of the built site with an optional
anchor (a figure's anchor is "fig-<figure id>"); tests/test_checklist_links.py checks that
every one of them exists in the built site.

>>> r = checklist(ChecklistParams(symptom="slow-first-token"))
>>> r.title
'Slow first token'
>>> r.links[0][0].href
'ch05-latency.html?ch05-load.rate=40#fig-ch05-load'
"""
from __future__ import annotations

from dataclasses import dataclass

from sim.checks import check_choice, checked_params


@dataclass(frozen=True)
class Link:
    """A place in the guide: a page of the built site and, optionally, an anchor on it; for a
    figure, optionally the state its controls open at (the chapter page's address carries it
    as "<figure id>.<control>=<value>", docs/using-figures.md, "Sharing a figure")."""

    page: str                    # e.g. "ch05-latency.html"
    anchor: str | None           # e.g. "fig-ch05-latency" (a figure) or a section's id; None: the page
    label: str                   # what the reader sees, e.g. "ch05-latency"
    state: tuple[tuple[str, object], ...] = ()   # (control key, value) pairs, for a figure's anchor only

    @property
    def href(self) -> str:
        query = "&".join(f"{self.anchor[4:]}.{k}={_url_value(v)}" for k, v in self.state)
        return self.page + (f"?{query}" if query else "") + (f"#{self.anchor}" if self.anchor else "")


def _url_value(v: object) -> str:
    """A control value as the address writes it: true/false for yes/no, the number or option as is."""
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


@dataclass(frozen=True)
class Cause:
    short: str                   # a few words, for the diagram
    cause: str                   # the cause in a sentence
    confirm: str                 # the measurement or experiment that confirms it
    fix: str                     # the usual remedy
    links: tuple[Link, ...]


@dataclass(frozen=True)
class Symptom:
    title: str
    measure: tuple[tuple[str, str], ...]   # (short label, what to measure and how)
    causes: tuple[Cause, ...]              # most likely first


def _fig(figure_id: str, page: str, **state: object) -> Link:
    """A figure on its chapter page, opening at `state` (control key -> value) if given."""
    return Link(page, f"fig-{figure_id}", figure_id, tuple(state.items()))


def _sec(page: str, anchor: str, label: str) -> Link:
    return Link(page, anchor, label)


CH00, CH01, CH02, CH03 = "ch00-memory-wall.html", "ch01-one-call.html", "ch02-phases.html", "ch03-gpu.html"
CH04, CH05, CH06, CH07 = "ch04-batching.html", "ch05-latency.html", "ch06-kv-cache.html", "ch07-paging.html"
CH08, CH09, CH10 = "ch08-flash.html", "ch09-speculative.html", "ch10-quantization.html"
CH12, CH13, CH14 = "ch12-parallel.html", "ch13-engines.html", "ch14-model-vs-measured.html"

SYMPTOMS: dict[str, Symptom] = {
    "slow-first-token": Symptom(
        "Slow first token",
        (("TTFT split", "time to first token per request, split into time queued before the first step and "
                        "prefill time"),
         ("prompt lengths", "the distribution of prompt lengths, and how many prompts share a prefix"),
         ("load", "requests waiting and running over time")),
        (Cause("queueing", "Requests wait for a slot or behind other prompts' prefills.",
               "Queue time is most of the TTFT, and it grows with the arrival rate.",
               "Continuous batching, more replicas, or a lower load per GPU.",
               (_fig("ch05-load", CH05, rate=40), _fig("ch04-scheduler", CH04))),
         Cause("long prompts", "The prompts themselves are long: prefill is compute-bound and its attention "
                               "part grows with the square of the prompt.",
               "Prefill time alone is large, and it tracks prompt length.",
               "Shorter prompts, prefix caching, or faster prefill (fp8, more GPUs).",
               (_fig("ch05-latency", CH05, preset="summarise"), _fig("ch02-phases", CH02, prompt=131072))),
         Cause("no prefix reuse", "A shared system prompt is prefilled again for every request.",
               "Prefix-cache hit rate near zero while prompts share a long beginning.",
               "Turn on prefix caching and keep the shared part first and identical.",
               (_fig("ch07-paging", CH07, caching=False),)),
         Cause("small chunks", "Chunked prefill with a small budget spreads a long prompt over many steps.",
               "TTFT of long prompts falls when the token budget is raised.",
               "A larger token budget, or separate prefill and decode GPUs.",
               (_fig("ch04-scheduler", CH04, long_prompt=True, chunked=True),)),
         Cause("unfused attention", "Attention writes the score matrix to memory at long prompts.",
               "Prefill time grows much faster than the prompt; a profile shows large attention kernels.",
               "A FlashAttention kernel.",
               (_fig("ch08-flash", CH08, seq_len=131072),)))),
    "slow-streaming": Symptom(
        "Slow streaming with few users",
        (("TPOT", "time per output token of one request alone"),
         ("bytes per step", "weights plus the KV cache read per decode step, and their sum over TPOT "
                            "(the bandwidth achieved)"),
         ("GPU timeline", "a profile of one decode step: kernel time against gaps")),
        (Cause("weight reads", "Every step reads all the weights: the memory wall.",
               "Bytes per step / TPOT is near the GPU's bandwidth.",
               "Fewer bytes per weight (quantization), speculative decoding, a GPU with more bandwidth.",
               (_fig("ch00-decode-meter", CH00), _fig("ch10-quant", CH10), _fig("ch09-speculative-speedup", CH09))),
         Cause("long context", "Each step also reads the whole KV cache of the conversation.",
               "TPOT grows with the context length of the request.",
               "GQA models, an fp8 KV cache, shorter contexts.",
               (_fig("ch06-kv-budget", CH06), _fig("ch05-latency", CH05))),
         Cause("launch overhead", "The host issues kernels one by one and the GPU waits between them.",
               "Gaps between kernels in the profile; bytes / TPOT well below the bandwidth.",
               "CUDA graphs (the engine's default decode path), fewer, fused kernels.",
               (_sec(CH14, "fixed-costs", "ch14: fixed costs"),)),
         Cause("prefill stalls", "Other users' long prompts are prefilled in steps that leave decodes out.",
               "Occasional long gaps between tokens that coincide with new long prompts.",
               "Chunked prefill.",
               (_fig("ch04-scheduler", CH04, long_prompt=True),)),
         Cause("unsplit attention", "At long context and small batch the attention kernel does not spread "
                                    "the cache over all the SMs.",
               "Attention kernels dominate the profile and reach a small share of the bandwidth.",
               "A split-KV (Flash-Decoding) attention kernel.",
               (_sec(CH14, "long-contexts", "ch14: long contexts"), _fig("ch08-flash", CH08))))),
    "low-throughput": Symptom(
        "Low throughput when busy",
        (("running batch", "requests running per step over time"),
         ("KV usage", "share of the KV cache in use, and preemptions"),
         ("step time", "decode step time against the running batch")),
        (Cause("cache full", "The KV cache is full, so the batch cannot grow.",
               "KV usage near 100% and requests waiting while the batch is small.",
               "An fp8 KV cache, shorter maximum context, more GPU memory per replica.",
               (_fig("ch06-kv-budget", CH06), _fig("ch06-kv-size", CH06))),
         Cause("wasted cache", "Cache memory is reserved for whole maximum lengths, or fragmented.",
               "Many fewer tokens cached than the pool holds.",
               "A paged cache (block tables) and prefix sharing.",
               (_fig("ch07-paging", CH07),)),
         Cause("static batches", "Batches are formed once and padded until their longest request ends.",
               "Slots hold finished requests; throughput rises with continuous batching.",
               "Continuous (iteration-level) batching.",
               (_fig("ch04-scheduler", CH04),)),
         Cause("past the knee", "The batch is past the knee: steps are compute-bound and more users no "
                                "longer add tokens per second.",
               "Step time grows in proportion to the batch.",
               "This is the GPU's limit: more GPUs, or fewer FLOPs per token (fp8, smaller model).",
               (_fig("ch04-batch-knee", CH04, batch=1024), _fig("ch12-parallel", CH12))),
         Cause("experts", "A mixture-of-experts model reads more experts as the batch grows.",
               "Weight bytes per step grow with the batch.",
               "Expert parallelism across GPUs; measure, since routing decides it.",
               (_fig("ch12-parallel", CH12), _sec(CH14, "experts", "ch14: experts"))))),
    "out-of-memory": Symptom(
        "Out of memory",
        (("weights", "bytes of the weights at their stored precision"),
         ("memory", "the memory the driver reports (MiB), and the share the engine may use"),
         ("cache and reserve", "the KV pool the engine allocates, and its activation reserve")),
        (Cause("weights too big", "The weights alone do not fit beside a useful cache.",
               "Weights take most of the usable memory; the engine reports a tiny KV pool.",
               "Quantize the weights or split the model over GPUs.",
               (_fig("ch06-kv-budget", CH06), _fig("ch10-quant", CH10),
                _fig("ch12-parallel", CH12, model="llama-3.1-405b"))),
         Cause("context x batch", "The maximum context times the number of sequences exceeds the cache.",
               "Failures at start-up with a large max model length, or preemptions under load.",
               "Lower the maximum context or the maximum batch; fp8 KV.",
               (_fig("ch06-kv-size", CH06, model="llama-3.1-70b", context=131072),)),
         Cause("GB and GiB", "Sizes were planned in GB while the driver counts MiB: an '80 GB' card has "
                             "less than 80 GiB.",
               "Planned sizes add up to the card's label, not to what the driver reports.",
               "Plan in the units the driver reports.",
               (_fig("ch03-hierarchy", CH03), _sec(CH06, None, "ch06-kv-cache"))),
         Cause("reservation", "Each request reserves its maximum length up front.",
               "Out of memory with far fewer tokens in use than the memory holds.",
               "A paged cache.",
               (_fig("ch07-paging", CH07),)),
         Cause("score matrix", "Attention materialises the score matrix at long prompts.",
               "Memory peaks during the prefill of long prompts only.",
               "A FlashAttention kernel.",
               (_fig("ch08-flash", CH08),)))),
    "idle-gpu": Symptom(
        "Idle GPU with a small model",
        (("utilisation", "GPU busy time per step from a profile, not the driver's 'utilisation' counter"),
         ("kernels per step", "kernels launched per decode step, and host time per step"),
         ("batch", "requests running at once")),
        (Cause("host-bound", "The host cannot issue kernels as fast as a small model runs them.",
               "Gaps between kernels; step time barely changes with model size.",
               "CUDA graphs, fused kernels, a compiled model.",
               (_sec(CH14, "fixed-costs", "ch14: fixed costs"),)),
         Cause("batch of one", "One user at a time leaves the arithmetic units idle: decode is "
                               "memory-bound.",
               "Tensor cores nearly idle at batch 1.",
               "Serve more users at once; batching is nearly free below the knee.",
               (_fig("ch04-batch-knee", CH04), _fig("ch00-decode-meter", CH00))),
         Cause("engine overhead", "Scheduling, sampling and detokenising between steps take longer than "
                                  "the step.",
               "CPU time per step comparable to GPU time.",
               "An engine with asynchronous scheduling; fewer per-step host operations.",
               (_sec(CH14, "fixed-costs", "ch14: fixed costs"), _fig("ch13-engines", CH13))),
         Cause("small kernels", "Kernels too small to reach the bandwidth the roofline assumes.",
               "Measured kernel times well above bytes / bandwidth.",
               "Larger batches; fused kernels.",
               (_fig("ch14-model-vs-measured", CH14), _fig("ch03-roofline", CH03))))),
    "outputs-differ": Symptom(
        "Outputs that differ run to run",
        (("sampling settings", "temperature, top-p and seed of each request"),
         ("alone vs loaded", "the same prompt at temperature 0, once alone and once on a busy server"),
         ("versions", "engine, kernel and quantization versions of both runs")),
        (Cause("sampling", "Sampling at a temperature above 0 is random by design.",
               "Outputs repeat with temperature 0 or a fixed seed on an idle server.",
               "Set temperature 0 (or a seed) where repeatability matters.",
               (_fig("ch01-pipeline", CH01),)),
         Cause("batch-dependent sums", "Kernels reduce in an order that depends on the batch, and the "
                                       "batch depends on the load.",
               "Alone the prompt repeats; on a busy server it does not.",
               "Batch-invariant kernels, at a cost in speed.",
               (_sec(CH04, "batch-invariance", "ch04: batching can change the answer"),
                _sec(CH14, "determinism", "ch14: determinism"))),
         Cause("changed model or kernels", "A different precision, kernel or engine version computes "
                                           "slightly different numbers.",
               "Differences appear after an upgrade or a change of quantization.",
               "Pin versions; evaluate quality after every change.",
               (_sec(CH14, "quality", "ch14: quality"),)))),
}


@checked_params
@dataclass(frozen=True)
class ChecklistParams:
    symptom: str = "slow-first-token"    # a key of SYMPTOMS

    def __post_init__(self) -> None:
        check_choice("symptom", self.symptom, tuple(SYMPTOMS))


@dataclass(frozen=True)
class ChecklistResult:
    symptom: str
    title: str
    measure_short: tuple[str, ...]       # (measurements,)
    measure: tuple[str, ...]
    cause_short: tuple[str, ...]         # (causes,) most likely first
    causes: tuple[str, ...]
    confirm: tuple[str, ...]
    fixes: tuple[str, ...]
    links: tuple[tuple[Link, ...], ...]  # (causes,) places in the guide for each cause
    note: str


def checklist(params: ChecklistParams = ChecklistParams()) -> ChecklistResult:
    """What to measure for a symptom, and its likely causes in the order to rule them out."""
    s = SYMPTOMS[params.symptom]
    return ChecklistResult(
        symptom=params.symptom, title=s.title,
        measure_short=tuple(m[0] for m in s.measure), measure=tuple(m[1] for m in s.measure),
        cause_short=tuple(c.short for c in s.causes), causes=tuple(c.cause for c in s.causes),
        confirm=tuple(c.confirm for c in s.causes), fixes=tuple(c.fix for c in s.causes),
        links=tuple(c.links for c in s.causes),
        note=("The order is the usual likelihood in a deployment, a judgement rather than a "
              "measurement: rule out the first cause before the next. Links open the chapter "
              "at the figure or section that explains the cause."))


def all_links() -> list[Link]:
    """Every link of every symptom (for the test that checks they exist in the built site)."""
    return [link for s in SYMPTOMS.values() for c in s.causes for link in c.links]
