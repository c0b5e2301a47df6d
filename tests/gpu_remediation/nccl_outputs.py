"""``all_reduce_perf`` output in nccl-tests' own layout, for the NCCL burn-in check's tests.

The layout (header, one row per size with out-of-place and in-place time /
algbw / busbw / #wrong, the two summary lines) is the tool's; the figures are
made up: single-node 8-GPU runs whose bus bandwidth grows with the size up to
``top_busbw`` at the largest size.
"""

from __future__ import annotations

HEADER = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes {max_bytes} step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid     41 on gpu-new device  0 [0000:53:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid     41 on gpu-new device  1 [0000:64:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""  # noqa: E501


def all_reduce_output(
    top_busbw: float, *, sizes: int = 8, wrong: int = 0, max_bytes: int = 8 << 30
) -> str:
    """A run over ``sizes`` sizes up to ``max_bytes``; ``wrong`` bad results at the top size."""
    lines = [HEADER.format(max_bytes=max_bytes).rstrip("\n")]
    for index in range(sizes):
        size = max_bytes >> (sizes - 1 - index)
        busbw = top_busbw * (index + 1) / sizes
        algbw = busbw * 8 / 14
        time_us = size / (algbw * 1e3) if algbw else 0.0
        bad = wrong if index == sizes - 1 else 0
        row = (
            f"{size:>12} {size // 4:>13}     float     sum      -1 {time_us:>8.1f} {algbw:>7.2f} "
            f"{busbw:>7.2f} {bad:>6} {time_us:>8.1f} {algbw:>7.2f} {busbw:>7.2f} {0:>6}"
        )
        lines.append(row)
    status = "FAILED" if wrong else "OK"
    lines.append(f"# Out of bounds values : {wrong} {status}")
    lines.append(f"# Avg bus bandwidth    : {top_busbw * (sizes + 1) / (2 * sizes):.3f} ")
    return "\n".join(lines) + "\n"


NCCL_ERROR = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
gpu-new: Test NCCL failure common.cu:1005 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'
 .. gpu-new pid 41: Test failure common.cu:891
"""  # noqa: E501
