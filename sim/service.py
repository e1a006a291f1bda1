"""Operating a service: traffic, admission, replicas and an autoscaler over chapter 04's scheduler (chapter 20).

A run follows one deployment through `duration_s` seconds of traffic:

1. **Arrivals.** Tenant A's requests come at `rate_per_s` on average, as a Poisson process
   with a constant rate, in bursts (a burst of `peak_to_mean` times the mean for 1 / (2 x
   peak_to_mean) of every minute, a lower rate in between, so the mean holds), or in a daily
   cycle compressed into the run (`sim.traffic.daily_shape`: a trough at the start and the
   end, the peak, k times the mean, half way). Tenant
   B sends Poisson arrivals at `b_rate_per_s` between `b_from_s` and `b_to_s`, with lengths
   of its own. Lengths are log-uniform from half to twice the chosen ones, as in chapter 19.
   Every stream is seeded; the workload is an assumption, not a trace.
2. **Admission.** Each tenant has a token bucket of `tenant_tokens_per_s` (None: no limit)
   holding `bucket_s` seconds of it. A request reserves its prompt plus `max_tokens` (twice
   the tenant's answer length, the top of its range) when it arrives, is rejected (HTTP 429)
   if the bucket holds less, and gets back what it did not generate when it finishes: a
   limit on tokens, not on requests, as API providers state theirs [OPENAI_LIMITS,
   ANTHROPIC_LIMITS].
3. **Replicas.** Each replica is one GPU running chapter 04's scheduler
   (`sim.scheduler.Scheduler`, continuous batching with chunked prefill), driven request by
   request: it preempts under KV pressure by recomputing or by swapping the KV to CPU
   memory over PCIe (`preemption`). The router sends each request to the ready replica
   with the fewest requests in it (waiting or running; Envoy's "least request"), as it
   last saw them: it looks at a replica again when it sends it a request, at every tick
   of the autoscaler, and whenever its view is older than `ROUTER_VIEW_S` (an assumption,
   like a metrics scrape; it keeps the simulation from stopping every replica at every
   arrival). With no replica ready a request waits at the gateway. A bucket's refunds
   arrive when the gateway next looks at the replica that finished the request.
4. **Autoscaler.** Every `interval_s` it reads one signal, as Kubernetes' horizontal pod
   autoscaler does [K8S_HPA]: the requests in each ready replica, waiting or running
   (the concurrency Knative scales on [KNATIVE_KPA]), the requests waiting (vLLM's
   `num_requests_waiting`), the share of KV blocks in use (`kv_cache_usage_perc`)
   [VLLM_METRICS], or the P99 TTFT of the last interval (the requests that got their first
   token in it, and the ages of those still waiting); it wants ceil(replicas x signal /
   target) replicas, leaves them alone within 10% of the target, scales up at once and
   down to the largest of its wishes over the last `scale_down_window_s` (the HPA's
   stabilisation window, 300 s by default, shortened here to fit the run), one replica at
   a time. A replica being removed takes no new requests and leaves when its last one is
   done. A new replica bills from the moment it is asked for and serves after its weights
   are loaded (weight bytes over the chosen storage link, at the link's line rate) plus
   `engine_start_s` (an assumption: process start, CUDA graph capture).
5. **A replica lost** at `lose_replica_at_s`: the oldest ready replica stops; its requests
   are sent again from scratch (their TTFT still counts from their first arrival).

Cost: every replica bills from the moment it is asked for until it leaves (or the last
request finishes), at `gpu_price_per_hour` (an assumption); cost per million output tokens
over the tokens the run generated. Capacity plan: one replica under Poisson arrivals of
tenant A's mix (chapter 05's `simulate_load`, `CAPACITY_REQUESTS` requests a rate), the
highest rate at which the P99 (and the P50) of TTFT and of TPOT stay within the limits,
interpolated in log rate between simulated rates; replicas for a rate = ceil(rate / that).

>>> r = service(ServiceParams(duration_s=60.0, rate_per_s=2.0, b_rate_per_s=0.0))
>>> r.rejected["A"], int(r.replicas_ready.min()) >= 1
(0, True)
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Optional

import numpy as np

from sim.checks import check_choice, check_int, check_range, checked_params
from sim.disagg import DisaggParams, capacities
from sim.forward import stored_weight_bytes
from sim.hardware import get as get_gpu
from sim.latency import SLO, simulate_load
from sim.models import get as get_model
from sim.models import names as model_names
from sim.prefix_cache import TIERS
from sim.scheduler import _ARRIVAL, PREEMPTIONS, Scheduler, SchedulerParams, _Req
from sim.traffic import ARRIVALS, TENANT_B, peak_rate, rate_at, workload  # noqa: F401
from sim.workload import RequestSpec

SIGNALS = ("concurrency", "queue", "kv", "ttft")
TOLERANCE = 0.1                     # the HPA's default: no change within 10% of the target [K8S_HPA]
ROUTER_VIEW_S = 1.0                 # the router's view of a replica's load is at most this old
CAPACITY_REQUESTS = 400             # requests per simulated rate of the capacity plan
CAPACITY_POINTS = 6                 # rates of the capacity plan, log-spaced
# where a new replica's weights come from: (name, label, bytes/s, source), line rates
WEIGHT_SOURCES = tuple(t for t in TIERS if t[0] in ("pcie5", "nvme", "net100")) + (
    ("net10", "object storage over 10 Gb/s Ethernet", 10e9 / 8, "one 10 Gb/s port"),)
WEIGHT_SOURCE_NAMES = tuple(t[0] for t in WEIGHT_SOURCES)
WEIGHT_RATES = {name: rate for name, _, rate, _ in WEIGHT_SOURCES}


@checked_params
@dataclass(frozen=True)
class ServiceParams:
    """Traffic, admission, replicas, autoscaler and price of one simulated deployment."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    duration_s: float = 180.0           # arrivals stop here; the run goes on until the last request is done
    arrivals: str = "bursty"            # tenant A: "poisson" | "bursty" | "daily"
    rate_per_s: float = 6.0             # tenant A's mean arrival rate
    peak_to_mean: float = 3.0           # bursty and daily arrivals
    prompt_tokens: int = 1024           # tenant A, geometric middle (half to twice)
    output_tokens: int = 512
    b_rate_per_s: float = 0.5           # tenant B: Poisson, between b_from_s and b_to_s
    b_prompt_tokens: int = 1024
    b_output_tokens: int = 512
    b_from_s: float = 0.0
    b_to_s: float = 180.0
    tenant_tokens_per_s: Optional[float] = 40_000.0   # each tenant's token bucket rate; None: no limit
    bucket_s: float = 10.0              # the bucket holds this many seconds of its rate
    max_batch: int = 128                # slots per replica
    token_budget: int = 2048            # chunked prefill tokens per step
    preemption: str = "recompute"       # "recompute" | "swap"
    signal: str = "concurrency"         # autoscaler signal: "concurrency" | "queue" | "kv" | "ttft"
    concurrency_target: float = 64.0    # requests in a ready replica (waiting or running)
    queue_target: float = 4.0           # waiting requests per ready replica
    kv_target: float = 0.8              # share of KV blocks in use
    min_replicas: int = 1
    max_replicas: int = 8
    initial_replicas: int = 2
    interval_s: float = 10.0            # the autoscaler's period
    scale_down_window_s: float = 60.0
    weights_from: str = "net100"
    engine_start_s: float = 20.0        # assumed: process start, CUDA graph capture
    lose_replica_at_s: Optional[float] = None
    ttft_slo_s: float = 1.0             # the limits (an illustrative chat service)
    tpot_slo_s: float = 0.05
    gpu_price_per_hour: float = 3.0     # dollars per GPU-hour: an assumption
    bin_s: float = 10.0                 # the time series' resolution
    seed: int = 0

    # bounds that keep a run (thousands of requests through one scheduler per replica) within seconds
    LIMITS = {"duration_s": (300.0, "s"), "rate_per_s": (30.0, "requests/s"), "b_rate_per_s": (10.0, "requests/s"),
              "prompt_tokens": (2 ** 15, "tokens"), "output_tokens": (2 ** 12, "tokens"),
              "b_prompt_tokens": (2 ** 16, "tokens"), "b_output_tokens": (2 ** 13, "tokens"),
              "token_budget": (2 ** 14, "tokens"), "max_replicas": (64, "replicas"),
              "gpu_price_per_hour": (1000.0, "dollars")}

    def __post_init__(self) -> None:
        check_choice("model", self.model, model_names())
        get_gpu(self.gpu)
        check_range("duration_s", self.duration_s, 10.0, 300.0)
        check_choice("arrivals", self.arrivals, ARRIVALS)
        check_range("rate_per_s", self.rate_per_s, 0.01, 30.0)
        check_range("peak_to_mean", self.peak_to_mean, 1.0, 10.0)
        for name in ("prompt_tokens", "b_prompt_tokens"):
            check_int(name, getattr(self, name), minimum=2)
        for name in ("output_tokens", "b_output_tokens"):
            check_int(name, getattr(self, name), minimum=2)
        check_range("b_rate_per_s", self.b_rate_per_s, 0.0, 10.0)
        check_range("b_from_s", self.b_from_s, 0.0, 300.0)
        check_range("b_to_s", self.b_to_s, self.b_from_s, 300.0)
        if self.tenant_tokens_per_s is not None:
            check_range("tenant_tokens_per_s", self.tenant_tokens_per_s, 1.0, 1e9)
        check_range("bucket_s", self.bucket_s, 0.1, 3600.0)
        check_int("max_batch", self.max_batch, minimum=1, maximum=1024)
        check_int("token_budget", self.token_budget, minimum=64, maximum=2 ** 14)
        check_choice("preemption", self.preemption, PREEMPTIONS, "preemption modes")
        check_choice("signal", self.signal, SIGNALS)
        check_range("concurrency_target", self.concurrency_target, 1.0, 100_000.0)
        check_range("queue_target", self.queue_target, 0.1, 1000.0)
        check_range("kv_target", self.kv_target, 0.05, 1.0)
        check_int("max_replicas", self.max_replicas, minimum=1)
        check_int("min_replicas", self.min_replicas, minimum=1, maximum=self.max_replicas)
        check_int("initial_replicas", self.initial_replicas, minimum=self.min_replicas, maximum=self.max_replicas)
        check_range("interval_s", self.interval_s, 1.0, 600.0)
        check_range("scale_down_window_s", self.scale_down_window_s, 0.0, 3600.0)
        check_choice("weights_from", self.weights_from, WEIGHT_SOURCE_NAMES, "weight sources")
        check_range("engine_start_s", self.engine_start_s, 0.0, 3600.0)
        if self.lose_replica_at_s is not None:
            check_range("lose_replica_at_s", self.lose_replica_at_s, 0.0, self.duration_s)
        check_range("ttft_slo_s", self.ttft_slo_s, 1e-3, 600.0)
        check_range("tpot_slo_s", self.tpot_slo_s, 1e-4, 10.0)
        check_range("gpu_price_per_hour", self.gpu_price_per_hour, 0.0, 1000.0)
        check_range("bin_s", self.bin_s, 1.0, self.duration_s)
        check_int("seed", self.seed, minimum=0)

    def scheduler(self) -> SchedulerParams:
        """One replica's engine."""
        return SchedulerParams(model=self.model, gpu=self.gpu, max_batch=self.max_batch, chunked_prefill=True,
                               token_budget=self.token_budget, preemption=self.preemption)

    def max_tokens(self, tenant: str) -> int:
        """The output cap a tenant's requests carry: the top of its answer lengths."""
        return 2 * (self.output_tokens if tenant == "A" else self.b_output_tokens)


