"""What a scheduler run measured: the slot timeline, per-request latencies and the step
record (ScheduleResult), built from a finished `sim.scheduler.Scheduler` run; and the
comparison of both policies on one workload (ScheduleComparison).

>>> from sim.scheduler import SchedulerParams, simulate_schedule
>>> r = simulate_schedule(SchedulerParams(policy="static"))
>>> r.slot_kind_names == SLOT_KINDS, r.steps == len(r.step_end_s), bool((r.e2e_s >= r.ttft_s).all())
(True, True, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

SLOT_KINDS = ("idle", "prefill", "decode", "padding", "stalled")   # codes 0..4 in slot_kind
SLOT_IDLE, SLOT_PREFILL, SLOT_DECODE, SLOT_PADDING, SLOT_STALLED = range(5)


@dataclass(frozen=True)
class ScheduleResult:
    """Timeline and per-request latencies of one simulated run."""

    policy: str
    chunked_prefill: bool
    requests: list                  # names, in arrival order
    prompt_tokens: np.ndarray       # (requests,)
    output_tokens: np.ndarray       # (requests,)
    arrival_s: np.ndarray           # (requests,)
    admitted_s: np.ndarray          # (requests,) first admission
    first_token_s: np.ndarray       # (requests,)
    finish_s: np.ndarray            # (requests,)
    ttft_s: np.ndarray              # (requests,) first token - arrival
    tpot_s: np.ndarray              # (requests,) (finish - first token) / (output - 1); nan for 1-token outputs
    e2e_s: np.ndarray               # (requests,) finish - arrival
    max_itl_s: np.ndarray           # (requests,) longest gap between consecutive tokens (0 if one token)
    preemptions: np.ndarray         # (requests,)
    step_start_s: np.ndarray        # (steps,)
    step_end_s: np.ndarray          # (steps,)
    step_prefill_tokens: np.ndarray  # (steps,)
    step_decode_tokens: np.ndarray  # (steps,) includes static padding tokens
    step_kv_tokens: np.ndarray      # (steps,) KV blocks in use x block_size, after allocation
    # the slot timeline, one row per step or per run of equal decode steps (see slot_request, slot_kind)
    row_request: np.ndarray         # (rows, max_batch) index into requests, -1 if the slot is empty
    row_kind: np.ndarray            # (rows, max_batch) code into SLOT_KINDS
    row_steps: np.ndarray           # (rows,) steps each row stands for
    slot_kind_names: tuple          # SLOT_KINDS
    kv_capacity_tokens: int
    prefill_tokens: int             # prompt (and recomputed) tokens processed
    recomputed_tokens: int          # of which recomputation after preemption
    discarded_tokens: int           # cached tokens thrown away by preemptions
    decode_tokens: int              # real decode tokens (no padding)
    prefill_emissions: int          # output tokens that came from a (re)prefill's logits
    emitted_tokens: np.ndarray      # (requests,) output tokens each request produced (= output_tokens)
    padding_tokens: int             # static batching: tokens spent on finished requests
    makespan_s: float               # first arrival to last finish
    busy_s: float                   # time the GPU ran steps
    slot_utilisation: float         # time-weighted share of slots doing prefill or decode while busy
    longest_decode_stall_s: float   # max over requests of the longest inter-token gap
    throughput_tokens_per_s: float  # output tokens / makespan
    calibration_note: str = ""      # where the step times come from

    @property
    def steps(self) -> int:
        return len(self.step_start_s)

    # a run's slot timeline is (steps x max_batch), most of it runs of equal decode steps: it is
    # kept as rows and spread out step by step only when asked for (the timeline figure asks)
    @cached_property
    def slot_request(self) -> np.ndarray:
        """(steps, max_batch) index into requests, -1 if the slot is empty."""
        return np.repeat(self.row_request, self.row_steps, axis=0)

    @cached_property
    def slot_kind(self) -> np.ndarray:
        """(steps, max_batch) code into SLOT_KINDS."""
        return np.repeat(self.row_kind, self.row_steps, axis=0)

    @cached_property
    def step_busy_slots(self) -> np.ndarray:
        """(steps,) slots that prefill or decode in each step."""
        return np.repeat(_busy(self.row_kind), self.row_steps)


@dataclass(frozen=True)
class ScheduleComparison:
    """Static and continuous batching on the same request mix."""

    static: ScheduleResult
    continuous: ScheduleResult


def _busy(kinds: np.ndarray) -> np.ndarray:
    """Slots that prefill or decode, per row of slot kinds."""
    return ((kinds == SLOT_PREFILL) | (kinds == SLOT_DECODE)).sum(axis=1)


def schedule_result(run) -> ScheduleResult:
    """The timeline and latencies of a finished `sim.scheduler.Scheduler` run."""
    p, reqs = run.p, run.reqs
    arrival = np.array([r.spec.arrival_s for r in reqs])
    first = np.array([r.first for r in reqs])
    finish = np.array([r.finish for r in reqs])
    out = np.array([r.spec.output_tokens for r in reqs])
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    starts, ends = np.array(run.st_start), np.array(run.st_end)
    durs = ends - starts
    rows = len(run.rows_steps)
    row_steps = np.array(run.rows_steps, dtype=np.intp)   # np.repeat takes intp counts (32 bits in the browser)
    row_kind = np.array(run.rows_kind, dtype=np.int8).reshape(rows, p.max_batch)
    busy_slots = np.repeat(_busy(row_kind), row_steps)
    busy = float(durs.sum())
    makespan = float(finish.max() - arrival.min())
    max_itl = np.array([r.max_itl for r in reqs])
    return ScheduleResult(
        policy=p.policy, chunked_prefill=p.chunked_prefill and p.policy == "continuous",
        requests=[r.spec.name for r in reqs],
        prompt_tokens=np.array([r.spec.prompt_tokens for r in reqs]), output_tokens=out,
        arrival_s=arrival, admitted_s=np.array([r.admitted for r in reqs]), first_token_s=first,
        finish_s=finish, ttft_s=first - arrival, tpot_s=tpot, e2e_s=finish - arrival, max_itl_s=max_itl,
        preemptions=np.array([r.preempt for r in reqs]),
        step_start_s=starts, step_end_s=ends, step_prefill_tokens=np.array(run.st_pre, dtype=np.int64),
        step_decode_tokens=np.array(run.st_dec, dtype=np.int64),
        step_kv_tokens=np.array(run.st_kv, dtype=np.int64),
        row_request=np.array(run.rows_req, dtype=np.int32).reshape(rows, p.max_batch), row_kind=row_kind,
        row_steps=row_steps, slot_kind_names=SLOT_KINDS, kv_capacity_tokens=run.kv.capacity_tokens,
        prefill_tokens=run.prefill_total,
        recomputed_tokens=run.prefill_total - int(sum(s.prompt_tokens for s in run.specs if not s.kv_ready)),
        discarded_tokens=run.discarded, decode_tokens=run.decode_total, prefill_emissions=run.prefill_emits,
        emitted_tokens=np.array([r.generated for r in reqs]), padding_tokens=run.padding_total,
        makespan_s=makespan, busy_s=busy,
        slot_utilisation=float((durs * busy_slots).sum() / (p.max_batch * busy)) if busy else 0.0,
        longest_decode_stall_s=float(max_itl.max()),
        throughput_tokens_per_s=float(out.sum() / makespan) if makespan > 0 else math.inf,
        calibration_note=run.cost.calibration.note)
