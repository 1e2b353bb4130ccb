// WMMA (nvcuda::wmma) on the CPU emulator. A fragment's layout across the warp is
// unspecified by CUDA; here element e of lane l is element 32e + l of the tile in row
// order, so element-wise code over x[] works as on a GPU. mma_sync is a warp collective
// that gathers the tiles and computes in float.
#pragma once

#include "cuda_emulator.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K> struct tile_shape;
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  using element_type = T;
  using storage_element_type = T;
  static constexpr int rows = tile_shape<Use, M, N, K>::rows;
  static constexpr int cols = tile_shape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols / 32;
  static_assert(rows * cols % 32 == 0, "a WMMA tile spreads evenly over 32 lanes");
  T x[num_elements];
};

namespace detail {
inline int lane() { return ::attnbook_emu::rt().cur->linear % 32; }
// Where element e of the calling lane sits in a rows x cols tile.
template <int Cols> inline void place(int e, int& r, int& c) {
  int i = 32 * e + lane();
  r = i / Cols;
  c = i % Cols;
}
template <class F> inline void load(F& f, const typename F::element_type* p,
                                    unsigned ldm, bool row) {
  for (int e = 0; e < F::num_elements; ++e) {
    int r, c;
    place<F::cols>(e, r, c);
    f.x[e] = row ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
  }
}
struct MmaLane { const void *a, *b, *c; void* d; };
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L, class P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p,
                             unsigned ldm) {
  static_assert(!std::is_same_v<Use, accumulator>,
                "load_matrix_sync of an accumulator takes a layout_t");
  detail::load(f, reinterpret_cast<const T*>(p), ldm, std::is_same_v<L, row_major>);
}
template <int M, int N, int K, class T, class P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p,
                             unsigned ldm, layout_t layout) {
  detail::load(f, reinterpret_cast<const T*>(p), ldm, layout == mem_row_major);
}
template <int M, int N, int K, class T, class P>
inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f,
                              unsigned ldm, layout_t layout) {
  using F = fragment<accumulator, M, N, K, T>;
  auto* q = reinterpret_cast<T*>(p);
  for (int e = 0; e < F::num_elements; ++e) {
    int r, c;
    detail::place<F::cols>(e, r, c);
    (layout == mem_row_major ? q[size_t(r) * ldm + c] : q[size_t(c) * ldm + r]) =
        f.x[e];
  }
}
template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(
    fragment<Use, M, N, K, T, L>& f,
    const typename fragment<Use, M, N, K, T, L>::element_type& v) {
  for (auto& x : f.x) x = v;
}

template <int M, int N, int K, class TA, class LA, class LB, class TC, class TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD>& d,
                     const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TA, LB>& b,
                     const fragment<accumulator, M, N, K, TC>& c) {
  using FA = fragment<matrix_a, M, N, K, TA, LA>;
  using FB = fragment<matrix_b, M, N, K, TA, LB>;
  using FC = fragment<accumulator, M, N, K, TC>;
  using FD = fragment<accumulator, M, N, K, TD>;
  FD out;
  detail::MmaLane me{&a, &b, &c, &out};
  ::attnbook_emu::warp_collective(0xffffffffu, __LINE__, &me,
                                  [](void* const* data, uint32_t) {
    float A[M][K], B[K][N], C[M][N];
    for (int l = 0; l < 32; ++l) {
      auto* m = static_cast<detail::MmaLane*>(data[l]);
      for (int e = 0; e < FA::num_elements; ++e) {
        int i = 32 * e + l;
        A[i / K][i % K] = float(static_cast<const FA*>(m->a)->x[e]);
      }
      for (int e = 0; e < FB::num_elements; ++e) {
        int i = 32 * e + l;
        B[i / N][i % N] = float(static_cast<const FB*>(m->b)->x[e]);
      }
      for (int e = 0; e < FC::num_elements; ++e) {
        int i = 32 * e + l;
        C[i / N][i % N] = float(static_cast<const FC*>(m->c)->x[e]);
      }
    }
    for (int l = 0; l < 32; ++l) {
      auto* m = static_cast<detail::MmaLane*>(data[l]);
      for (int e = 0; e < FD::num_elements; ++e) {
        int i = 32 * e + l, r = i / N, col = i % N;
        float acc = C[r][col];
        for (int k = 0; k < K; ++k) acc += A[r][k] * B[k][col];
        static_cast<FD*>(m->d)->x[e] = TD(acc);
      }
    }
  });
  d = out;
}

}  // namespace wmma
}  // namespace nvcuda
