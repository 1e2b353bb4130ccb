"""Kernels from elsewhere run unmodified on the emulator: the toolkit's headers (
cooperative groups, WMMA, pipelines, cuda::barrier, fp8, math constants, cuBLAS
included and unused), its host runtime API, the launch and declaration forms the source
transform must accept, hardware semantics of barriers and shuffles
(tests/cuda/foreign.cu)."""
import importlib
import pathlib

import pytest
import torch

import attnbook as ab
from cuda_emulator import emulate

HERE = pathlib.Path(__file__).parent / "cuda"


@pytest.fixture(scope="module")
def ext():
    return ab.compile("foreign", (HERE / "foreign.cu").read_text(),
                      (HERE / "foreign_wrapper.cpp").read_text(), ["run"],
                      backend="emulator", include_dirs=[HERE / "foreign_include"])


def test_course_style_host_program(ext):
    x = torch.arange(1000, dtype=torch.float32) / 7
    result, info = torch.zeros(1), torch.zeros(6)
    assert ext.run("scale_sum", [x, result, info], 0) == 0
    torch.testing.assert_close(result, -2 * x.sum().reshape(1), rtol=1e-5, atol=1e-3)
    arch, same_sms, blocks, block_size, timed, pi = info.tolist()
    assert arch == 80 and same_sms == 1 and timed == 1
    assert blocks == 16 and block_size == 1024      # 2048 threads per SM on sm_80
    assert pi == pytest.approx(3.14159265)