def load_s(p: ServiceParams) -> float:
    """Seconds from asking for a replica to its first request: weights over the link, plus the engine's start."""
    return stored_weight_bytes(p.model) / WEIGHT_RATES[p.weights_from] + p.engine_start_s


@dataclass(frozen=True)
class CapacityPlan:
    """One replica's sustainable Poisson rate for tenant A's mix, judged at P50 and at P99."""

    rates_per_s: np.ndarray             # (CAPACITY_POINTS,) simulated rates
    worst_p50: np.ndarray               # (n,) max(P50 TTFT / limit, P50 TPOT / limit)
    worst_p99: np.ndarray               # (n,) the same at P99
    rate_p50_per_s: float               # highest rate with both P50s within the limits
    rate_p99_per_s: float               # highest rate with both P99s within the limits
    headroom: float                     # rate_p50 / rate_p99 - 1: what planning for the P99 costs in GPUs

    def replicas_for(self, rate_per_s: float) -> int:
        return math.ceil(rate_per_s / self.rate_p99_per_s) if self.rate_p99_per_s > 0 else 0


def _crossing(rates: np.ndarray, worst: np.ndarray) -> float:
    """The rate where `worst` first passes 1, interpolated in log-log between simulated rates."""
    over = np.nonzero(worst > 1.0)[0]
    if over.size == 0:
        return float(rates[-1])
    i = int(over[0])
    if i == 0:
        return 0.0
    x0, x1, y0, y1 = np.log(rates[i - 1]), np.log(rates[i]), np.log(worst[i - 1]), np.log(worst[i])
    return float(np.exp(x0 + (x1 - x0) * (0.0 - y0) / (y1 - y0)))


