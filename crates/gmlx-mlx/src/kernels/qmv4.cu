// y = W x for one row x [K] and an MLX affine 4-bit matrix W [N, K] (groups of 32 columns,
// w = scale * q + bias), on CUDA through MLX's custom-kernel API: MLX generates the signature
//   (const uint32_t* w, const S* scales, const S* biases, const T* x, T* y)
// and the constants T (the activation type), K, N and ROWS (rows per warp).
//
// Lane l of a warp takes groups l, l + 32, ...: per group it reads 16 bytes of codes (32
// weights) per row, so a warp reads 512 contiguous bytes per row and instruction. The codes,
// scales and biases of INFLIGHT groups per row are loaded before any is used, so that a warp
// keeps several loads outstanding (a decode step has too few warps to hide memory latency
// with one load each). A group's 32 activations are converted once and serve the warp's ROWS
// rows. A nibble becomes a float without a conversion instruction: 0x4B0000nn read as a float
// is 2^23 + nn. `x` may be a view at any offset, so its alignment decides between 16-byte and
// element loads; a row of `w` is K / 2 bytes, a multiple of 16.
constexpr int GROUPS = K / 32;
constexpr int INFLIGHT = 4;
const int lane = threadIdx.x & 31;
const int row0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * ROWS;
if (row0 >= N) {
  return;
}
// the last warp's missing rows repeat row N - 1 (computed, never written): no branch per row
size_t row_at[ROWS];
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  row_at[r] = static_cast<size_t>(min(row0 + r, N - 1));
}
const bool x_aligned = (reinterpret_cast<size_t>(x) & 15) == 0;
float acc[ROWS];
#pragma unroll
for (int r = 0; r < ROWS; ++r) {
  acc[r] = 0.0f;
}
for (int g0 = lane; g0 < GROUPS; g0 += 32 * INFLIGHT) {
  uint4 codes[INFLIGHT][ROWS];
  float scale[INFLIGHT][ROWS];
  float bias[INFLIGHT][ROWS];
#pragma unroll
  for (int u = 0; u < INFLIGHT; ++u) {
    const int g = g0 + 32 * u;
    if (g < GROUPS) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        codes[u][r] = __ldg(reinterpret_cast<const uint4*>(w + row_at[r] * (K / 8)) + g);
        scale[u][r] = static_cast<float>(scales[row_at[r] * GROUPS + g]);
        bias[u][r] = static_cast<float>(biases[row_at[r] * GROUPS + g]);
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
    for (int r = 0; r < ROWS; ++r) {
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
for (int r = 0; r < ROWS; ++r) {
  float v = acc[r];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  const int row = row0 + r;
  if (lane == 0 && row < N) {
    y[row] = static_cast<T>(v);
  }
}
