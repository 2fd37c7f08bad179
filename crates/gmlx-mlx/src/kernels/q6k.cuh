// Shared by gmlx's Q6_K kernels (q6k_*.cu), passed to MLX's custom-kernel API as their header.
// A matrix is the file's own Q6_K blocks, `uint8_t [N, K / 256 * 210]`: 256 weights in 210 bytes
// {uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; half d}. Weight e = 128 h + 32 k + l
// (half h < 2, quarter k < 4, l < 32) is (d * scales[8 h + 2 k + l / 16]) * (q - 32), its 6-bit
// q's low four bits in ql[64 h + 32 (k & 1) + l] (the low nibble for k < 2, the high one after)
// and its high two in bits 2 k, 2 k + 1 of qh[32 h + l].
//
// A lane takes weights l0 .. l0 + 3 (l0 = 4 (lane % 8)) of every half and quarter of a block:
// 32 weights from three 4-byte words per half. A block is 210 bytes, so a word may sit 2 bytes
// off a 4-byte boundary: it is read as two 2-byte halves.

enum { GMLX_Q6K_BYTES = 210 };

// A lane's part of a block: its ql words (low nibbles of quarters 0 and 2, then of 1 and 3) and
// qh word per half, the block's d and the scales of its 4-weight run in each half and quarter.
struct GmlxQ6kPart {
  uint32_t ql[2][2];
  uint32_t qh[2];
  int8_t sc[2][4];
  float d;
};

__device__ __forceinline__ uint32_t gmlx_q6k_word(const uint8_t* p) {
  const unsigned short* h = reinterpret_cast<const unsigned short*>(p);
  return static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16);
}

__device__ __forceinline__ GmlxQ6kPart gmlx_q6k_load(const uint8_t* block, int l0) {
  GmlxQ6kPart p;
  const int is = l0 / 16;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    p.ql[h][0] = gmlx_q6k_word(block + 64 * h + l0);
    p.ql[h][1] = gmlx_q6k_word(block + 64 * h + 32 + l0);
    p.qh[h] = gmlx_q6k_word(block + 128 + 32 * h + l0);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      p.sc[h][k] = static_cast<int8_t>(__ldg(block + 192 + 8 * h + 2 * k + is));
    }
  }
  const unsigned short d = __ldg(reinterpret_cast<const unsigned short*>(block + 208));
  p.d = __half2float(__ushort_as_half(d));
  return p;
}

// The four 6-bit codes (0 .. 63, one per byte) of quarter k of half h of a lane's part.
__device__ __forceinline__ uint32_t gmlx_q6k_codes(const GmlxQ6kPart& p, int h, int k) {
  const uint32_t low = p.ql[h][k & 1];
  const uint32_t nibbles = k < 2 ? low & 0x0F0F0F0Fu : (low >> 4) & 0x0F0F0F0Fu;
  // bits 2k, 2k + 1 of each qh byte to bits 4, 5
  const int shift = 4 - 2 * k;
  const uint32_t high = shift >= 0 ? p.qh[h] << shift : p.qh[h] >> -shift;
  return nibbles | (high & 0x30303030u);
}

// Code byte i of `codes` as a float (q - 32): 0x4B0000nn read as a float is 2^23 + nn.
__device__ __forceinline__ float gmlx_q6k_value(uint32_t codes, int i) {
  return __int_as_float(__byte_perm(codes, 0x4B000000u, 0x7540u + i)) - 8388640.0f;
}

// Four consecutive values of x from p, as floats; `aligned`: p is 4 * sizeof(T) aligned.
template <typename T>
__device__ __forceinline__ void gmlx_q6k_x4(const T* p, bool aligned, float* out) {
  if (aligned && sizeof(T) == 2) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = static_cast<float>(e[i]);
    }
  } else if (aligned && sizeof(T) == 4) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = static_cast<float>(e[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = static_cast<float>(p[i]);
    }
  }
}

// A lane's part of block x_block's product: sum over its 32 weights of weight * x.
template <typename T>
__device__ __forceinline__ float gmlx_q6k_part_dot(
    const GmlxQ6kPart& p,
    const T* x_block,
    int l0,
    bool aligned) {
  float sum = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float xv[4];
      gmlx_q6k_x4(x_block + 128 * h + 32 * k + l0, aligned, xv);
      const uint32_t codes = gmlx_q6k_codes(p, h, k);
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        dot = fmaf(gmlx_q6k_value(codes, i), xv[i], dot);
      }
      sum = fmaf(p.d * static_cast<float>(p.sc[h][k]), dot, sum);
    }
  }
  return sum;
}

// row . x over K columns: the whole warp's sum, in every lane. Eight lanes share a block, so a
// warp reads four consecutive blocks (840 bytes) per round; each lane issues the loads of
// INFLIGHT blocks before it uses any.
template <int K, int INFLIGHT, typename T>
__device__ __forceinline__ float gmlx_q6k_dot(const uint8_t* row, const T* x) {
  constexpr int NB = K / 256;
  const int lane = threadIdx.x & 31;
  const int l0 = 4 * (lane & 7);
  const bool aligned = (reinterpret_cast<size_t>(x) & (4 * sizeof(T) - 1)) == 0;
  float acc = 0.0f;
  for (int b0 = lane >> 3; b0 < NB; b0 += 4 * INFLIGHT) {
    GmlxQ6kPart parts[INFLIGHT];
#pragma unroll
    for (int u = 0; u < INFLIGHT; ++u) {
      const int b = b0 + 4 * u;
      if (b < NB) {
        parts[u] = gmlx_q6k_load(row + static_cast<size_t>(b) * GMLX_Q6K_BYTES, l0);
      }
    }
#pragma unroll
    for (int u = 0; u < INFLIGHT; ++u) {
      const int b = b0 + 4 * u;
      if (b < NB) {
        acc += gmlx_q6k_part_dot(parts[u], x + b * 256, l0, aligned);
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    acc += __shfl_xor_sync(0xffffffffu, acc, o);
  }
  return acc;
}

// The 32 weights of a lane's part as the reference dequantizes them, (d * scale) * (q - 32)
// in float, rounded to T, written to y_block (the block's 256 outputs; 4 * sizeof(T) aligned).
template <typename T>
__device__ __forceinline__ void gmlx_q6k_part_write(const GmlxQ6kPart& p, T* y_block, int l0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t codes = gmlx_q6k_codes(p, h, k);
      const float dl = p.d * static_cast<float>(p.sc[h][k]);
      T out[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[i] = static_cast<T>(dl * gmlx_q6k_value(codes, i));
      }
      T* at = y_block + 128 * h + 32 * k + l0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        at[i] = out[i];
      }
    }
  }
}

__device__ __forceinline__ int gmlx_q6k_warp_index() {
  return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}
