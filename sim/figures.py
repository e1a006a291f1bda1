"""Which simulation computes each figure of the guide.

`FIGURES` maps a figure id (as named in the chapter plan) to the one call that produces
its data: a function taking a frozen `...Params` (all defaults give the figure's default
state) and returning a `...Result` whose fields are ready to plot.

>>> sorted(FIGURES)[:3]
['ch00-decode-meter', 'ch01-pipeline', 'ch01-sampler']
>>> FIGURES["ch06-kv-size"].compute(FIGURES["ch06-kv-size"].params()).kv_bytes == 2 ** 30
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sim import (attention, batching, decode, hardware, kv, latency, paging, parallel, pipeline, pruning, quant, roofline,
                 sampling, scheduler, speculative)


@dataclass(frozen=True)
class FigureSim:
    """The simulation behind one figure."""

    compute: Callable          # compute(params) -> result dataclass
    params: Callable           # params() -> default parameters (a frozen dataclass)
    modules: tuple             # sim modules the figure draws on


FIGURES: dict = {
    "ch00-decode-meter": FigureSim(decode.decode_meter, decode.DecodeMeterParams, ("decode", "forward")),
    "ch01-pipeline": FigureSim(pipeline.describe_pipeline, pipeline.PipelineParams, ("models",)),
    "ch01-sampler": FigureSim(sampling.apply_sampling, sampling.SamplingParams, ("sampling",)),
    "ch02-phases": FigureSim(decode.phase_times, decode.PhaseParams, ("decode", "forward")),
    "ch03-hierarchy": FigureSim(hardware.memory_hierarchy, hardware.HierarchyParams, ("hardware",)),
    "ch03-roofline": FigureSim(roofline.roofline_chart, roofline.RooflineChartParams, ("roofline", "calibration")),
    "ch04-batch-knee": FigureSim(batching.sweep_batch, batching.BatchSweepParams, ("batching", "calibration")),
    "ch04-scheduler": FigureSim(scheduler.compare_schedules, scheduler.SchedulerParams, ("scheduler",)),
    "ch05-latency": FigureSim(latency.estimate_latency, latency.LatencyParams, ("latency",)),
    "ch05-load": FigureSim(latency.simulate_load, latency.LoadParams, ("latency", "scheduler")),
    "ch06-kv-size": FigureSim(kv.kv_size, kv.KVSizeParams, ("kv",)),
    "ch06-kv-budget": FigureSim(kv.kv_budget, kv.KVBudgetParams, ("kv", "forward")),
    "ch07-paging": FigureSim(paging.compare_prefix_caching, paging.PagingParams, ("paging",)),
    "ch07-waste": FigureSim(paging.reservation_waste, paging.WasteParams, ("paging",)),
    "ch08-flash": FigureSim(attention.compare_flash_attention, attention.FlashParams, ("attention",)),
    "ch08-flash-decoding": FigureSim(attention.split_kv_decode, attention.SplitKVParams, ("attention",)),
    "ch09-speculative-rounds": FigureSim(speculative.simulate_rounds, speculative.RoundsParams, ("speculative",)),
    "ch09-speculative-speedup": FigureSim(speculative.speedup_vs_batch, speculative.SpeedupParams,
                                          ("speculative", "forward")),
    "ch09-rejection-sampling": FigureSim(speculative.demonstrate_rejection_sampling, speculative.RejectionParams,
                                         ("speculative",)),
    "ch10-quant": FigureSim(quant.quantize_demo, quant.QuantDemoParams, ("quant",)),
    "ch11-pruning": FigureSim(pruning.predict_pruning_speedup, pruning.PruningParams, ("pruning", "forward")),
    "ch12-parallel": FigureSim(parallel.plan_parallel, parallel.ParallelParams, ("parallel", "forward")),
}