def capacity_plan(p: ServiceParams) -> CapacityPlan:
    """Chapter 05's loaded server at CAPACITY_POINTS rates from 0.5 to 1.25 x the step costs' bound, the
    workload as chapter 19 builds it from its middle lengths (`sim.disagg.DisaggParams.load`)."""
    return _capacity_plan(DisaggParams(
        model=p.model, gpu=p.gpu, prompt_tokens=p.prompt_tokens, output_tokens=max(4, p.output_tokens),
        ttft_slo_s=p.ttft_slo_s, tpot_slo_s=p.tpot_slo_s, requests=CAPACITY_REQUESTS, max_batch=p.max_batch,
        token_budget=p.token_budget, seed=p.seed))


@lru_cache(maxsize=8)
def _capacity_plan(d: DisaggParams) -> CapacityPlan:
    bound = capacities(replace(d, requests=DisaggParams.requests)).colocated   # chapter 19's bound, its own mix
    rates = np.geomspace(bound * 0.5, bound * 1.25, CAPACITY_POINTS)
    worst = {50: [], 99: []}
    for rate in rates:
        run = simulate_load(d.load(float(rate)))
        for q in worst:
            worst[q].append(max(np.percentile(run.ttft_s, q) / d.ttft_slo_s,
                                np.nanpercentile(run.tpot_s, q) / d.tpot_slo_s))
    w50, w99 = np.array(worst[50]), np.array(worst[99])
    r50, r99 = _crossing(rates, w50), _crossing(rates, w99)
    return CapacityPlan(rates, w50, w99, r50, r99, r50 / r99 - 1.0 if r99 > 0 else math.inf)