def test_cooperative_groups_tiles(ext):
    x = torch.randn(8, 40, generator=torch.Generator().manual_seed(0))
    out = torch.zeros(8, 2)
    ext.run("cg", [x, out], 40)
    torch.testing.assert_close(out[:, 0], x.max(1).values)
    torch.testing.assert_close(out[:, 1], x.sum(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("order", ["forward", "shuffle"])
def test_cooperative_groups_memcpy_async(ext, order):
    x = torch.randn(3, 100, generator=torch.Generator().manual_seed(5))
    out = torch.zeros(3, 100)
    with ab.thread_order(order):
        ext.run("cg_stage", [x, out], 0)
    assert torch.equal(out, x.flip(1))


def test_wmma(ext):
    g = torch.Generator().manual_seed(1)
    a = torch.randn(16, 16, generator=g).half()
    b = torch.randn(16, 16, generator=g).half()
    c = torch.zeros(16, 16)
    ext.run("wmma", [a, b.T.contiguous(), c], 0)     # b is col_major
    torch.testing.assert_close(c, 2 * a.float() @ b.float(), rtol=1e-5, atol=1e-4)


def test_pipeline_primitives_and_barrier(ext):
    x = torch.arange(1, 513, dtype=torch.float32)
    out = torch.zeros(512)
    ext.run("pipeline", [x, out], 0)
    first, second = x[:256].view(64, 4), x[256:].view(64, 4).clone()
    second[:, 2:] = 0                                   # the last 8 bytes zero-filled
    assert torch.equal(out[:256].view(64, 4), first.flip(0))
    assert torch.equal(out[256:].view(64, 4), second.flip(0))


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle"])
def test_barriers_on_different_lines_are_one_barrier(ext, order):
    x = torch.randn(4 * 32, generator=torch.Generator().manual_seed(2))
    out = torch.zeros(4 * 32)
    with ab.thread_order(order):
        ext.run("producer_consumer", [x, out], 4)
    assert torch.equal(out, 10 * x.view(4, 32).roll(-1, 1).flatten())


def test_device_functions_and_types(ext):
    x = torch.arange(32, dtype=torch.int32)
    out = torch.zeros(32 * 16 + 1, dtype=torch.int32)
    ext.run("builtins", [x, out], 0)
    o = out[:-1].view(32, 16)
    lane = torch.arange(32)
    same = [sum(1 << j for j in range(32) if j % 4 == i % 4) for i in range(32)]
    assert o[:, 0].tolist() == [m - (1 << 32) if m >= 1 << 31 else m for m in same]
    assert (o[:, 1] == 496).all() and (o[:, 2] == 31).all() and (o[:, 3] == 1).all()
    assert out[-1] == 32
    assert (o[:, 4] == 0x18).all() and (o[:, 5] == 20).all() and (o[:, 6] == 6).all()
    assert (o[:, 7] == 1 + 2 + 4 + 8 + 10 + 4).all()
    # width 8, lane mask 16: lanes 16..31 read lane ^ 16 (an earlier group); lanes
    # 0..15 would read a later group and get their own value (CUDA Programming Guide)
    assert o[:, 8].tolist() == torch.where(lane >= 16, lane ^ 16, lane).tolist()
    assert (o[:, 9] == 325).all()                        # 3.3 -> 3.25 in e4m3
    assert (o[:, 10] == 1024).all() and (o[:, 11] == 448).all()
    assert torch.equal(o[:, 12], 2 * x)


def test_cuda_launch_kernel(ext):
    x = torch.zeros(100)
    assert ext.run("launch_kernel", [x], 0) == 0
    assert (x == 1).all()


# ---- the source transform ------------------------------------------------------------
def test_transform_of_foreign_forms_keeps_lines():
    src = (HERE / "foreign.cu").read_text()
    out = emulate.to_cpp(src)
    assert out.count("\n") == src.count("\n")
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(src.splitlines()) if "scale_sum<2," in ln
              and "(kLimit" not in ln)
    assert "kernel_address<decltype(attnbook_t)>(scale_sum<2, (kLimit > 5)>)" \
        in lines[at]
    assert '"scale_sum<2, (kLimit > 5)>").cfg(' in lines[at]
    assert "attnbook_host_gridDim" in out and "attnbook_host_blockDim" in out


def test_spliced_lines_join_their_first_and_later_lines_keep_their_numbers():
    src = ("#define LAUNCH(k, n) \\\n  k<<<(n + 31) / 32, \\  \n  32>>>(n)\n"
           "__global__ void g(int n) {}\nvoid h() { LAUNCH(g, 5); }\n")
    out = emulate.to_cpp(src)
    assert out.count("\n") == src.count("\n")
    lines = out.splitlines()
    assert lines[0].startswith("#define LAUNCH(k, n)") and ".cfg((n + 31) / 32," in \
        lines[0] and lines[1:3] == ["", ""]
    assert lines[3] == "__global__ void g(int n) {}"


def test_a_launch_from_device_code_is_refused_at_compile_time():
    # it compiled, then stalled until the 60 s budget ran out
    src = ("__device__ int table[2] = {1, 2};\n__global__ void child(int* x) {}\n"
           "__global__ void parent(int* x) {\n  if (threadIdx.x == 0) {\n"
           "    child<<<1, 32>>>(x);\n  }\n}\n"
           "void launch(int* x) { parent<<<1, 32>>>(x); }\n")
    with pytest.raises(SyntaxError, match=r"line 5: a kernel launched from device "
                                          r"code \(dynamic parallelism\)"):
        emulate.to_cpp(src)
    # the host's launch after a __device__ variable's braces is no device code
    assert "launch_of(" in emulate.to_cpp(src.replace("child<<<1, 32>>>(x);", ""))


def test_host_names_of_builtins_are_renamed_in_their_scope_only():
    src = ("void go(dim3 blockDim) { k<<<1, blockDim>>>(); }\n"
           "__global__ void k() { int i = blockIdx.x * blockDim.x; }\n"
           "void h() { dim3 grid(4), blockDim(8); k<<<grid, blockDim>>>(); }\n")
    lines = emulate.to_cpp(src).splitlines()
    assert "dim3 attnbook_host_blockDim)" in lines[0]
    assert ".cfg(1, attnbook_host_blockDim)" in lines[0]
    assert "blockIdx.x * blockDim.x" in lines[1]             # the kernel's built-in
    assert ".cfg(grid, attnbook_host_blockDim)" in lines[2]


def test_headers_are_found_in_each_folder_and_beside_each_other(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "outer.cuh").write_text('#include "inner.cuh"\nint outer;\n')
    (tmp_path / "a" / "inner.cuh").write_text("#pragma once\nint inner;\n")
    out = emulate.inline_headers('#include "outer.cuh"\n#include "inner.cuh"\n',
                                 "cell.cu", [tmp_path / "missing", tmp_path / "a"])
    assert out.count("int inner;") == 1 and "int outer;" in out


def test_error_after_a_multiline_launch_names_its_line():
    src = ("__global__ void k(int* x) {}\n"
           "template <int A, bool B> __global__ void t(int* x) {}\n"
           "void go(int* x) {\n"
           "  t<1,\n    (2 > 1)><<<1,\n      32>>>(x);\n"
           "  int y = 1'000;\n"
           "  undefined_name(y);\n"
           "}\n")
    with pytest.raises(ab.CompileError, match=r"cell\.cu:8:.*undefined_name"):
        ab.compile("foreign_lines", src, "", [], backend="emulator")


# ---- what kernels take from CUDA's libraries -----------------------------------------
LIBRARIES_WRAPPER = r"""
void launch_block_max(const float*, float*, int);
int library_types(int);
void block_max_of(at::Tensor x, at::Tensor out) {
  launch_block_max(x.data_ptr<float>(), out.data_ptr<float>(), int(out.numel()));
}
int64_t library_type(int64_t which) { return library_types(int(which)); }
"""


def test_libcu_and_cublas_headers_as_kernels_online_use_them():
    ext = ab.compile("libraries", (HERE / "libraries.cu").read_text(),
                     LIBRARIES_WRAPPER, ["block_max_of", "library_type"],
                     backend="emulator")
    x = torch.randn(3 * 256, generator=torch.Generator().manual_seed(4))
    out = torch.zeros(3)
    for order in emulate.ORDERS:
        with ab.thread_order(order, seed=2):
            ext.block_max_of(x, out)
        torch.testing.assert_close(out, x.view(3, 256).amax(1), rtol=0, atol=0)
    with ab.sanitize():
        ext.block_max_of(x, out)
    # the toolkit's values (CUDA 13's library_types.h, cublas_api.h, cublasLt.h)
    assert [ext.library_type(i) for i in range(4)] == [0, 68, 36, 0]


PIPELINE_WRAPPER = r"""
void launch_own_pieces(const float*, float*, int, int, int);
void launch_shared_tiles(const float*, float*, int, int);
void own_pieces_of(at::Tensor x, at::Tensor out) {        // x: [blocks, tiles, n, 4]
  launch_own_pieces(x.data_ptr<float>(), out.data_ptr<float>(), int(x.size(0)),
                    int(x.size(2)), int(x.size(1)));
}
void shared_tiles_of(at::Tensor x, at::Tensor out) {      // x: [tiles, n]
  launch_shared_tiles(x.data_ptr<float>(), out.data_ptr<float>(), int(x.size(1)),
                      int(x.size(0)));
}
"""


def test_cuda_pipeline_of_a_thread_and_of_a_block():
    ext = ab.compile("pipelines", (HERE / "pipeline.cu").read_text(), PIPELINE_WRAPPER,
                     ["own_pieces_of", "shared_tiles_of"], backend="emulator")
    g = torch.Generator().manual_seed(7)
    own = torch.randn(3, 5, 64, 4, generator=g)
    tiles = torch.randn(7, 96, generator=g)
    for order in ["forward", "reverse", "shuffle"]:
        with ab.thread_order(order, seed=3):
            out = torch.zeros(3, 64)
            ext.own_pieces_of(own, out)
            torch.testing.assert_close(out, own.sum((1, 3)))
            out = torch.zeros(96)
            ext.shared_tiles_of(tiles, out)
            torch.testing.assert_close(out, tiles.sum(0).flip(0))
    with ab.sanitize():
        ext.own_pieces_of(own, torch.zeros(3, 64))
        ext.shared_tiles_of(tiles, torch.zeros(96))


def test_a_grid_constant_parameter():
    src = ("struct Args { const float* x; float* y; int n; };\n"
           "__global__ void copy(const __grid_constant__ Args args) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "  if (i < args.n) args.y[i] = args.x[i];\n}\n"
           "void launch_copy(const float* x, float* y, int n) {\n"
           "  copy<<<(n + 63) / 64, 64>>>(Args{x, y, n});\n}\n")
    wrapper = ("void launch_copy(const float*, float*, int);\n"
               "void copy_of(at::Tensor x, at::Tensor y) {\n"
               "  launch_copy(x.data_ptr<float>(), y.data_ptr<float>(),\n"
               "              int(x.numel()));\n}\n")
    ext = ab.compile("foreign_grid_constant", src, wrapper, ["copy_of"],
                     backend="emulator")
    x, y = torch.arange(100.), torch.zeros(100)
    ext.copy_of(x, y)
    assert torch.equal(x, y)


