"""Simulations behind the guide's figures: pure Python + numpy, no UI, no torch.

Every module here runs unchanged in CPython 3.11/3.12 and in the browser on Pyodide.
Importing `sim` imports nothing else; import the module a figure needs:

    hardware     GPU catalogue (spec-sheet numbers with sources) and memory hierarchy
    models       model catalogue and parameter breakdowns
    dtypes       storage width of each number format
    kernel_model the kernel-time model: effective bandwidth / FLOP/s / launch cost and shape terms
    calibration  fitted calibration files and the best calibration for a GPU (trace or spec sheet)
    batch        inputs of one step: number formats (Precision) and sequences (Batch)
    ops          FLOPs, bytes and time of each kernel of a step
    forward      one whole forward step (launches included) and fast step times (StepCost)
    roofline     ridge points, decode ceilings, roofline charts
    decode       the decode meter and the two phases of a request
    batching     the batch knee, the batch sweep, measured GEMMs of one layer
    latency      TTFT, TPOT, ITL, end-to-end; a loaded server; goodput (DistServe) under SLOs
    kv           KV-cache size, budget and sequences that fit
    kv_blocks    the KV cache as a pool of fixed-size blocks (shared by paging and scheduler)
    paging       paged KV blocks, block tables, chained hashes, prefix caching
    scheduler    discrete-event simulation of static / continuous batching
    speculative  speculative decoding: expected tokens, rejection sampling, speedup
    quant        integer / fp8 / fp4 / NVFP4 quantization and its error
    pruning      magnitude and 2:4 pruning; the bytes model of sparse + quantized weights
    attention    naive vs tiled attention traffic; split-KV decode
    parallel     tensor / pipeline / data parallel planner
    sampling     temperature, top-k, top-p
    pipeline     the stages of one forward call and where the weights live

Which function computes each figure is declared by the figure's module in widgets/
(COMPUTE, PARAMS).
"""