class Engine(Scheduler):
    """Chapter 04's scheduler driven request by request: the engine of one replica.

    `submit` hands it a request as it arrives and `Scheduler.run_until(t)` advances it to time
    t. A run of decode steps stops at t, so no step starts from knowledge of a later arrival,
    and the requests get the timeline `Scheduler.run` gives them all at once
    (tests/test_sim_service.py).
    """

    def __init__(self, params: SchedulerParams, start_s: float = 0.0):
        super().__init__(replace(params, requests=(RequestSpec("none", 0.0, 1, 1),)))
        self.reqs.clear()                   # drop the placeholder: requests come by submit
        self.events.clear()
        self.now = start_s

    def submit(self, spec: RequestSpec):
        """A request that arrives now or later; its arrival is handled no earlier than the present."""
        if self.kv.blocks_for(spec.prompt_tokens + spec.output_tokens) > self.kv.num_blocks:
            raise ValueError(f"request {spec.name!r} needs more KV than the capacity of {self.kv.capacity_tokens} "
                             f"tokens")
        r = _Req(len(self.reqs), spec)
        self.reqs.append(r)
        self._push(max(spec.arrival_s, self.now), _ARRIVAL, r.i)
        return r


class _Replica:
    __slots__ = ("sched", "asked_s", "ready_s", "drain_s", "leave_s", "lost", "cursor", "tenants", "seen_s")

    def __init__(self, p: ServiceParams, asked_s: float, ready_s: float):
        self.sched = Engine(p.scheduler(), ready_s)
        self.asked_s, self.ready_s = asked_s, ready_s
        self.drain_s = self.leave_s = math.inf     # when it stopped taking requests; when it left
        self.lost = False
        self.cursor = 0                     # finished requests already refunded
        self.seen_s = -math.inf             # when the router last looked
        self.tenants: list = []             # the tenant of each submitted request

    def load(self) -> int:
        return len(self.sched.reqs) - self.sched.done

    def serving(self, t: float) -> bool:
        return self.ready_s <= t < min(self.drain_s, self.leave_s)

    def settle(self, t: float) -> None:
        """A draining replica with nothing left leaves when its last request finished."""
        if self.drain_s <= t and self.leave_s == math.inf and self.load() == 0:
            self.leave_s = max(self.drain_s, max((r.finish for r in self.sched.finished), default=t))