def test_a_wrapper_allocates_with_at_empty_and_at_zeros():
    src = ("__global__ void twice(const float* x, float* y, int n) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "  if (i < n) y[i] = 2.f * x[i];\n}\n"
           "void launch_twice(const float* x, float* y, int n) {\n"
           "  twice<<<(n + 63) / 64, 64>>>(x, y, n);\n}\n")
    wrapper = ("void launch_twice(const float*, float*, int);\n"
               "std::vector<at::Tensor> twice_of(at::Tensor x) {\n"
               "  at::Tensor y = at::empty_like(x), z = at::zeros({3}, x.options());\n"
               "  at::Tensor w = at::empty({2}, x.options()), v = at::zeros_like(x);\n"
               "  launch_twice(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());\n"
               "  return {y, z, w, v};\n}\n")
    ext = ab.compile("foreign_empty", src, wrapper, ["twice_of"], backend="emulator")
    x = torch.arange(100.)
    y, z, w, v = ext.twice_of(x)
    assert torch.equal(y, 2 * x) and torch.equal(z, torch.zeros(3))
    assert w.shape == (2,) and torch.equal(v, torch.zeros(100))


def test_a_header_named_h_is_transformed_too(tmp_path):
    # A project's common.h: a launch and inline PTX, included by the kernel text and by
    # the wrapper (which sees it once, as with #pragma once).
    (tmp_path / "common.h").write_text(
        "#pragma once\n"
        "struct Sizes { int n; };\n"
        "__device__ inline unsigned lane_id() {\n"
        "  unsigned l;\n  asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(l));\n"
        "  return l;\n}\n"
        "__global__ void lanes(int* out, Sizes s);\n"
        "inline void launch_lanes(int* out, Sizes s) {\n"
        "  lanes<<<(s.n + 31) / 32, 32>>>(out, s);\n}\n")
    src = ('#include "common.h"\n'
           "__global__ void lanes(int* out, Sizes s) {\n"
           "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "  if (i < s.n) out[i] = lane_id();\n}\n")
    wrapper = ('#include "common.h"\n'
               "void lanes_of(at::Tensor out) {\n"
               "  launch_lanes(out.data_ptr<int>(), Sizes{int(out.numel())});\n}\n")
    ext = ab.compile("foreign_common_h", src, wrapper, ["lanes_of"], backend="emulator",
                     include_dirs=[tmp_path])
    out = torch.zeros(70, dtype=torch.int32)
    ext.lanes_of(out)
    assert torch.equal(out, torch.arange(70, dtype=torch.int32) % 32)


