"""A CUDA program with its own main() runs on the emulator as it would after
``nvcc prog.cu -o prog && ./prog``: ``python -m cuda_emulator.program run``, its
output, exit status, -I and -D, and its errors (a fault, memcheck) with their lines."""
import os
import pathlib
import re
import select
import signal
import subprocess
import sys

import pytest

PROGRAMS = pathlib.Path(__file__).parent / "cuda" / "programs"
SOURCE = PROGRAMS / "sums.cu"
LINE = next(i for i, text in enumerate(SOURCE.read_text().splitlines(), 1)
            if "y[i] = SCALE" in text)


def run(*args):
    return subprocess.run([sys.executable, "-m", "cuda_emulator.program", "run",
                           *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


OPTIONS = ["-I", str(PROGRAMS / "include"), "-D", "SCALE=2"]


def test_a_program_prints_and_exits_as_it_would_on_a_gpu():
    done = run(*OPTIONS, str(SOURCE), "sum")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"sum {2 * sum(range(999))}\n"
    assert run(*OPTIONS, str(SOURCE), "status").returncode == 3


def test_a_faulting_kernel_ends_the_program_with_its_line():
    done = run(*OPTIONS, str(SOURCE), "far")
    assert done.returncode == 1 and done.stdout == ""
    assert "kernel 'scaled', block (0,0,0), thread (0,0,0): illegal memory access: " \
           "a write at address" in done.stderr
    assert "at sums.cu:" in done.stderr


@pytest.mark.parametrize("sanitize", [False, True])
def test_memcheck_finds_a_read_one_past_the_end(sanitize):
    done = run(*OPTIONS, *(["--sanitize"] if sanitize else []), str(SOURCE), "past")
    if not sanitize:   # memory the process owns: unseen, as often on a GPU
        assert done.returncode == 0 and done.stdout.startswith("sum ")
        return
    assert done.returncode == 1 and done.stdout == ""
    assert f"memcheck: invalid __global__ read of size 4 bytes at sums.cu:{LINE} in " \
           "kernel 'scaled' by thread (103,0,0) in block (7,0,0)" in done.stderr
    assert "0 bytes past the end of a 4000-byte allocation" in done.stderr


def test_memcheck_finds_a_read_into_where_the_next_buffer_would_be():
    # cudaMalloc's buffers were malloc's chunks, packed: x[n + 39] was y[23], unseen
    done = run(*OPTIONS, "--sanitize", str(SOURCE), "next")
    assert done.returncode == 1 and done.stdout == ""
    assert f"memcheck: invalid __global__ read of size 4 bytes at sums.cu:{LINE}" \
        in done.stderr
    assert "156 bytes past the end of a 4000-byte allocation" in done.stderr


TWO_FILES = [str(PROGRAMS / "two_files" / name) for name in ("main.cu", "kernels.cu")]


def test_a_program_of_two_files_runs_as_nvcc_builds_it():
    # the runner took one file: SGEMM_CUDA's program (and many others) is two
    done = run(*TWO_FILES)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"sum {2 * sum(range(300))}\n"
    done = run("--sanitize", *TWO_FILES, "past")   # the program's argument follows
    assert done.returncode == 1 and done.stdout == ""
    assert "memcheck: invalid __global__ read of size 4 bytes at kernels.cu:7 in " \
           "kernel 'doubled' by thread (43,0,0) in block (2,0,0)" in done.stderr
    assert "0 bytes past the end of a 1200-byte allocation" in done.stderr


def test_initcheck_finds_a_read_of_what_no_copy_wrote():
    # a program that copies half its input: the kernel's reads of the rest were unseen
    done = run(*OPTIONS, "--sanitize", str(SOURCE), "unwritten")
    assert done.returncode == 1 and done.stdout == ""
    assert "initcheck: uninitialized __global__ read of size 4 bytes at " \
           f"sums.cu:{LINE}" in done.stderr
    byte = int(re.search(r"is byte (\d+) of a 4000-byte allocation at 0x[0-9a-f]+ made "
                         r"during the call, whose bytes \d+-\d+ nothing had written",
                         done.stderr)[1])
    assert 2000 <= byte < 4000
    done = run(*OPTIONS, "--sanitize", str(SOURCE), "sum")   # all of it copied
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"sum {2 * sum(range(999))}\n"


def test_memcheck_names_a_use_after_free():
    done = run(*OPTIONS, "--sanitize", str(SOURCE), "freed")
    assert done.returncode == 1
    assert f"memcheck: invalid __global__ read of size 4 bytes at sums.cu:{LINE}" \
        in done.stderr
    assert "is in a 4194304-byte allocation at 0xADDRESS that was freed before this " \
           "access (a use after free)" in re.sub(r"0x[0-9a-f]+", "0xADDRESS",
                                                 done.stderr)


def test_build_errors_name_the_line():
    done = run(str(SOURCE), "sum")   # no -I: launch.cuh is not found
    assert done.returncode == 1
    assert "launch.cuh" in done.stderr and "compiling sums.cu failed" in done.stderr


def test_math_classification_functions_are_global_as_with_nvcc(tmp_path):
    # isfinite/isinf/isnan/signbit unqualified, in a kernel and in the host's check of
    # its results (as llm.c's dev/cuda/common.h has it)
    (tmp_path / "classify.cu").write_text(
        "#include <cmath>\n#include <cstdio>\n"
        "__global__ void classify(const float* x, int* out) {\n"
        "  float v = x[threadIdx.x];\n"
        "  out[threadIdx.x] = isfinite(v) + 2 * isinf(v) + 4 * isnan(v)"
        " + 8 * signbit(v);\n}\n"
        "int main() {\n"
        "  float h[4] = {1.f, -INFINITY, NAN, -2.f}, *x;\n  int c[4], *out;\n"
        "  cudaMalloc(&x, sizeof h);\n  cudaMalloc(&out, sizeof c);\n"
        "  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);\n"
        "  classify<<<1, 4>>>(x, out);\n"
        "  cudaMemcpy(c, out, sizeof c, cudaMemcpyDeviceToHost);\n"
        "  for (int i = 0; i < 4; ++i) printf(\"%d %d\\n\", c[i], isfinite(h[i]));\n"
        "}\n")
    done = run(str(tmp_path / "classify.cu"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1 1\n10 0\n4 0\n9 1\n"


def test_a_program_s_output_shows_as_it_prints(tmp_path):
    # the runner showed it only once the program ended: llm.c's checks print their
    # verdict minutes before their benchmarks end, and a run stopped early showed
    # nothing at all
    (tmp_path / "slow.cu").write_text(
        "#include <cstdio>\n#include <chrono>\n#include <thread>\n"
        "int main() {\n  printf(\"results match\\n\");\n"
        "  std::this_thread::sleep_for(std::chrono::seconds(120));\n}\n")
    from cuda_emulator import program
    program.build(tmp_path / "slow.cu")   # built first: the wait below is the run's
    # as from a terminal: a job started in the background by a shell (as CI may be)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt
    child = subprocess.Popen([sys.executable, "-m", "cuda_emulator.program", "run",
                              str(tmp_path / "slow.cu")], stdout=subprocess.PIPE,
                             text=True, preexec_fn=lambda: signal.signal(
                                 signal.SIGINT, signal.SIG_DFL))
    try:
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready and child.stdout.readline() == "results match\n"
        assert child.poll() is None   # still running
    finally:   # Ctrl-C stops the runner and the program it runs
        child.send_signal(signal.SIGINT)
        child.wait(30)
    assert not [line for line in subprocess.run(
        ["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
        if line.endswith("/slow")]


def test_learners_idioms_run_as_nvcc_builds_them():
    """Macros over several lines holding a launch or inline PTX, a launch of a kernel
    whose name a macro pastes (with a parameter named t), overloaded kernels, template
    arguments a launch deduces, NULL for a pointer, static __shared__, an atomic given
    a value of another type, cooperative groups' scans (each once stopped the build or
    the launch)."""
    for checked in ([], ["--sanitize"]):   # a deduced launch under memcheck too
        done = run(*checked, str(PROGRAMS / "learner_idioms.cu"))
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [
            word for name in ("macro_launch", "overload", "overload_int", "deduced",
                              "explicit", "null_argument", "pasted_name",
                              "static_shared", "atomic_conversion",
                              "atomic_float", "scan", "macro_asm")
            for word in (name, "ok")]


def test_a_program_checks_its_kernel_against_the_emulators_cublas():
    """SGEMM, transposed, alpha and beta, GemmEx from fp16 to fp32 and the strided
    batch, each against the program's own kernel; a bad leading dimension refused (every
    cuBLAS call failed to compile before)."""
    done = run(str(PROGRAMS / "cublas_check.cu"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        word for name in ("sgemm", "sgemm_transposed", "alpha_beta", "gemm_ex_fp16",
                          "strided_batched", "bad_lda") for word in (name, "ok")]


@pytest.mark.parametrize("checked", [[], ["--sanitize"]])
def test_a_program_checks_its_kernel_against_the_emulators_cublaslt(checked):
    """cuBLASLt's matmul (cublasLtMatmul failed to compile before): fp32, A transposed
    with a bias and ReLU, a strided batch with beta and a bias, fp16 with ReLU, each
    against the program's own kernel; an epilogue the emulator lacks (GELU) and a scale
    type that does not match the compute type are refused, not computed wrong."""
    done = run(*checked, str(PROGRAMS / "cublaslt_check.cu"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == [f"{name} ok" for name in ("fp32", "transposed_bias_relu",
                                                  "batched_beta_bias", "fp16_relu")]
    assert lines[4:] == ["gelu_refused status 15", "scale_type_refused status 15"]