@dataclass(frozen=True)
class ServiceResult:
    """Time series, totals and the capacity plan of one run."""

    params: ServiceParams
    model: str
    gpu: str
    bin_starts_s: np.ndarray            # (bins,)
    offered_per_s: np.ndarray           # (bins,) arrivals of both tenants
    rejected_per_s: np.ndarray          # (bins,)
    binned_ttft_p50_s: np.ndarray       # (bins,) of the requests admitted in the bin (nan: none)
    binned_ttft_p99_s: np.ndarray
    binned_tpot_p50_s: np.ndarray
    binned_tpot_p99_s: np.ndarray
    preemptions: np.ndarray             # (bins,) preemptions that happened in the bin (those after the last bin: totals only)
    replica_t_s: np.ndarray             # (changes,) times the deployment changed, from 0
    replicas_ready: np.ndarray          # (changes,) replicas serving from that time
    replicas_billed: np.ndarray         # (changes,) replicas billed from that time (serving, loading or draining)
    arrival_s: np.ndarray               # (requests,) every request of the workload, in arrival order
    tenant: np.ndarray                  # (requests,) "A" or "B"
    admitted: np.ndarray                # (requests,) bool: through its tenant's token bucket
    request_ttft_s: np.ndarray          # (requests,) from its first arrival (nan: rejected)
    request_tpot_s: np.ndarray          # (requests,) (nan: rejected)
    reserved_tokens: dict               # tenant -> prompt + max_tokens of its admitted requests
    refunded_tokens: dict               # tenant -> tokens given back while the traffic lasted
    requests: dict                      # tenant -> requests that arrived
    rejected: dict                      # tenant -> requests rejected by its token bucket
    attainment: dict                    # tenant -> share of its admitted requests meeting both limits
    ttft_p99_all_s: float
    tpot_p99_all_s: float
    preempted_requests: int             # requests preempted at least once
    preemptions_total: int
    recomputed_tokens: int              # KV tokens discarded by preemptions, to be computed again
    swapped_tokens: int                 # KV tokens copied to CPU memory by preemptions
    retried: int                        # requests sent again after their replica was lost
    output_tokens: int                  # tokens generated for admitted requests
    end_s: float                        # when the last request finished
    gpu_hours: float
    cost: float                         # dollars
    cost_per_m_tokens: float            # dollars per million output tokens
    static_replicas: int                # replicas to meet the P99 limits at the peak rate, all the time
                                        # (0: one replica misses them even at half its capacity bound)
    static_cost_per_m_tokens: float     # dollars per million output tokens with those, for the same run time
    ideal_share: float                  # GPU time of replicas that follow tenant A's rate with no delay,
                                        # ceil(rate(t) / P99 capacity) at every moment, over the static plan's
    kv_peak_share: float                # the largest share of a replica's KV blocks in use at any step
    load_s: float                       # asking for a replica -> its first request
    weight_bytes: float
    plan: CapacityPlan
    peak_rate_per_s: float              # tenant A's highest rate
    calibration_note: str


def _percentiles(bins: np.ndarray, values: np.ndarray, n: int, q: float) -> np.ndarray:
    out = np.full(n, np.nan)
    for b in range(n):
        v = values[(bins == b) & np.isfinite(values)]
        if v.size:
            out[b] = np.percentile(v, q)
    return out


