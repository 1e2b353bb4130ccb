"""Benchmarks: the timing harness (:mod:`.harness`), peak memory (:mod:`.memory`), each
chapter's suite (:mod:`.suites`, also ``python -m attnbook.bench 02 03 …``) and the
recorded results shipped with the package (``bench/results/<chapter>/<gpu>.json``),
beside those measured on the reader's GPU (in the user's cache)."""
from . import harness, suites
from .harness import (PACKAGE_RESULTS, PEAKS, QUICK, Result, Table, attention_bytes,
                      attention_flops, bound_ms, device_peaks, estimate_s, kept, load,
                      load_counters, load_ncu, load_sass_anchors, machine_record,
                      markdown_table, measure, pytorch_attention, ratio, results_dir,
                      results_file, run_or_load, save, time_cuda)
from .memory import peak_memory
