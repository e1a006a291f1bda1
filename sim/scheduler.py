"""Iteration-level scheduling: a deterministic discrete-event simulation of a serving engine.

The GPU runs one forward *step* at a time; the scheduler decides, before each step, which
requests take part and with how many tokens. Step times come from `sim.forward.StepCost`.

Policies
--------
- "static": requests are grouped into a batch of up to `max_batch`, prefilled together and
  decoded until its *longest* request is done; finished requests keep their slot as padding
  (a fixed batch shape still costs them a token per step) and arrivals wait for the whole
  batch. Like a static batching server's queue, an idle GPU starts the next batch once
  `max_batch` requests wait or the oldest has waited `batch_timeout_s`.
- "continuous" (iteration-level scheduling, introduced by Orca, R7): at every step
  finished requests leave and waiting ones join.
    * without chunked prefill, a step that admits new requests prefills their whole
      prompts and carries no decodes (prefill-first, as vLLM's first scheduler did), so
      running requests stall for the length of that prefill;
    * with chunked prefill (R2; Sarathi-Serve) each step has a token budget: running
      decodes first (one token each), then prefill chunks of partially prefilled and new
      requests fill what is left, so a long prompt is spread over several steps.

Memory: the KV cache holds `kv_capacity_tokens` tokens in blocks of `block_size` (a
`sim.kv_blocks.BlockCounts`, the same count of KV room as `sim.paging`'s block manager). A
request needs ceil(tokens cached / block_size) blocks; a new request is admitted beside
running ones only if 1% of the blocks stay free. When a running request needs a
block and none is free, the most recently admitted request is *preempted*: its blocks
are freed and it re-enters the front of the queue; when readmitted it recomputes its
prompt and the tokens it had generated (vLLM's recompute mode, R2). Its emitted tokens
stay emitted. `preemption="swap"` (R6 section 4.5) copies a decoding victim's KV to CPU
memory (assumed unbounded) and back on readmission, each copy its bytes over
`swap_bytes_per_s`, added to the step in which it happens (before its kernels, as vLLM's did).

A request that arrives `kv_ready` (at a decode GPU of chapter 19) brings its prompt's KV and
first token: admitted, it takes its blocks and decodes (preempted, it recomputes as others do).

Events are ordered by (time, sequence number, kind): arrivals and step completions are
processed in that order, and a step is scheduled only once every event at the current
time has been handled, so the same inputs always give the same timeline.

>>> r = simulate_schedule(SchedulerParams(policy="continuous"))
>>> int(r.output_tokens.sum()) == r.decode_tokens + r.prefill_emissions   # prefill gives each its first token
True
"""
from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Optional

import numpy as np

from sim.batch import Precision
from sim.checks import check_choice, check_int, check_non_negative, check_range, checked_params
from sim.forward import step_cost
from sim.kernel_model import Calibration
from sim.kv import kv_bytes_per_token, kv_capacity_tokens
from sim.kv_blocks import BlockCounts, blocks_for
from sim.models import resolve as resolve_model
from sim.parallel import PCIE_GEN5_X16_BYTES_PER_S
from sim.schedule_metrics import (SLOT_DECODE, SLOT_IDLE, SLOT_KINDS, SLOT_PADDING, SLOT_PREFILL,  # noqa: F401
                                  SLOT_STALLED, ScheduleComparison, ScheduleResult, schedule_result)
from sim.workload import RequestMixParams, RequestSpec, long_prompt_request, make_request_mix  # noqa: F401

POLICIES = ("static", "continuous")
PREEMPTIONS = ("recompute", "swap")
_ARRIVAL, _STEP_END, _WAKE = 0, 1, 2
ADMISSION_WATERMARK = 0.01   # share of KV blocks kept free when admitting beside running requests (vLLM's default)