def _desired(p: ServiceParams, ready: int, signal: float) -> int:
    """The HPA's rule: ceil(replicas x signal / target), unchanged within the tolerance."""
    target = {"concurrency": p.concurrency_target, "queue": p.queue_target, "kv": p.kv_target,
              "ttft": p.ttft_slo_s}[p.signal]
    ratio = signal / target
    if abs(ratio - 1.0) <= TOLERANCE:
        return ready
    return min(p.max_replicas, max(p.min_replicas, math.ceil(ready * ratio)))


def service(params: ServiceParams = ServiceParams()) -> ServiceResult:
    """Run the deployment through its traffic (module docstring); a new price reprices the same run."""
    r = _simulate(replace(params, gpu_price_per_hour=0.0))
    price = params.gpu_price_per_hour
    static_hours = r.static_replicas * r.end_s / 3600.0 if r.static_replicas else math.nan   # 0: no count meets P99
    return replace(r, params=params, cost=r.gpu_hours * price,
                   cost_per_m_tokens=r.gpu_hours * price / r.output_tokens * 1e6 if r.output_tokens else math.inf,
                   static_cost_per_m_tokens=static_hours * price / r.output_tokens * 1e6 if r.output_tokens else math.inf)


@lru_cache(maxsize=8)
def _simulate(p: ServiceParams) -> ServiceResult:
    arrivals = workload(p)
    startup = load_s(p)
    replicas = [_Replica(p, 0.0, 0.0) for _ in range(p.initial_replicas)]
    cost_note = replicas[0].sched.cost.calibration.note
    bucket_cap = {t: (p.tenant_tokens_per_s or 0.0) * p.bucket_s for t in "AB"}
    reserved = {"A": 0, "B": 0}
    refunded = {"A": 0, "B": 0}
    level = dict(bucket_cap)
    refilled = {"A": 0.0, "B": 0.0}
    placed: list = []                       # (arrival index, replica, its request), latest attempt last
    rejected_at: list = []
    gateway: list = []                      # arrival indices waiting for a ready replica
    history = [(0.0, p.initial_replicas)]   # (time, desired) of the autoscaler, from the start
    retried = 0

    def advance(rep: _Replica, t: float) -> None:
        if not rep.lost and rep.ready_s <= t:
            rep.seen_s = t
            rep.sched.run_until(t)
            fin = rep.sched.finished
            if p.tenant_tokens_per_s is not None:      # refund what finished requests did not generate
                for r in fin[rep.cursor:]:
                    ten = rep.tenants[r.i]
                    back = p.max_tokens(ten) - r.spec.output_tokens
                    level[ten] = min(bucket_cap[ten], level[ten] + back)
                    refunded[ten] += back
            rep.cursor = len(fin)
            rep.settle(t)

    def route(k: int, t: float) -> bool:
        live = [rep for rep in replicas if rep.serving(t)]
        if not live:
            return False
        for rep in live:
            if t - rep.seen_s > ROUTER_VIEW_S:
                advance(rep, t)
        rep = min(live, key=_Replica.load)
        advance(rep, t)
        rep.tenants.append(arrivals[k].tenant)
        placed.append((k, rep, rep.sched.submit(arrivals[k].spec)))
        return True

    events = [(a.spec.arrival_s, 1, k) for k, a in enumerate(arrivals)]
    events += [(t, 0, -1) for t in np.arange(p.interval_s, p.duration_s + 1e-9, p.interval_s)]
    if p.lose_replica_at_s is not None:
        events.append((p.lose_replica_at_s, 0, -2))
    heapq.heapify(events)
    while events:
        t, _, k = heapq.heappop(events)
        if k < 0:                           # the gateway looks at every replica
            for rep in replicas:
                advance(rep, t)
        if k == -3:                         # a replica became ready: the gateway's requests go out
            waiting, gateway[:] = list(gateway), []
            for j in waiting:
                if not route(j, t):
                    gateway.append(j)
            continue
        if k == -2:                         # the oldest serving replica is lost
            live = [rep for rep in replicas if rep.serving(t)]
            if live:
                dead = live[0]
                dead.lost, dead.leave_s = True, t
                again = [(j, r) for j, rep, r in placed if rep is dead and r.phase != "done"]
                placed[:] = [x for x in placed if x[1] is not dead or x[2].phase == "done"]
                for j, _ in again:
                    if not route(j, t):
                        gateway.append(j)
                retried += len(again)
            continue
        if k == -1:                         # the autoscaler's tick
            live = [rep for rep in replicas if rep.serving(t)]
            coming = [rep for rep in replicas if rep.ready_s > t and not rep.lost]
            if live:
                if p.signal == "concurrency":
                    signal = (sum(rep.load() for rep in live) + len(gateway)) / len(live)
                elif p.signal == "queue":
                    signal = sum(len(rep.sched.waiting) for rep in live) / len(live) + len(gateway) / len(live)
                elif p.signal == "kv":
                    signal = float(np.mean([rep.sched.kv.used_tokens / rep.sched.kv.capacity_tokens for rep in live]))
                else:
                    recent = [r.first - r.spec.arrival_s for rep in live for r in rep.sched.reqs
                              if t - p.interval_s < r.first <= t]
                    waiting = [t - r.spec.arrival_s for rep in live for r in rep.sched.waiting]
                    signal = float(np.percentile(recent + waiting, 99)) if recent or waiting else 0.0
                want = _desired(p, len(live), signal)
            else:
                want = p.min_replicas
            history.append((t, want))
            have = len(live) + len(coming)
            if want > have:
                for _ in range(want - have):
                    rep = _Replica(p, t, t + startup)
                    replicas.append(rep)
                    heapq.heappush(events, (t + startup, 0, -3))
            else:
                keep = max(w for s, w in history if s > t - p.scale_down_window_s - 1e-9)
                if keep < have and live and len(live) > p.min_replicas:
                    live[-1].drain_s = t
                    live[-1].settle(t)
            continue
        a = arrivals[k]                     # an arrival
        ten = a.tenant
        need = a.spec.prompt_tokens + p.max_tokens(ten)       # what it reserves
        if p.tenant_tokens_per_s is not None:
            level[ten] = min(bucket_cap[ten], level[ten] + (t - refilled[ten]) * p.tenant_tokens_per_s)
            refilled[ten] = t
            if level[ten] < need:
                rejected_at.append(k)
                continue
            level[ten] -= need
        reserved[ten] += need
        if not route(k, t):
            gateway.append(k)
    if gateway:                             # nothing will ever serve them: the run has no replica left
        raise ValueError("requests wait with no replica to serve them; raise min_replicas")
    for rep in replicas:
        if not rep.lost:
            rep.sched.run_until(math.inf)
            rep.settle(math.inf)
    return _result(p, arrivals, replicas, placed, rejected_at, retried, startup, cost_note, reserved, refunded)


