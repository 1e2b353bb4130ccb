"""The three GPUs the book programs, as their datasheets give them: Colab's T4, the
A100 (40 GB, SXM) and the H100 (SXM5). Per-SM limits (registers, shared memory,
resident warps) are the architecture's, in :data:`.occupancy.ARCHITECTURES`; the
benchmarks' peaks for these three (:data:`attnbook.bench.PEAKS`) and the SM count the
emulator reports come from here."""
from __future__ import annotations

import dataclasses

__all__ = ["GPU", "GPUS"]


@dataclasses.dataclass(frozen=True)
class GPU:
    name: str
    arch: str              # sm_XY
    sms: int               # streaming multiprocessors
    l2_mb: int             # L2 cache, shared by all SMs
    memory_gb: int         # device memory (DRAM)
    memory: str            # its kind
    bandwidth_gbs: float   # DRAM bandwidth
    fp32_tflops: float     # CUDA cores, dense
    fp16_tflops: float     # tensor cores, dense, fp32 accumulation

    @property
    def peaks(self) -> dict:
        return dict(fp32_tflops=self.fp32_tflops, fp16_tflops=self.fp16_tflops,
                    bandwidth_gbs=self.bandwidth_gbs)


GPUS = {gpu.name: gpu for gpu in (
    GPU("T4", "sm_75", 40, 4, 16, "GDDR6", 320.0, 8.1, 65.0),
    GPU("A100", "sm_80", 108, 40, 40, "HBM2", 1555.0, 19.5, 312.0),
    GPU("H100", "sm_90", 132, 50, 80, "HBM3", 3350.0, 67.0, 989.0),
)}