@checked_params
@dataclass(frozen=True)
class SchedulerParams:
    """Controls of the scheduler figure."""

    model: str = "llama-3.1-8b"
    gpu: str = "H100-SXM"
    policy: str = "continuous"              # "static" | "continuous"
    max_batch: int = 8                      # slots: requests running at once
    chunked_prefill: bool = False           # continuous only: token budget per step, decodes first
    token_budget: int = 512                 # tokens per step with chunked prefill
    kv_capacity_tokens: Optional[int] = None  # None: what fits in 0.9 x memory - weights
    block_size: int = 16                    # R6
    requests: Optional[tuple] = None        # RequestSpec tuple; None: make_request_mix(seed=seed)
    add_long_prompt: bool = False           # append long_prompt_request()
    long_prompt_tokens: int = 8000
    long_prompt_arrival_s: float = 0.05
    precision: Precision = Precision()
    cuda_graphs: bool = True                # decode-only steps replay a CUDA graph (R2); others launch eagerly
    seed: int = 0                           # seed of the default request mix
    batch_timeout_s: float = 0.1            # static only: longest wait for a full batch before starting one
    max_steps: int = 200_000                # safety stop
    preemption: str = "recompute"           # "recompute" | "swap": what a preempted request's KV does
    swap_bytes_per_s: float = PCIE_GEN5_X16_BYTES_PER_S   # GPU <-> CPU copies of swapped KV, each way

    def __post_init__(self) -> None:
        check_choice("policy", self.policy, POLICIES, "policies")
        check_int("max_batch", self.max_batch, minimum=1, maximum=4096)
        check_int("token_budget", self.token_budget, minimum=1)
        if self.kv_capacity_tokens is not None:
            check_int("kv_capacity_tokens", self.kv_capacity_tokens, minimum=1)
        check_int("block_size", self.block_size, minimum=1)
        check_int("long_prompt_tokens", self.long_prompt_tokens, minimum=1)
        check_non_negative("long_prompt_arrival_s", self.long_prompt_arrival_s)
        check_int("seed", self.seed, minimum=0)
        check_range("batch_timeout_s", self.batch_timeout_s, 0.0, 3600.0)
        check_int("max_steps", self.max_steps, minimum=1)
        check_choice("preemption", self.preemption, PREEMPTIONS, "preemption modes")
        check_range("swap_bytes_per_s", self.swap_bytes_per_s, 1e6, 1e13)
        if self.requests is not None:
            if not self.requests:
                raise ValueError("requests must not be empty")
            for r in self.requests:
                if not isinstance(r, RequestSpec):
                    raise ValueError(f"requests must be RequestSpec objects, got {r!r}")
            if len({r.name for r in self.requests}) != len(self.requests):
                raise ValueError("request names must be unique")
            if any(r.kv_ready for r in self.requests) and (self.chunked_prefill or self.policy != "continuous"):
                raise ValueError("requests that arrive with their KV need policy='continuous', chunked_prefill=False")

    def workload(self) -> tuple:
        """The requests this run simulates, in arrival order (ties keep their listed order)."""
        reqs = list(self.requests) if self.requests is not None else list(make_request_mix(
            RequestMixParams(seed=self.seed)))
        if self.add_long_prompt:
            reqs.append(long_prompt_request(self.long_prompt_arrival_s, self.long_prompt_tokens))
        order = sorted(range(len(reqs)), key=lambda i: (reqs[i].arrival_s, i))
        return tuple(reqs[i] for i in order)


class _Req:
    __slots__ = ("i", "spec", "computed", "target", "generated", "blocks", "slot", "phase", "admitted",
                 "first", "last", "max_itl", "preempt", "finish", "swapped")

    def __init__(self, i: int, spec: RequestSpec):
        self.i = i
        self.spec = spec
        self.computed = 0            # tokens whose K/V are in the cache
        self.target = spec.prompt_tokens  # tokens to prefill before decoding
        self.generated = 0           # output tokens emitted
        self.blocks = 0              # KV blocks it holds (from the run's BlockCounts)
        self.slot = -1
        self.phase = "queued"        # queued -> waiting -> prefill -> decode -> done
        self.admitted = math.nan
        self.first = self.last = math.nan
        self.max_itl = 0.0
        self.preempt = 0
        self.finish = math.nan
        self.swapped = False         # its KV waits in CPU memory (preemption="swap")