def _result(p: ServiceParams, arrivals: tuple, replicas: list, placed: list, rejected_at: list, retried: int,
            startup: float, cost_note: str, reserved: dict, refunded: dict) -> ServiceResult:
    n_bins = int(math.ceil(p.duration_s / p.bin_s - 1e-9))
    arrival = np.array([a.spec.arrival_s for a in arrivals])
    tenant = np.array([a.tenant for a in arrivals])
    offered = np.bincount(np.minimum((arrival / p.bin_s).astype(int), n_bins - 1), minlength=n_bins) / p.bin_s
    rej = np.array(rejected_at, dtype=int)
    rejected = np.bincount(np.minimum((arrival[rej] / p.bin_s).astype(int), n_bins - 1),
                           minlength=n_bins) / p.bin_s
    k = np.array([j for j, _, _ in placed], dtype=int)
    reqs = [r for _, _, r in placed]
    first = np.array([r.first for r in reqs])
    finish = np.array([r.finish for r in reqs])
    out = np.array([r.spec.output_tokens for r in reqs])
    ttft = first - arrival[k]
    tpot = (finish - first) / np.maximum(out - 1, 1)
    bins = np.minimum((arrival[k] / p.bin_s).astype(int), n_bins - 1)
    ok = SLO("the run's", p.ttft_slo_s, p.tpot_slo_s).met(ttft, tpot)
    every_ttft, every_tpot = np.full(len(arrivals), np.nan), np.full(len(arrivals), np.nan)
    every_ttft[k], every_tpot[k] = ttft, tpot
    admitted = np.ones(len(arrivals), dtype=bool)
    admitted[rej] = False
    end = float(finish.max()) if finish.size else p.duration_s
    pre_t = np.array([t for rep in replicas for t in rep.sched.preempted_at])
    preempts = np.histogram(pre_t, np.arange(n_bins + 1) * p.bin_s)[0]   # after the arrivals stop: totals only
    # the deployment over time: every moment it changed, what was serving and what was billed
    times = sorted({0.0, *(t for rep in replicas for t in (rep.asked_s, rep.ready_s, rep.drain_s, rep.leave_s)
                           if t <= end)})
    ready = np.array([sum(rep.serving(t) for rep in replicas) for t in times])
    billed = np.array([sum(rep.asked_s <= t < rep.leave_s for rep in replicas) for t in times])
    gpu_s = sum(min(rep.leave_s, end) - rep.asked_s for rep in replicas)
    tokens = int(out.sum())
    plan = capacity_plan(p)
    static = plan.replicas_for(peak_rate(p) + p.b_rate_per_s)     # tenant B's requests counted as A's
    grid = np.linspace(0.0, p.duration_s, 2001)[:-1] + p.duration_s / 4000
    follow = np.ceil((rate_at(p, grid) + p.b_rate_per_s) / max(plan.rate_p99_per_s, 1e-300))
    kv_peak = max((max(rep.sched.st_kv, default=0) / rep.sched.kv.capacity_tokens for rep in replicas), default=0.0)
    placed_tenant = tenant[k]
    return ServiceResult(
        params=p, model=get_model(p.model).display_name, gpu=get_gpu(p.gpu).display_name,
        bin_starts_s=np.arange(n_bins) * p.bin_s, offered_per_s=offered, rejected_per_s=rejected,
        binned_ttft_p50_s=_percentiles(bins, ttft, n_bins, 50),
        binned_ttft_p99_s=_percentiles(bins, ttft, n_bins, 99),
        binned_tpot_p50_s=_percentiles(bins, tpot, n_bins, 50),
        binned_tpot_p99_s=_percentiles(bins, tpot, n_bins, 99),
        preemptions=preempts, replica_t_s=np.array(times), replicas_ready=ready, replicas_billed=billed,
        arrival_s=arrival, tenant=tenant, admitted=admitted, request_ttft_s=every_ttft, request_tpot_s=every_tpot,
        reserved_tokens=dict(reserved), refunded_tokens=dict(refunded),
        requests={t: int((tenant == t).sum()) for t in "AB"},
        rejected={t: int((tenant[rej] == t).sum()) if rej.size else 0 for t in "AB"},
        attainment={t: float(ok[placed_tenant == t].mean()) if (placed_tenant == t).any() else math.nan
                    for t in "AB"},
        ttft_p99_all_s=float(np.percentile(ttft, 99)) if ttft.size else math.nan,
        tpot_p99_all_s=float(np.percentile(tpot, 99)) if tpot.size else math.nan,
        preempted_requests=int(sum(r.preempt > 0 for r in reqs)), preemptions_total=int(pre_t.size),
        recomputed_tokens=int(sum(rep.sched.discarded for rep in replicas if not rep.lost)),
        swapped_tokens=int(sum(rep.sched.swapped_tokens for rep in replicas if not rep.lost)),
        retried=int(retried), output_tokens=tokens, end_s=end, gpu_hours=gpu_s / 3600.0, cost=math.nan,
        cost_per_m_tokens=math.nan, static_replicas=static, static_cost_per_m_tokens=math.nan,     # service() prices
        ideal_share=float(follow.mean() / static) if static else math.nan, kv_peak_share=float(kv_peak),
        load_s=startup, weight_bytes=stored_weight_bytes(p.model), plan=plan, peak_rate_per_s=peak_rate(p),
        calibration_note=cost_note)
