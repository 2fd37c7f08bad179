// Shared by gmlx's 4-bit matrix-vector kernels (qmv4.cu, qmv4_three.cu, qmv4_silu.cu), passed
// to MLX's custom-kernel API as their header. The matrices are MLX affine 4-bit in groups of
// 32 columns (w = scale * q + bias): codes `uint32_t [N, K / 8]`, scales and biases `S [N, K /
// 32]`; the activation row `x` is `T [K]`. A warp computes a few rows of one or more matrices
// against the same row x.
//
// Lane l of a warp takes groups l, l + 32, ...: per group it reads 16 bytes of codes (32
// weights) per row, so a warp reads 512 contiguous bytes per row and instruction. The codes,
// scales and biases of INFLIGHT groups per row are loaded before any is used, so that a warp
// keeps several loads outstanding (a decode step has too few warps to hide memory latency
// with one load each). A group's 32 activations are converted once and serve all the warp's
// rows. A nibble becomes a float without a conversion instruction: 0x4B0000nn read as a float
// is 2^23 + nn. `x` may be a view at any offset, so its alignment decides between 16-byte and
// element loads; a row of codes is K / 2 bytes, a multiple of 16.

__device__ __forceinline__ int gmlx_warp_index() {
  return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}

// acc[r] = row r . x for the R rows whose codes, scales and biases start at w[r], s[r], b[r]:
// the whole warp's sum, in every lane.
template <int K, int R, typename S, typename T>
__device__ __forceinline__ void gmlx_qmv4_dot(
    const uint32_t* const* w,
    const S* const* s,
    const S* const* b,
    const T* x,
    float* acc) {
  constexpr int GROUPS = K / 32;
  constexpr int INFLIGHT = 4;
  const int lane = threadIdx.x & 31;
  const bool x_aligned = (reinterpret_cast<size_t>(x) & 15) == 0;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.0f;
  }
  for (int g0 = lane; g0 < GROUPS; g0 += 32 * INFLIGHT) {
    uint4 codes[INFLIGHT][R];
    float scale[INFLIGHT][R];
    float bias[INFLIGHT][R];
#pragma unroll
    for (int u = 0; u < INFLIGHT; ++u) {
      const int g = g0 + 32 * u;
      if (g < GROUPS) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          codes[u][r] = __ldg(reinterpret_cast<const uint4*>(w[r]) + g);
          scale[u][r] = static_cast<float>(s[r][g]);
          bias[u][r] = static_cast<float>(b[r][g]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < INFLIGHT; ++u) {
      const int g = g0 + 32 * u;
      if (g >= GROUPS) {
        break;
      }
      float xv[32];
      const T* xg = x + g * 32;
      if (x_aligned) {
        constexpr int PER = 16 / sizeof(T);
#pragma unroll
        for (int c = 0; c < 32 / PER; ++c) {
          uint4 raw = __ldg(reinterpret_cast<const uint4*>(xg) + c);
          const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int i = 0; i < PER; ++i) {
            xv[c * PER + i] = static_cast<float>(e[i]);
          }
        }
      } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          xv[i] = static_cast<float>(xg[i]);
        }
      }
      float xs = 0.0f;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        xs += xv[i];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t words[4] = {codes[u][r].x, codes[u][r].y, codes[u][r].z, codes[u][r].w};
        float d = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t lo = words[j] & 0x0F0F0F0Fu;
          const uint32_t hi = (words[j] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float qe =
                __int_as_float(__byte_perm(lo, 0x4B000000u, 0x7540u + k)) - 8388608.0f;
            const float qo =
                __int_as_float(__byte_perm(hi, 0x4B000000u, 0x7540u + k)) - 8388608.0f;
            d = fmaf(qe, xv[j * 8 + 2 * k], d);
            d = fmaf(qo, xv[j * 8 + 2 * k + 1], d);
          }
        }
        acc[r] = fmaf(scale[u][r], d, fmaf(bias[u][r], xs, acc[r]));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    }
  }
}

// Points w/s/b[at + r] at row min(row0 + r, n - 1) of a matrix, r < ROWS: a warp's last rows
// past the matrix repeat its last row (computed, never written), so no row needs a branch.
template <int K, int ROWS, typename S>
__device__ __forceinline__ void gmlx_qmv4_point(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    int n,
    int row0,
    int at,
    const uint32_t** wr,
    const S** sr,
    const S** br) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const size_t row = static_cast<size_t>(min(row0 + r, n - 1));
    wr[at + r] = w + row * (K / 8);
    sr[at + r] = scales + row * (K / 32);
    br[at + r] = biases + row * (K / 32);
  }
}

// y[row0 .. row0 + ROWS) = rows of W x, those below n.
template <int K, int ROWS, typename S, typename T>
__device__ __forceinline__ void gmlx_qmv4_rows(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    const T* x,
    T* y,
    int n,
    int row0) {
  const uint32_t* wr[ROWS];
  const S* sr[ROWS];
  const S* br[ROWS];
  gmlx_qmv4_point<K, ROWS, S>(w, scales, biases, n, row0, 0, wr, sr, br);
  float acc[ROWS];
  gmlx_qmv4_dot<K, ROWS, S, T>(wr, sr, br, x, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (row0 + r < n) {
        y[row0 + r] = static_cast<T>(acc[r]);
      }
    }
  }
}

// y[row0 .. row0 + ROWS) = silu(G x) * (U x) for those rows below n: the gate's and the up
// matrix's rows share the warp's activations, and the product leaves in float before rounding.
template <int K, int ROWS, typename S, typename T>
__device__ __forceinline__ void gmlx_qmv4_silu_rows(
    const uint32_t* wg,
    const S* sg,
    const S* bg,
    const uint32_t* wu,
    const S* su,
    const S* bu,
    const T* x,
    T* y,
    int n,
    int row0) {
  const uint32_t* wr[2 * ROWS];
  const S* sr[2 * ROWS];
  const S* br[2 * ROWS];
  gmlx_qmv4_point<K, ROWS, S>(wg, sg, bg, n, row0, 0, wr, sr, br);
  gmlx_qmv4_point<K, ROWS, S>(wu, su, bu, n, row0, ROWS, wr, sr, br);
  float acc[2 * ROWS];
  gmlx_qmv4_dot<K, 2 * ROWS, S, T>(wr, sr, br, x, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (row0 + r < n) {
        const float gate = acc[r];
        y[row0 + r] = static_cast<T>(gate / (1.0f + expf(-gate)) * acc[ROWS + r]);
      }
    }
  }
}