def simulate_schedule(params: SchedulerParams = SchedulerParams(),
                      calibration: Optional[Calibration] = None) -> ScheduleResult:
    """Run the workload through the chosen policy and return the slot timeline and latencies.

    Per-request TTFT = first token time - arrival, TPOT = (finish - first token) /
    (output tokens - 1) (R1, R2), longest decode stall = largest gap between two
    consecutive tokens of one request.

    >>> s = simulate_schedule(SchedulerParams(policy="static"))
    >>> c = simulate_schedule(SchedulerParams(policy="continuous"))
    >>> bool(np.mean(c.ttft_s) < np.mean(s.ttft_s))
    True
    """
    return Scheduler(params, calibration).run()


class Scheduler:
    """One run of the serving engine: the queue, the batch slots, the KV blocks, and the steps that change them.

    `run` is the event loop. Before each GPU step, `start_step` asks the policy for the
    step's work (`plan_static`, or `plan_continuous`), which admits waiting requests
    (`admit`) and gives them KV blocks (`grow`, which preempts the newest request when the
    pool runs dry); the step is timed by `StepCost` and recorded. When it ends,
    `finish_step` advances each request in it, `emit` hands out tokens and `complete`
    retires finished requests, whose slots and blocks go back (`release`). `result`
    turns the recorded timeline into a `ScheduleResult`.
    """

    def __init__(self, params: SchedulerParams = SchedulerParams(), calibration: Optional[Calibration] = None):
        p = self.p = params
        self.specs = p.workload()
        capacity = p.kv_capacity_tokens if p.kv_capacity_tokens is not None else kv_capacity_tokens(
            p.model, p.gpu, p.precision)
        self.kv = BlockCounts.for_tokens(capacity, p.block_size)
        for s in self.specs:
            need = self.kv.blocks_for(s.prompt_tokens + s.output_tokens)
            if need > self.kv.num_blocks:
                raise ValueError(f"request {s.name!r} needs {self.kv.tokens_in(need)} KV tokens, more than the "
                                 f"capacity of {self.kv.capacity_tokens}")
        # beside running requests keep a few blocks free, so their next tokens do not force a preemption
        self.watermark = max(1, math.ceil(ADMISSION_WATERMARK * self.kv.num_blocks))
        self.cost = step_cost(p.model, p.gpu, p.precision, calibration)     # shared between runs when shipped
        # every step size a run can have, costed at once: decode steps have at most max_batch
        # tokens, chunked steps at most the token budget (whole prompts are costed as they come);
        # with the shipped calibration the memo is kept, so a later run finds them there
        top = max(p.max_batch, p.token_budget if p.chunked_prefill and p.policy == "continuous" else 0)
        self.cost.prime(tokens=np.arange(1, top + 1), logits=np.arange(1, p.max_batch + 1))
        self.reqs = [_Req(i, s) for i, s in enumerate(self.specs)]
        self.kv_token_bytes = kv_bytes_per_token(resolve_model(p.model), p.precision.kv_dtype)
        self.copy_s = 0.0                       # swap copies waiting to lengthen the next step
        self.swapped_tokens = 0                 # KV tokens copied out to CPU memory
        self.horizon = math.inf                 # no run of decode steps goes past it (run_until)
        self.finished: list = []                # requests in the order they finished
        self.preempted_at: list = []            # the time of each preemption
        self.waiting: deque = deque()
        self.running: list = []                 # admission order
        self.free_slots = list(range(p.max_batch))
        heapq.heapify(self.free_slots)
        self.static_batch: list = []
        self.events: list = []                  # (time, sequence number, kind, request index)
        self.seq = 0
        self.wake_at = math.nan                 # pending static-batch deadline (one at a time)
        for r in self.reqs:
            self._push(r.spec.arrival_s, _ARRIVAL, r.i)
        self.now = 0.0
        self.gpu_busy = False
        self.current: list = []                 # (req, tokens, kind) of the step in flight
        self.done = 0
        self.prefill_total = self.decode_total = self.padding_total = self.discarded = self.prefill_emits = 0
        # the timeline, one entry per step
        self.rows_req: list = []                # one row per step, or per run of equal steps:
        self.rows_kind: list = []
        self.rows_steps: list = []              # how many steps each row stands for
        self.st_start: list = []
        self.st_end: list = []
        self.st_pre: list = []
        self.st_dec: list = []
        self.st_kv: list = []

    # -- the event loop ------------------------------------------------------------------------
    def _push(self, t: float, kind: int, idx: int) -> None:
        heapq.heappush(self.events, (t, self.seq, kind, idx))
        self.seq += 1

    def run(self) -> ScheduleResult:
        """Every event, then the result; every request must have finished."""
        self.run_until(math.inf)
        if self.done != len(self.reqs):
            raise RuntimeError(f"{len(self.reqs) - self.done} requests never finished")
        return self.result()

    def run_until(self, t: float) -> None:
        """Process events up to time t in order; a step starts when the GPU is idle and the present settled."""
        self.horizon = t
        while self.events and self.events[0][0] <= t:
            if len(self.st_start) > self.p.max_steps:
                raise RuntimeError(f"scheduler exceeded max_steps={self.p.max_steps}")
            when, _, kind, idx = heapq.heappop(self.events)
            self.now = when
            if kind == _ARRIVAL:
                self.arrive(self.reqs[idx])
            elif kind == _STEP_END:
                self.finish_step()
            if not self.gpu_busy and (not self.events or self.events[0][0] > self.now):
                self.start_step()
        self.horizon = math.inf

    # -- admission -----------------------------------------------------------------------------
    def arrive(self, r: _Req) -> None:
        r.phase = "waiting"
        self.waiting.append(r)

    def admit(self, r: _Req) -> None:
        """Give the request at the head of the queue a slot; it starts (or restarts) its prefill."""
        self.waiting.popleft()
        r.slot = heapq.heappop(self.free_slots)
        r.phase = "prefill"
        if r.swapped:                   # its KV comes back from CPU memory; it goes on decoding
            r.swapped, r.phase = False, "decode"
            self.copy_s += r.computed * self.kv_token_bytes / self.p.swap_bytes_per_s
        if math.isnan(r.admitted):
            r.admitted = self.now
            if r.spec.kv_ready:         # its KV and first token came with it
                r.computed, r.generated, r.phase = r.target, 1, "decode"
                r.first = r.last = r.spec.arrival_s
        self.running.append(r)

    def admissible_blocks(self) -> int:
        """Free blocks a new request may take: all of them on an empty engine, less the watermark beside others."""
        return self.kv.free_blocks - (self.watermark if self.running else 0)

    # -- KV accounting -------------------------------------------------------------------------
    def grow(self, r: _Req, tokens: int) -> bool:
        """Allocate blocks so `r` can cache `tokens` more; preempt the newest requests if needed.

        False if `r` itself had to be preempted."""
        need = self.kv.blocks_for(r.computed + tokens) - r.blocks
        if need == 0:               # most decode steps: the last block has room
            return True
        while need > self.kv.free_blocks:
            victim = self.running[-1]
            self.preempt(victim)
            if victim is r:
                return False
        r.blocks += self.kv.allocate(need)
        return True

    def preempt(self, victim: _Req) -> None:
        """Free the victim's blocks and requeue it first, to recompute its prompt and tokens (R2) or swap back."""
        self.running.remove(victim)
        self.release(victim)
        victim.preempt += 1
        self.preempted_at.append(self.now)
        if self.p.preemption == "swap" and victim.phase == "decode":
            victim.swapped = True
            self.swapped_tokens += victim.computed
            self.copy_s += victim.computed * self.kv_token_bytes / self.p.swap_bytes_per_s
        else:
            self.discarded += victim.computed
            victim.computed = 0
            victim.target = victim.spec.prompt_tokens + victim.generated
        victim.phase = "waiting"
        self.waiting.appendleft(victim)

    def release(self, r: _Req) -> None:
        """Return the request's KV blocks and its slot."""
        self.kv.release(r.blocks)
        r.blocks = 0
        heapq.heappush(self.free_slots, r.slot)
        r.slot = -1

    # -- planning a step -----------------------------------------------------------------------
    def plan_static(self) -> list:
        """The batch in flight decodes (finished members pad); an idle GPU starts the next batch
        once it is full or its oldest request has waited `batch_timeout_s`."""
        if self.static_batch:
            return [(r, 1, SLOT_DECODE if r.phase == "decode" else SLOT_PADDING) for r in self.static_batch]
        p = self.p
        deadline = self.waiting[0].spec.arrival_s + p.batch_timeout_s if self.waiting else math.inf
        if self.waiting and len(self.waiting) < p.max_batch and self.now < deadline:
            if self.wake_at != deadline:        # wait for more requests, at most until the deadline
                self.wake_at = deadline
                self._push(deadline, _WAKE, -1)
            return []
        while self.waiting and self.free_slots:
            r = self.waiting[0]
            need = self.kv.blocks_for(r.spec.prompt_tokens + r.spec.output_tokens)   # reserved up front
            if need > self.kv.free_blocks:
                break
            self.admit(r)
            r.blocks = self.kv.allocate(need)
            self.static_batch.append(r)
        return [(r, r.target, SLOT_PREFILL) for r in self.static_batch]

    def plan_continuous(self) -> list:
        return self._plan_chunked() if self.p.chunked_prefill else self._plan_whole_prompts()

    def _plan_whole_prompts(self) -> list:
        """Prefill-first: a step admits every waiting request that fits and prefills their whole
        prompts (no decodes); with nobody to admit, every running request decodes one token."""
        admitted = []
        while self.waiting and self.free_slots:
            r = self.waiting[0]
            need = self.kv.blocks_for(max(r.target, r.computed))
            if need > self.admissible_blocks():
                break
            self.admit(r)
            r.blocks = self.kv.allocate(need)
            if r.computed < r.target:
                admitted.append((r, r.target - r.computed, SLOT_PREFILL))
        return admitted or self._plan_decodes()

    def _plan_chunked(self) -> list:
        """A token budget per step: running decodes first, then chunks of partly prefilled
        requests, then chunks of newly admitted ones (R2, SARATHI)."""
        batch = self._plan_decodes(self.p.token_budget)
        budget = self.p.token_budget - len(batch)
        for r in list(self.running):
            if budget == 0:
                break
            if r.phase == "prefill":
                room = self.kv.tokens_in(r.blocks + self.kv.free_blocks) - r.computed
                c = min(r.target - r.computed, budget, room)
                if c <= 0:
                    break
                self.grow(r, c)
                batch.append((r, c, SLOT_PREFILL))
                budget -= c
        while budget > 0 and self.waiting and self.free_slots:
            r = self.waiting[0]
            if r.swapped:           # takes back its blocks now and decodes from the next step
                need = self.kv.blocks_for(r.computed)
                if need > self.admissible_blocks():
                    break
                self.admit(r)
                r.blocks = self.kv.allocate(need)
                continue
            c = min(r.target - r.computed, budget, self.kv.tokens_in(self.admissible_blocks()))
            if c <= 0:
                break
            self.admit(r)
            self.grow(r, c)
            batch.append((r, c, SLOT_PREFILL))
            budget -= c
        return batch

    def _plan_decodes(self, budget: float = math.inf) -> list:
        """One token for each decoding request, oldest first, at most `budget` of them."""
        batch = []
        for r in list(self.running):
            if len(batch) == budget:
                break
            if r.phase == "decode" and self.grow(r, 1):      # a preempted request is "waiting" again
                batch.append((r, 1, SLOT_DECODE))
        return batch

    # -- running a step ------------------------------------------------------------------------
    def start_step(self) -> None:
        """Plan the next step, time it, record it in the timeline and schedule its end."""
        p = self.p
        while self._decode_run():       # one run per stretch between events
            pass
        plan = self.plan_static() if p.policy == "static" else self.plan_continuous()
        if not plan:
            return
        pre = sum(t for _, t, k in plan if k == SLOT_PREFILL)
        dec = sum(t for _, t, k in plan if k == SLOT_DECODE)
        pad = sum(t for _, t, k in plan if k == SLOT_PADDING)
        logits = sum(r.computed + t >= r.target if k == SLOT_PREFILL else 1 for r, t, k in plan)
        dur = self.cost.time_s([t for _, t, _ in plan], [r.computed for r, _, _ in plan], logits_seqs=logits,
                               cuda_graphs=p.cuda_graphs and pre == 0) + self.copy_s
        self.copy_s = 0.0
        self.prefill_total += pre
        self.decode_total += dec
        self.padding_total += pad
        self._record(plan, dur, pre, dec + pad)
        self.current = plan
        self.gpu_busy = True
        self._push(self.now + dur, _STEP_END, -1)

    def _decode_run(self) -> bool:
        """Run in one pass the decode-only steps up to the next event, as step by step; True
        if it ran any.

        While a batch only decodes, each step is the same batch one token further on. Under
        continuous batching the batch is every running request, nobody may be able to join
        (no one waits, or no slot is free), and the run ends with the step in which a request
        emits its last token, with the step during which a request arrives, before a step
        that would need more KV blocks than are free or ends after `horizon`; a static batch
        decodes (its finished members as padding) whatever arrives meanwhile, holds its
        blocks, and its run ends with the step in which a member finishes. The steps follow
        from their count (`StepCost.decode_run_s`, to the last bit the one-step numbers).
        After the run, what finished completes and what arrived is queued, in that order.
        """
        p, kv = self.p, self.kv
        bs = kv.block_size
        continuous = p.policy == "continuous"
        if continuous:
            batch = dec = self.running
            if not batch or (self.waiting and self.free_slots) or (p.chunked_prefill and len(batch) > p.token_budget):
                return False
            for r in reversed(batch):       # the newest first: the likeliest to be prefilling
                if r.phase != "decode" or r.blocks != blocks_for(r.computed, bs):
                    return False
        else:
            batch = self.static_batch
            dec = [r for r in batch if r.phase == "decode"]
            if not dec or any(r.phase != "done" for r in batch if r.phase != "decode"):
                return False
        steps = min(r.spec.output_tokens - r.generated for r in dec)     # up to the first request's last token
        if steps < 2:
            return False
        seqs, n_dec = len(batch), len(dec)
        times = self.cost.decode_run_s(seqs, sum(r.computed for r in batch), steps, p.cuda_graphs, grows=n_dec)
        ends = list(accumulate(times.tolist(), initial=self.now))[1:]   # each step starts when the one before ends
        takes = []
        if continuous:
            if self.events:      # an arrival ends the run with the step during which it comes
                steps = min(steps, bisect_left(ends, self.events[0][0]) + 1)
            steps = min(steps, bisect_right(ends, self.horizon))    # and run_until's horizon before it
            # a request takes a block at each step that starts its cache on a new one (from
            # its first such step, every block_size steps); a step that would need more than
            # the free blocks preempts, and ends the run
            firsts = [(-r.computed) % bs for r in batch]
            takes = sorted(j for f in firsts for j in range(f, steps, bs))     # the step of each block taken
            if len(takes) > kv.free_blocks:
                steps = takes[kv.free_blocks]
                takes = takes[:bisect_left(takes, steps)]
            if steps < 1:
                return False
            kv.allocate(len(takes))
            for r, f in zip(batch, firsts):
                r.blocks += len(range(f, steps, bs))
        ends = ends[:steps]
        used = kv.used_tokens - bs * len(takes)
        row_r = [-1] * p.max_batch
        row_k = [SLOT_IDLE] * p.max_batch
        for r in batch:
            row_r[r.slot] = r.i
            row_k[r.slot] = SLOT_DECODE if r.phase == "decode" else SLOT_PADDING
        self.rows_req.append(row_r)
        self.rows_kind.append(row_k)
        self.rows_steps.append(steps)
        self.st_start.append(self.now)
        self.st_start.extend(ends[:-1])
        self.st_end.extend(ends)
        self.st_pre.extend([0] * steps)
        self.st_dec.extend([seqs] * steps)
        self.st_kv.extend([used + bs * bisect_right(takes, j) for j in range(steps)])   # blocks taken up to step j
        self.decode_total += n_dec * steps
        self.padding_total += (seqs - n_dec) * steps
        gap = max((b - a for a, b in zip(ends, ends[1:])), default=-math.inf)   # between two steps of the run
        for r in dec:
            r.max_itl = max(r.max_itl, ends[0] - r.last, gap)
            r.last = ends[-1]
            r.computed += steps
            r.generated += steps
        self.now = ends[-1]
        for r in [r for r in dec if r.generated >= r.spec.output_tokens]:    # in the order the step emits
            self.complete(r)
        self._end_static_batch()
        while self.events and self.events[0][0] <= self.now:     # what arrived during the run, in order
            _, _, kind, idx = heapq.heappop(self.events)
            if kind == _ARRIVAL:
                self.arrive(self.reqs[idx])
        return True

    def _record(self, plan: list, dur: float, prefill_tokens: int, decode_tokens: int) -> None:
        """One timeline row: what each slot does this step, the step's tokens and the KV in use."""
        row_r = [-1] * self.p.max_batch
        row_k = [SLOT_IDLE] * self.p.max_batch
        for r in self.running if self.p.policy == "continuous" else self.static_batch:
            row_r[r.slot] = r.i
            row_k[r.slot] = SLOT_PADDING if r.phase == "done" else SLOT_STALLED
        for r, _, k in plan:
            row_k[r.slot] = k
        self.rows_req.append(row_r)
        self.rows_kind.append(row_k)
        self.rows_steps.append(1)
        self.st_start.append(self.now)
        self.st_end.append(self.now + dur)
        self.st_pre.append(prefill_tokens)
        self.st_dec.append(decode_tokens)
        self.st_kv.append(self.kv.used_tokens)

    def finish_step(self) -> None:
        """The step's tokens are now cached; a finished prefill and every decode emit a token."""
        for r, t, k in self.current:
            if k == SLOT_PADDING:
                continue
            r.computed += t
            if k == SLOT_PREFILL:
                if r.computed >= r.target:
                    r.phase = "decode"
                    self.prefill_emits += 1
                    self.emit(r)
            else:
                self.emit(r)
        self._end_static_batch()
        self.gpu_busy = False

    def _end_static_batch(self) -> None:
        """A static batch whose members have all finished gives back its slots and blocks."""
        if self.p.policy == "static" and all(r.phase == "done" for r in self.static_batch):
            for r in self.static_batch:
                self.running.remove(r)
                self.release(r)
            self.static_batch = []

    # -- completion ----------------------------------------------------------------------------
    def emit(self, r: _Req) -> None:
        """`r` produces its next output token now."""
        if r.generated == 0:
            r.first = self.now
        elif self.now - r.last > r.max_itl:
            r.max_itl = self.now - r.last
        r.last = self.now
        r.generated += 1
        if r.generated >= r.spec.output_tokens:
            self.complete(r)

    def complete(self, r: _Req) -> None:
        """`r` has all its tokens; under continuous batching it leaves at once (a static batch waits for all)."""
        r.phase = "done"
        r.finish = self.now
        self.done += 1
        self.finished.append(r)
        if self.p.policy == "continuous":
            self.running.remove(r)
            self.release(r)

    # -- the result (sim.schedule_metrics) ----------------------------------------------------
    def result(self) -> ScheduleResult:
        return schedule_result(self)


def compare_schedules(params: SchedulerParams = SchedulerParams(),
                      calibration: Optional[Calibration] = None) -> ScheduleComparison:
    """`simulate_schedule` under both policies with every other control equal.

    >>> c = compare_schedules()
    >>> c.static.padding_tokens > 0 == c.continuous.padding_tokens
    True
    """
    return ScheduleComparison(static=simulate_schedule(replace(params, policy="static"), calibration),
                              continuous=simulate_schedule(replace(params, policy="continuous"), calibration))