def test_a_cublas_call_the_emulator_lacks_is_a_compile_error_naming_it():
    # the GEMMs run (test_program); a matrix-vector product does not
    src = ("#include <cublas_v2.h>\nvoid gemv(cublasHandle_t h, const float* a, "
           "float* c) {\n  float one = 1.f;\n"
           "  cublasSgemv(h, CUBLAS_OP_N, "
           "4, 4, &one, a, 4, a, 1, &one, c, 1);\n}\n")
    with pytest.raises(ab.CompileError, match=r"cell\.cu:4:.*cublasSgemv"):
        ab.compile("foreign_cublas", src, "", [], backend="emulator")


# ---- a whole torch extension file ---------------------------------------------------
def test_load_extension_runs_a_torch_extension_file():
    mod = ab.load_extension(HERE / "rowsoftmax_ext.cu", backend="emulator")
    x = torch.randn(5, 300, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(mod.row_softmax(x), x.softmax(1))
    torch.testing.assert_close(mod.row_softmax_any(x.double()), x.double().softmax(1))
    with pytest.raises(RuntimeError, match="x must be contiguous"):
        mod.row_softmax(x.T)


TWO_FILES = [HERE / "two_files" / "main.cpp", HERE / "two_files" / "scale.cu"]


def test_load_extension_takes_torch_loads_form_with_several_files():
    # -std=c++17, which learners' scripts pass for nvcc's host pass, gives way to the
    # emulator's C++20 (its headers did not compile under it)
    mod = ab.load_extension(name="two_files", sources=TWO_FILES,
                            extra_cflags=["-DFACTOR=3", "-std=c++17"],
                            backend="emulator")
    x = torch.arange(300.)
    torch.testing.assert_close(mod.scale(x, 2.0, False), x * 6)


@pytest.mark.stack_independent   # the sanitizers' run
def test_a_loaded_extension_runs_its_checked_build_inside_sanitize():
    # the same build as the test above (one build each, whichever runs first)
    mod = ab.load_extension(name="two_files", sources=TWO_FILES,
                            extra_cflags=["-DFACTOR=3", "-std=c++17"],
                            backend="emulator")
    x = torch.arange(40.)
    past_end = (r"invalid __global__ write .* at scale\.cu:8 .* 0 bytes past the end "
                r"of a 160-byte allocation")
    with ab.sanitize(), pytest.raises(ab.MemcheckError, match=past_end):
        mod.scale(x, 2.0, True)
    with ab.profile() as report:
        torch.testing.assert_close(mod.scale(x, 2.0, False), x * 6)
    assert [launch.kernel for launch in report.launches] == ["scale_kernel"]
    single = ab.load_extension(HERE / "rowsoftmax_ext.cu", backend="emulator")
    with ab.profile() as report:
        single.row_softmax(torch.randn(3, 50))
    assert len(report.launches) == 1


@pytest.fixture(scope="module")
def scaler():
    return ab.load_extension(HERE / "classes" / "scaler.cu", backend="emulator")


def test_a_binding_s_classes_attributes_and_submodules_are_as_under_torch(scaler):
    # the attribute came back as a function, isinstance raised, the submodule's
    # function was an AttributeError
    assert scaler.BLOCK == 256 and scaler.Scaler.block() == 256
    x = torch.arange(300.)
    three = scaler.Scaler(3.0)
    assert isinstance(three, scaler.Scaler) and three.s == 3.0
    torch.testing.assert_close(three.run(x), 3 * x)
    three.s = 0.5
    torch.testing.assert_close(three.run(x=x), x / 2)
    assert scaler.rounding_number(scaler.Rounding.toward_zero) == 1
    torch.testing.assert_close(scaler.helpers.twice(x), 2 * x)
    with pytest.raises(RuntimeError, match="x: float32 on the GPU"):
        three.run(x.double())


def test_a_method_s_fault_is_a_kernel_fault_with_its_line(scaler):
    # a plain RuntimeError at @pc(0x...) before, the write unguarded
    with pytest.raises(ab.KernelFault, match=r"kernel 'scale_kernel', block \(0,0,0\)"
                                             r", thread \(0,0,0\): .* 15980 bytes past "
                                             r"the end of a 20-byte tensor at "
                                             r"scaler\.cu:11"):
        scaler.Scaler(1.0).run(torch.zeros(5), 4000)
    with pytest.raises(ab.KernelFault, match="a kernel wrote 0 bytes past the end of "
                                             "a 20-byte tensor"):
        scaler.Scaler(1.0).run(torch.zeros(5), 5)


def test_a_binding_s_classes_run_checked_inside_sanitize(scaler):
    # "generic_type: type 'Scaler' is already registered!" at any call before
    made_outside = scaler.Scaler(2.0)
    x = torch.arange(5.)
    past_end = (r"invalid __global__ write .* at scaler\.cu:11 .* 0 bytes past the "
                r"end of a 20-byte allocation")
    with ab.sanitize():
        inside = scaler.Scaler(2.0)
        assert isinstance(inside, scaler.Scaler) and inside.s == 2.0
        torch.testing.assert_close(inside.run(x), 2 * x)
        with pytest.raises(ab.MemcheckError, match=past_end):
            inside.run(x, 5)
        with pytest.warns(UserWarning, match="Scaler.run: the object was made outside "
                                             "sanitize"):
            torch.testing.assert_close(made_outside.run(x), 2 * x)
        torch.testing.assert_close(scaler.helpers.twice(x), 2 * x)
        assert scaler.Scaler.block() == 256
        assert scaler.rounding_number(scaler.Rounding.nearest) == 0
    with ab.profile() as report:
        scaler.Scaler(1.0).run(x)
        scaler.helpers.twice(x)
    assert [launch.kernel for launch in report.launches] == ["scale_kernel"] * 2
    assert isinstance(made_outside, scaler.Scaler)
    torch.testing.assert_close(inside.run(x), 2 * x)   # an object keeps its build


def test_torch_library_operators_run_guarded_and_checked_as_torch_ops():
    # learn-cuda's form: load(..., is_python_module=False), then torch.ops; a module
    # without PYBIND11_MODULE was refused, and torch.ops calls would pass the guards
    # and sanitize() by
    source = [HERE / "operators" / "scale_op.cu"]
    path = ab.load_extension(name="scale_op", sources=source, is_python_module=False,
                             backend="emulator")
    assert path.endswith(".so")
    scale = torch.ops.attnbook_test_ops.scale
    x = torch.arange(10.)
    torch.testing.assert_close(scale(x, 2.0), 2 * x)
    with pytest.raises(ab.KernelFault, match=r"kernel 'scale_kernel', .* 15960 bytes "
                                             r"past the end of a 40-byte tensor at "
                                             r"scale_op\.cu:11"):
        scale(x, 2.0, 4000)
    with pytest.raises(ab.KernelFault, match="a kernel wrote 0 bytes past the end of "
                                             "a 40-byte tensor"):
        scale(x, 2.0, 10)
    with ab.sanitize():
        with pytest.raises(ab.MemcheckError, match=r"invalid __global__ write .* at "
                                                   r"scale_op\.cu:11 .* 0 bytes past "
                                                   r"the end of a 40-byte allocation"):
            scale(x, 2.0, 10)
        torch.testing.assert_close(scale(x, 3.0, poke=-1), 3 * x)
    with ab.profile() as report:
        scale(x, 1.0)
    assert [launch.kernel for launch in report.launches] == ["scale_kernel"]
    # loaded again, as a notebook cell run twice does
    assert ab.load_extension(name="scale_op", sources=source, is_python_module=False,
                             backend="emulator") == path
    torch.testing.assert_close(torch.ops.attnbook_test_ops.scale(x, 0.5), x / 2)


def test_load_extension_checks_its_input():
    with pytest.raises(ValueError, match="ASCII identifier"):
        ab.load_extension("PYBIND11_MODULE(x, m) {}", name="résumé",
                          backend="emulator")
    with pytest.raises(ab.CompileError, match="no file defines a PYBIND11_MODULE"):
        ab.load_extension("__global__ void k() {}", backend="emulator")
    with pytest.raises(TypeError, match="one extension file"):
        ab.load_extension(TWO_FILES[1], sources=TWO_FILES, backend="emulator")
    # an IndexError, and text without a module, before
    with pytest.raises(TypeError, match="sources must name at least one file"):
        ab.load_extension(name="none", sources=[], backend="emulator")
    with pytest.raises(FileNotFoundError, match="no extension file 'kernels/gone.cuh'"):
        ab.load_extension("kernels/gone.cuh", backend="emulator")


def test_load_extension_takes_the_name_first_as_torch_load_does():
    # learners' load("my_ext", sources=[...]) was refused: two sources of a module
    mod = ab.load_extension("two_files", sources=iter(TWO_FILES),   # any iterable
                            extra_cflags=["-DFACTOR=3"], backend="emulator")
    torch.testing.assert_close(mod.scale(torch.arange(30.), 2.0, False),
                               torch.arange(30.) * 6)


def test_a_cpp_file_may_include_a_cuda_header_first():
    # binding.cpp includes <cuda_bf16.h> before torch and declares halve.cu's launcher
    # with nv_bfloat16; both files define the emulator's fiber switch, linked once.
    folder = HERE / "bf16_first"
    mod = ab.load_extension(name="bf16_first", backend="emulator",
                            sources=[folder / "binding.cpp", folder / "halve.cu"])
    x = torch.randn(300, generator=torch.Generator().manual_seed(6)).bfloat16()
    assert torch.equal(mod.halve(x), x / 2)
    with ab.sanitize():
        assert torch.equal(mod.halve(x), x / 2)


# ---- build errors --------------------------------------------------------------------
def test_a_function_the_wrapper_lacks_is_named():
    with pytest.raises(ab.CompileError, match="functions lists 'forward'"):
        ab.compile("foreign_missing", "__global__ void k() {}",
                   "void run() {}", ["run", "forward"], backend="emulator")


@pytest.mark.parametrize("name", ["naïve", "\u212aernel", "a-b"])
def test_extension_names_must_be_ascii_identifiers(name):
    with pytest.raises(ValueError, match="ASCII identifier"):
        ab.compile(name, "", "void run() {}", ["run"], backend="emulator")


def test_host_assembler_errors_are_extracted():
    log = ("ninja: build stopped\n/tmp/ccQ1.s: Assembler messages:\n"
           "/tmp/ccQ1.s:812: Error: no such instruction: `ldmatrix.sync.aligned'\n")
    short = importlib.import_module("cuda_emulator.build").short_error(log)
    assert short.endswith("Error: no such instruction: `ldmatrix.sync.aligned'")
    assert "ninja" not in short                         # the error line alone
