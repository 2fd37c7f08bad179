// Shared by gmlx's 4-bit matrix-vector kernels (qmv4*.cu), passed to MLX's custom-kernel API as
// their header. The matrices are MLX affine 4-bit in groups of
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
// is 2^23 + nn. `x` may be a view at any offset, or the block's shared copy of a normed row, so
// its alignment decides between 16-byte and element loads (plain loads: `__ldg` cannot read
// shared memory); a row of codes is K / 2 bytes, a multiple of 16.

__device__ __forceinline__ int gmlx_warp_index() {
  return blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
}

// Where chunk c (16 bytes) of group g (32 values) of a block's normed row is held in shared
// memory in the swizzled layout (SWZ 1): chunk c ^ key(g) of its group, key(g) = (g CH / 8) mod
// CH for CH chunks a group. Lane l of a warp reads group l (plus a multiple of 32), so the 8
// lanes of a quarter-warp read chunk c of 8 consecutive groups: in order they would share 2
// (16-bit T) or 1 (float) of the 8 16-byte bank slots (Nsight Compute: 14.5-way conflicts on
// an H100); swizzled they take all 8.
template <typename T>
__device__ __forceinline__ int gmlx_xn_chunk(int g, int c) {
  constexpr int CH = 32 * sizeof(T) / 16;
  return g * CH + (c ^ ((g * CH / 8) % CH));
}

// Groups per row and lane whose loads gmlx_qmv4_dot issues before it uses any.
enum { GMLX_QMV4_INFLIGHT = 4 };

// Which of three matrices warp `warp` (the launch's, unless a caller hands warps their turns)
// takes and its first row there: the first warps take W0's rows, then W1's, then W2's (ROWS
// each); `matrix` 3 for a warp past them all.
struct GmlxShare {
  int matrix;
  int row0;
};

template <int N0, int N1, int N2, int ROWS>
__device__ __forceinline__ GmlxShare gmlx_qmv4_three_share(int warp = gmlx_warp_index()) {
  constexpr int WARPS0 = (N0 + ROWS - 1) / ROWS;
  constexpr int WARPS1 = (N1 + ROWS - 1) / ROWS;
  constexpr int WARPS2 = (N2 + ROWS - 1) / ROWS;
  if (warp < WARPS0) {
    return GmlxShare{0, warp * ROWS};
  }
  if (warp < WARPS0 + WARPS1) {
    return GmlxShare{1, (warp - WARPS0) * ROWS};
  }
  if (warp < WARPS0 + WARPS1 + WARPS2) {
    return GmlxShare{2, (warp - WARPS0 - WARPS1) * ROWS};
  }
  return GmlxShare{3, 0};
}

// The codes, scales and biases of groups g0, g0 + 32, ... (GMLX_QMV4_INFLIGHT of them, those
// below K / 32) of R rows, loaded before any is used. B8: the biases are -8 times the scales
// (Q4_0's d * (q - 8)), derived instead of read (a tenth of a 4-bit matrix's bytes).
template <int K, int R, typename S, int B8 = 0>
struct GmlxQmv4Loads {
  uint4 codes[GMLX_QMV4_INFLIGHT][R];
  float scale[GMLX_QMV4_INFLIGHT][R];
  float bias[GMLX_QMV4_INFLIGHT][R];

  __device__ __forceinline__ void load(
      const uint32_t* const* w,
      const S* const* s,
      const S* const* b,
      int g0) {
#pragma unroll
    for (int u = 0; u < GMLX_QMV4_INFLIGHT; ++u) {
      const int g = g0 + 32 * u;
      if (g < K / 32) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          codes[u][r] = __ldg(reinterpret_cast<const uint4*>(w[r]) + g);
          scale[u][r] = static_cast<float>(s[r][g]);
          bias[u][r] = B8 ? -8.0f * scale[u][r] : static_cast<float>(b[r][g]);
        }
      }
    }
  }
};

// Fills l with the loads of a warp's round of groups from g0: the caller's `first` (issued
// before it computed its row) for the first round where given, else loaded now.
template <int K, int R, typename S, int B8>
__device__ __forceinline__ void gmlx_qmv4_round(
    GmlxQmv4Loads<K, R, S, B8>& l,
    const uint32_t* const* w,
    const S* const* s,
    const S* const* b,
    int g0,
    int lane,
    const GmlxQmv4Loads<K, R, S, B8>* first) {
  if (first != nullptr && g0 == lane) {
    l = *first;
  } else {
    l.load(w, s, b, g0);
  }
}

// acc[r] summed over the warp's lanes, the sum in every lane.
template <int R>
__device__ __forceinline__ void gmlx_warp_sums(float* acc) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    }
  }
}

// acc[r] = row r . x for the R rows whose codes, scales and biases start at w[r], s[r], b[r]:
// the whole warp's sum, in every lane. `first`, where given, holds the lane's first loads
// (GmlxQmv4Loads::load at group `lane`), issued by the caller before it computed x. SWZ 1: x
// is a block's normed row in the swizzled layout (gmlx_xn_chunk).
template <int K, int R, typename S, typename T, int B8 = 0, int SWZ = 0>
__device__ __forceinline__ void gmlx_qmv4_dot(
    const uint32_t* const* w,
    const S* const* s,
    const S* const* b,
    const T* x,
    float* acc,
    const GmlxQmv4Loads<K, R, S, B8>* first = nullptr) {
  constexpr int GROUPS = K / 32;
  constexpr int INFLIGHT = GMLX_QMV4_INFLIGHT;
  const int lane = threadIdx.x & 31;
  const bool x_aligned = (reinterpret_cast<size_t>(x) & 15) == 0;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.0f;
  }
  for (int g0 = lane; g0 < GROUPS; g0 += 32 * INFLIGHT) {
    GmlxQmv4Loads<K, R, S, B8> l;
    gmlx_qmv4_round(l, w, s, b, g0, lane, first);
#pragma unroll
    for (int u = 0; u < INFLIGHT; ++u) {
      const int g = g0 + 32 * u;
      if (g >= GROUPS) {
        break;
      }
      float xv[32];
      const T* xg = x + g * 32;
      if (SWZ || x_aligned) {
        constexpr int PER = 16 / sizeof(T);
#pragma unroll
        for (int c = 0; c < 32 / PER; ++c) {
          uint4 raw = SWZ ? reinterpret_cast<const uint4*>(x)[gmlx_xn_chunk<T>(g, c)]
                          : reinterpret_cast<const uint4*>(xg)[c];
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
        const uint4 code = l.codes[u][r];
        const uint32_t words[4] = {code.x, code.y, code.z, code.w};
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
        acc[r] = fmaf(l.scale[u][r], d, fmaf(l.bias[u][r], xs, acc[r]));
      }
    }
  }
  gmlx_warp_sums<R>(acc);
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

// gmlx_qmv4_point for a warp that takes columns [part * PART, (part + 1) * PART) of the rows.
template <int K, int ROWS, int PART, typename S>
__device__ __forceinline__ void gmlx_qmv4_point_part(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    int n,
    int row0,
    int part,
    const uint32_t** wr,
    const S** sr,
    const S** br) {
  gmlx_qmv4_point<K, ROWS, S>(w, scales, biases, n, row0, 0, wr, sr, br);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    wr[r] += part * (PART / 8);
    sr[r] += part * (PART / 32);
    br[r] += part * (PART / 32);
  }
}

// The rotation of a block's queries or keys at one position, taken by a product's rows before
// they are written: MLX's `traditional` rotation of a head's rows 2i and 2i + 1 by angle
// t * inv_freq[i], over the first rd of each head's d rows. A warp's ROWS rows (even) start at
// an even row, so each warp holds whole pairs.
struct GmlxRope {
  const float* inv_freq;
  float t;
  int d;
  int rd;
};

// Writes a warp's ROWS products `acc` (lane 0's) to y[row0 .. row0 + ROWS), those below n:
// plus the same rows of `residual` where it is given, added as MLX adds two arrays of T (the
// product rounded to T first); or rotated by `rope` where its inv_freq is given (the product
// rounded to T, rotated in float, as MLX's rope reads and writes T).
template <int ROWS, typename T>
__device__ __forceinline__ void gmlx_qmv4_store(
    float* acc,
    T* y,
    int n,
    int row0,
    const T* residual,
    GmlxRope rope) {
  if ((threadIdx.x & 31) != 0) {
    return;
  }
  if (rope.inv_freq != nullptr) {
#pragma unroll
    for (int r = 0; r + 1 < ROWS; r += 2) {
      const int i = (row0 + r) % rope.d;
      if (i < rope.rd) {
        const float a = static_cast<float>(static_cast<T>(acc[r]));
        const float b = static_cast<float>(static_cast<T>(acc[r + 1]));
        float sin_t;
        float cos_t;
        sincosf(rope.t * rope.inv_freq[i / 2], &sin_t, &cos_t);
        acc[r] = a * cos_t - b * sin_t;
        acc[r + 1] = a * sin_t + b * cos_t;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (row0 + r < n) {
      const T product = static_cast<T>(acc[r]);
      y[row0 + r] = residual == nullptr
          ? product
          : static_cast<T>(static_cast<float>(residual[row0 + r]) + static_cast<float>(product));
    }
  }
}

// y[row0 .. row0 + ROWS) = rows of W x, those below n, with `residual` or `rope` as
// gmlx_qmv4_store takes them (SWZ as gmlx_qmv4_dot).
template <int K, int ROWS, typename S, typename T, int B8 = 0, int SWZ = 0>
__device__ __forceinline__ void gmlx_qmv4_rows(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    const T* x,
    T* y,
    int n,
    int row0,
    const T* residual = nullptr,
    GmlxRope rope = GmlxRope{nullptr, 0.0f, 0, 0}) {
  const uint32_t* wr[ROWS];
  const S* sr[ROWS];
  const S* br[ROWS];
  gmlx_qmv4_point<K, ROWS, S>(w, scales, biases, n, row0, 0, wr, sr, br);
  float acc[ROWS];
  gmlx_qmv4_dot<K, ROWS, S, T, B8, SWZ>(wr, sr, br, x, acc);
  gmlx_qmv4_store<ROWS, T>(acc, y, n, row0, residual, rope);
}

// The block's SPLIT warps' sums of their parts of ROWS rows (acc, in every lane of warp
// `part`), added in warp order into warp 0's acc through `partial`: true in warp 0, which
// then holds the rows' products. Every thread of the block calls it (a barrier inside).
template <int ROWS, int SPLIT>
__device__ __forceinline__ bool gmlx_split_sum(float (*partial)[ROWS], int part, float* acc) {
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      partial[part][r] = acc[r];
    }
  }
  __syncthreads();
  if (part != 0) {
    return false;
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float sum = partial[0][r];
#pragma unroll
    for (int p = 1; p < SPLIT; ++p) {
      sum += partial[p][r];
    }
    acc[r] = sum;
  }
  return true;
}

// y[row0 .. row0 + ROWS) for row0 = blockIdx.x * ROWS, with `residual` as gmlx_qmv4_store
// takes it, by a block of SPLIT warps that each take K / SPLIT columns of the rows (one warp
// would wait on K / (32 * 32 * GMLX_QMV4_INFLIGHT) rounds of loads in turn), their sums added
// in shared memory in warp order. K is a multiple of 32 * SPLIT.
template <int K, int ROWS, int SPLIT, typename S, typename T, int B8 = 0>
__device__ __forceinline__ void gmlx_qmv4_rows_split(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    const T* x,
    T* y,
    int n,
    const T* residual) {
  constexpr int PART = K / SPLIT;
  __shared__ float partial[SPLIT][ROWS];
  const int row0 = blockIdx.x * ROWS;
  const int part = threadIdx.x >> 5;
  const uint32_t* wr[ROWS];
  const S* sr[ROWS];
  const S* br[ROWS];
  gmlx_qmv4_point_part<K, ROWS, PART, S>(w, scales, biases, n, row0, part, wr, sr, br);
  float acc[ROWS];
  gmlx_qmv4_dot<PART, ROWS, S, T, B8>(wr, sr, br, x + part * PART, acc);
  if (gmlx_split_sum<ROWS, SPLIT>(partial, part, acc)) {
    gmlx_qmv4_store<ROWS, T>(acc, y, n, row0, residual, GmlxRope{nullptr, 0.0f, 0, 0});
  }
}

// silu(gate) * up rounded to T: the product leaves in float before rounding.
template <typename T>
__device__ __forceinline__ T gmlx_silu_glu(float gate, float up) {
  return static_cast<T>(gate / (1.0f + expf(-gate)) * up);
}

// Writes silu(gate) * up of a warp's products `acc` (lane 0's: ROWS gate rows, then ROWS up
// rows) to y[row0 .. row0 + ROWS), those below n (gmlx_silu_glu).
template <int ROWS, typename T>
__device__ __forceinline__ void gmlx_qmv4_silu_store(const float* acc, T* y, int n, int row0) {
  if ((threadIdx.x & 31) != 0) {
    return;
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (row0 + r < n) {
      y[row0 + r] = gmlx_silu_glu<T>(acc[r], acc[ROWS + r]);
    }
  }
}

// y[row0 .. row0 + ROWS) = silu(G x) * (U x) for those rows below n: the gate's and the up
// matrix's rows share the warp's activations (SWZ as gmlx_qmv4_dot).
template <int K, int ROWS, typename S, typename T, int B8 = 0, int SWZ = 0>
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
  gmlx_qmv4_dot<K, 2 * ROWS, S, T, B8, SWZ>(wr, sr, br, x, acc);
  gmlx_qmv4_silu_store<ROWS, T>(acc, y, n, row0);
}

// The three matrices' rows of warp `warp` (gmlx_qmv4_three_share); W0's and W1's rows rotated
// by `rope` where its inv_freq is given (queries and keys); SWZ as gmlx_qmv4_dot.
template <int K, int N0, int N1, int N2, int ROWS, typename S, typename T, int B8 = 0, int SWZ = 0>
__device__ __forceinline__ void gmlx_qmv4_three(
    const uint32_t* w0, const S* s0, const S* b0,
    const uint32_t* w1, const S* s1, const S* b1,
    const uint32_t* w2, const S* s2, const S* b2,
    const T* x, T* y0, T* y1, T* y2,
    GmlxRope rope = GmlxRope{nullptr, 0.0f, 0, 0},
    int warp = gmlx_warp_index()) {
  const GmlxShare share = gmlx_qmv4_three_share<N0, N1, N2, ROWS>(warp);
  const T* no_residual = nullptr;
  if (share.matrix == 0) {
    gmlx_qmv4_rows<K, ROWS, S, T, B8, SWZ>(w0, s0, b0, x, y0, N0, share.row0, no_residual, rope);
  } else if (share.matrix == 1) {
    gmlx_qmv4_rows<K, ROWS, S, T, B8, SWZ>(w1, s1, b1, x, y1, N1, share.row0, no_residual, rope);
  } else if (share.matrix == 2) {
    gmlx_qmv4_rows<K, ROWS, S, T, B8, SWZ>(w2, s2, b2, x, y2, N2, share.row0);
  }
}

// The row's values for gmlx_rms_norm_block: thread t loads chunks t, t + BLOCK, ... (PER values
// of 16 bytes each) into v, and the block's 1 / sqrt(mean(x^2) + eps) is returned (every thread
// of the block must reach it). NC 0: the row's aligned loads go to L2 (`__ldcg`), not through the
// read-only path, for a row other blocks wrote in the same launch (layer.cuh). The row is read
// once, 16 bytes per load where it is aligned, all of a thread's loads issued before any is
// used. WIDE 1: the block has more threads than BLOCK, and only its first BLOCK take part, so
// that the sum is added in the order a block of BLOCK threads adds it.
template <int K, int BLOCK, int PER, int MINE, typename T, int NC = 1, int WIDE = 0>
__device__ __forceinline__ float gmlx_rms_inv_block(const T* x, float eps, float (&v)[MINE][PER]) {
  constexpr int CHUNKS = K / PER;
  __shared__ float partial[BLOCK / 32];
  const bool aligned = (reinterpret_cast<size_t>(x) & 15) == 0;
#pragma unroll
  for (int m = 0; m < MINE; ++m) {
    const int c = threadIdx.x + m * BLOCK;
    if (c < CHUNKS && (!WIDE || threadIdx.x < BLOCK)) {
      if (aligned) {
        const uint4* p = reinterpret_cast<const uint4*>(x) + c;
        uint4 raw = NC ? __ldg(p) : __ldcg(p);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          v[m][i] = static_cast<float>(e[i]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          v[m][i] = static_cast<float>(x[c * PER + i]);
        }
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int m = 0; m < MINE; ++m) {
    if (threadIdx.x + m * BLOCK < CHUNKS && (!WIDE || threadIdx.x < BLOCK)) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        ss = fmaf(v[m][i], v[m][i], ss);
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
  }
  if ((threadIdx.x & 31) == 0 && (!WIDE || threadIdx.x < BLOCK)) {
    partial[threadIdx.x >> 5] = ss;
  }
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < BLOCK / 32; ++i) {
    total += partial[i];
  }
  return rsqrtf(total / K + eps);
}

// Chunk c's normed values out[i] = T(nw * T(v[i] * inv)), as MLX's `rms_norm` rounds them. SWZ
// 1: the norm weight is read 16 bytes per load where it is aligned (else by value, 2-byte loads
// that waste half of each sector fetched).
template <int PER, int SWZ, typename T, typename W>
__device__ __forceinline__ void gmlx_rms_normed_chunk(
    const float (&v)[PER], float inv, const W* nw, int c, T (&out)[PER]) {
  // a chunk's norm weights as 16-byte loads: PER of them are WQ such loads (none where they
  // are not a whole number of them)
  constexpr int WQ = (PER * sizeof(W)) % 16 == 0 ? PER * sizeof(W) / 16 : 0;
  const bool nw_vector = SWZ && WQ > 0 && (reinterpret_cast<size_t>(nw) & 15) == 0;
  uint4 weights[WQ > 0 ? WQ : 1];
  if (nw_vector) {
#pragma unroll
    for (int q = 0; q < WQ; ++q) {
      weights[q] = __ldg(reinterpret_cast<const uint4*>(nw + c * PER) + q);
    }
  }
  const W* wv = reinterpret_cast<const W*>(weights);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const T scaled = static_cast<T>(v[i] * inv);
    const W weight = nw_vector ? wv[i] : nw[c * PER + i];
    out[i] = static_cast<T>(static_cast<float>(weight) * static_cast<float>(scaled));
  }
}

// xn = RMSNorm(x) with weight nw, computed by the whole thread block of BLOCK threads (every
// thread must reach it), as MLX's `rms_norm` rounds: T(nw * T(x * rsqrt(mean(x^2) + eps))). Each
// block norms the row for itself (a decode step's row is a few kilobytes, read from the L2
// cache, where a separate norm would be one more operation for the host to build and submit),
// so the row is read once and kept in registers between the sum and the scaling
// (gmlx_rms_inv_block). SWZ 1: xn is written in the swizzled layout (gmlx_xn_chunk) and the
// norm weight read 16 bytes per load (gmlx_rms_normed_chunk). NC as gmlx_rms_inv_block.
template <int K, int BLOCK, int SWZ = 0, typename T, typename W, int NC = 1>
__device__ __forceinline__ void gmlx_rms_norm_block(const T* x, const W* nw, float eps, T* xn) {
  constexpr int PER = 16 / sizeof(T);
  constexpr int CHUNKS = K / PER;
  constexpr int MINE = (CHUNKS + BLOCK - 1) / BLOCK;
  float v[MINE][PER];
  const float inv = gmlx_rms_inv_block<K, BLOCK, PER, MINE, T, NC>(x, eps, v);
#pragma unroll
  for (int m = 0; m < MINE; ++m) {
    const int c = threadIdx.x + m * BLOCK;
    if (c < CHUNKS) {
      uint4 packed;
      T(&out)[PER] = *reinterpret_cast<T(*)[PER]>(&packed);
      gmlx_rms_normed_chunk<PER, SWZ>(v[m], inv, nw, c, out);
      constexpr int CH = 32 / PER;
      reinterpret_cast<uint4*>(xn)[SWZ ? gmlx_xn_chunk<T>(c / CH, c % CH) : c] = packed;
    }
  }
  __syncthreads();
}

// 8-bit activations (GMLX_CUDA_QMV_Q8): a block's normed 16-bit row quantized per group of 32
// values as llama.cpp's q8_1 rounds them (d = max|x| / 127, q = round(x * (1 / d)) half away
// from zero, as its CPU code writes it; its CUDA code divides by d and keeps d in half precision
// and the sum of x for the biases, where here d stays float32 and the biases take d * sum(q),
// the rounded row's sum), so that each
// product of 4 weights and 4 values is one __dp4a instead of 12 instructions. A group's codes are
// 4 chunks of 8 values, each held as (E, O): the values at even and at odd positions, 4 signed
// bytes each, matching a 4-bit word's low and high nibbles (gmlx_qmv4_dot); chunks 0-1 and 2-3
// are the group's two 16-byte halves, swapped in every other run of 4 groups so that a
// quarter-warp's lanes (groups g .. g + 7) read 8 distinct bank slots.
struct GmlxQ8Row {
  const int4* codes;
  const float* d;
  const float* dsum;
};

// The 16-byte half h of group g in GmlxQ8Row::codes.
__device__ __forceinline__ int gmlx_q8_half(int g, int h) {
  return 2 * g + (h ^ ((g >> 2) & 1));
}

// Rounds chunk c of a 16-bit row (its 8 values f, `valid` false past the row's end) into the
// block's GmlxQ8Row arrays. Every lane of the warp calls it: a group's 4 chunks are 4
// consecutive threads (chunk c = thread + m * BLOCK, BLOCK a multiple of 32, K of 32).
__device__ __forceinline__ void gmlx_q8_chunk(
    const float (&f)[8], bool valid, int c, int2* codes, float* d, float* dsum) {
  float amax = 0.0f;
  if (valid) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      amax = fmaxf(amax, fabsf(f[i]));
    }
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float dg = amax / 127.0f;
  // llama.cpp's q = round(x * (1 / d)); a group whose d is not a normal float (1 / d might not
  // be finite) rounds to zeros
  const float id = dg >= 1.17549435e-38f ? 1.0f / dg : 0.0f;
  int sum = 0;
  uint32_t even = 0;
  uint32_t odd = 0;
  if (valid) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q = static_cast<int>(roundf(f[i] * id));
      sum += q;
      const uint32_t byte = static_cast<uint32_t>(q) & 0xFFu;
      if (i % 2 == 0) {
        even |= byte << (8 * (i / 2));
      } else {
        odd |= byte << (8 * (i / 2));
      }
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (valid) {
    const int g = c / 4;
    const int j = c % 4;
    codes[2 * gmlx_q8_half(g, j / 2) + j % 2] =
        make_int2(static_cast<int>(even), static_cast<int>(odd));
    if (j == 0) {
      d[g] = dg;
      dsum[g] = dg * static_cast<float>(sum);
    }
  }
}

// RMSNorm(x) with weight nw as gmlx_rms_norm_block rounds it (every thread of the block must
// reach it), rounded into the block's GmlxQ8Row. T is 16 bits (8 values a chunk). WIDE 1: as
// gmlx_rms_inv_block, the block's first BLOCK threads norm the row (the same values as a block
// of BLOCK threads).
template <int K, int BLOCK, typename T, typename W, int WIDE = 0>
__device__ __forceinline__ GmlxQ8Row gmlx_rms_norm_q8_block(const T* x, const W* nw, float eps) {
  constexpr int PER = 8;
  constexpr int CHUNKS = K / PER;
  constexpr int MINE = (CHUNKS + BLOCK - 1) / BLOCK;
  __shared__ __align__(16) int2 codes[K / 8];
  __shared__ float d[K / 32];
  __shared__ float dsum[K / 32];
  float v[MINE][PER];
  const float inv = gmlx_rms_inv_block<K, BLOCK, PER, MINE, T, 1, WIDE>(x, eps, v);
#pragma unroll
  for (int m = 0; m < MINE; ++m) {
    const int c = threadIdx.x + m * BLOCK;
    const bool valid = c < CHUNKS && (!WIDE || threadIdx.x < BLOCK);
    float f[PER];
    if (valid) {
      T out[PER];
      gmlx_rms_normed_chunk<PER, 1>(v[m], inv, nw, c, out);
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        f[i] = static_cast<float>(out[i]);
      }
    }
    gmlx_q8_chunk(f, valid, c, codes, d, dsum);
  }
  __syncthreads();
  return GmlxQ8Row{reinterpret_cast<const int4*>(codes), d, dsum};
}

// Chunk c (8 values) of a 16-bit row x as floats: one 16-byte load where x is `aligned`.
template <typename T>
__device__ __forceinline__ void gmlx_row_chunk8(const T* x, int c, bool aligned, float (&f)[8]) {
  if (aligned) {
    uint4 raw = __ldg(reinterpret_cast<const uint4*>(x) + c);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      f[i] = static_cast<float>(e[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      f[i] = static_cast<float>(x[c * 8 + i]);
    }
  }
}

// The row x (16-bit T, at any offset: 16-byte loads where it is aligned) rounded into the
// block's GmlxQ8Row by the whole block of BLOCK threads (every thread must reach it).
template <int K, int BLOCK, typename T>
__device__ __forceinline__ GmlxQ8Row gmlx_q8_row_block(const T* x) {
  constexpr int CHUNKS = K / 8;
  constexpr int MINE = (CHUNKS + BLOCK - 1) / BLOCK;
  __shared__ __align__(16) int2 codes[K / 8];
  __shared__ float d[K / 32];
  __shared__ float dsum[K / 32];
  const bool aligned = (reinterpret_cast<size_t>(x) & 15) == 0;
#pragma unroll 4
  for (int m = 0; m < MINE; ++m) {
    const int c = threadIdx.x + m * BLOCK;
    float f[8];
    if (c < CHUNKS) {
      gmlx_row_chunk8(x, c, aligned, f);
    }
    gmlx_q8_chunk(f, c < CHUNKS, c, codes, d, dsum);
  }
  __syncthreads();
  return GmlxQ8Row{reinterpret_cast<const int4*>(codes), d, dsum};
}

// A row of K values rounded once for every block that multiplies it (GMLX_CUDA_QMV_Q8_APART):
// K / 4 words of codes in GmlxQ8Row's order, then d and d * sum(q) per group, K / 32 floats
// each. gmlx_q8_round_row writes it, a thread per chunk of 8 values (every lane of a warp must
// reach it); gmlx_q8_rounded_row reads it where it lies, in global memory.
template <int K, typename T>
__device__ __forceinline__ void gmlx_q8_round_row(const T* x, uint32_t* xq) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const bool valid = c < K / 8;
  float f[8];
  if (valid) {
    gmlx_row_chunk8(x, c, (reinterpret_cast<size_t>(x) & 15) == 0, f);
  }
  float* d = reinterpret_cast<float*>(xq + K / 4);
  gmlx_q8_chunk(f, valid, c, reinterpret_cast<int2*>(xq), d, d + K / 32);
}

template <int K>
__device__ __forceinline__ GmlxQ8Row gmlx_q8_rounded_row(const uint32_t* xq) {
  const float* d = reinterpret_cast<const float*>(xq + K / 4);
  return GmlxQ8Row{reinterpret_cast<const int4*>(xq), d, d + K / 32};
}

// gmlx_qmv4_dot against a GmlxQ8Row: per group and row, scale * d * sum(w_q x_q) + bias * d *
// sum(x_q), the integer sum by __dp4a (4-bit codes 0..15 as signed bytes).
template <int K, int R, typename S, int B8 = 0>
__device__ __forceinline__ void gmlx_qmv4_dot_q8(
    const uint32_t* const* w,
    const S* const* s,
    const S* const* b,
    GmlxQ8Row x,
    float* acc,
    const GmlxQmv4Loads<K, R, S, B8>* first) {
  constexpr int GROUPS = K / 32;
  constexpr int INFLIGHT = GMLX_QMV4_INFLIGHT;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    acc[r] = 0.0f;
  }
  for (int g0 = lane; g0 < GROUPS; g0 += 32 * INFLIGHT) {
    GmlxQmv4Loads<K, R, S, B8> l;
    gmlx_qmv4_round(l, w, s, b, g0, lane, first);
#pragma unroll
    for (int u = 0; u < INFLIGHT; ++u) {
      const int g = g0 + 32 * u;
      if (g >= GROUPS) {
        break;
      }
      const int4 first_half = x.codes[gmlx_q8_half(g, 0)];
      const int4 second_half = x.codes[gmlx_q8_half(g, 1)];
      const int even[4] = {first_half.x, first_half.z, second_half.x, second_half.z};
      const int odd[4] = {first_half.y, first_half.w, second_half.y, second_half.w};
      const float d = x.d[g];
      const float dsum = x.dsum[g];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 code = l.codes[u][r];
        const uint32_t words[4] = {code.x, code.y, code.z, code.w};
        int dot = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          dot = __dp4a(static_cast<int>(words[j] & 0x0F0F0F0Fu), even[j], dot);
          dot = __dp4a(static_cast<int>((words[j] >> 4) & 0x0F0F0F0Fu), odd[j], dot);
        }
        acc[r] = fmaf(l.scale[u][r] * d, static_cast<float>(dot), fmaf(l.bias[u][r], dsum, acc[r]));
      }
    }
  }
  gmlx_warp_sums<R>(acc);
}

// Points a warp's row pointers at its rows of the matrix `share` names (gmlx_qmv4_point) and
// gives that matrix's output and rows; W2's for a warp past them all (it computes nothing).
template <int K, int N0, int N1, int N2, int ROWS, typename S, typename T>
__device__ __forceinline__ void gmlx_qmv4_three_point(
    GmlxShare share,
    const uint32_t* w0, const S* s0, const S* b0,
    const uint32_t* w1, const S* s1, const S* b1,
    const uint32_t* w2, const S* s2, const S* b2,
    T* y0, T* y1, T* y2,
    const uint32_t** wr, const S** sr, const S** br,
    T** y, int* n) {
  if (share.matrix == 0) {
    gmlx_qmv4_point<K, ROWS, S>(w0, s0, b0, N0, share.row0, 0, wr, sr, br);
    *y = y0;
    *n = N0;
  } else if (share.matrix == 1) {
    gmlx_qmv4_point<K, ROWS, S>(w1, s1, b1, N1, share.row0, 0, wr, sr, br);
    *y = y1;
    *n = N1;
  } else {
    gmlx_qmv4_point<K, ROWS, S>(w2, s2, b2, N2, share.row0, 0, wr, sr, br);
    *y = y2;
    *n = N2;
  }
}

// gmlx_qmv4_three of xn = RMSNorm(x) (gmlx_rms_norm_block, every thread of the block takes
// part), each warp's first weight loads issued before the norm so that they are in flight
// while it runs (a decode step's blocks otherwise read nothing from DRAM during their norm).
// Q8 1: the normed row in 8-bit activations instead (gmlx_rms_norm_q8_block, 16-bit T).
// EARLY 0: no loads before the norm (fewer registers held through it).
template <
    int K, int N0, int N1, int N2, int ROWS, int BLOCK, typename S, typename T, typename W,
    int B8 = 0, int SWZ = 0, int Q8 = 0, int EARLY = 1>
__device__ __forceinline__ void gmlx_qmv4_norm_three_early(
    const W* nw, float eps, const T* x, T* xn,
    const uint32_t* w0, const S* s0, const S* b0,
    const uint32_t* w1, const S* s1, const S* b1,
    const uint32_t* w2, const S* s2, const S* b2,
    T* y0, T* y1, T* y2,
    GmlxRope rope) {
  const GmlxShare share = gmlx_qmv4_three_share<N0, N1, N2, ROWS>();
  const uint32_t* wr[ROWS];
  const S* sr[ROWS];
  const S* br[ROWS];
  T* y;
  int n;
  gmlx_qmv4_three_point<K, N0, N1, N2, ROWS>(
      share, w0, s0, b0, w1, s1, b1, w2, s2, b2, y0, y1, y2, wr, sr, br, &y, &n);
  const bool mine = share.matrix < 3;
  GmlxQmv4Loads<K, ROWS, S, B8> first;
  if (EARLY && mine) {
    first.load(wr, sr, br, threadIdx.x & 31);
  }
  const GmlxQmv4Loads<K, ROWS, S, B8>* early = EARLY ? &first : nullptr;
  float acc[ROWS];
  if (Q8) {
    const GmlxQ8Row row = gmlx_rms_norm_q8_block<K, BLOCK>(x, nw, eps);
    if (!mine) {
      return;
    }
    gmlx_qmv4_dot_q8<K, ROWS, S, B8>(wr, sr, br, row, acc, early);
  } else {
    gmlx_rms_norm_block<K, BLOCK, SWZ>(x, nw, eps, xn);
    if (!mine) {
      return;
    }
    gmlx_qmv4_dot<K, ROWS, S, T, B8, SWZ>(wr, sr, br, xn, acc, early);
  }
  const T* no_residual = nullptr;
  const GmlxRope rotation = share.matrix < 2 ? rope : GmlxRope{nullptr, 0.0f, 0, 0};
  gmlx_qmv4_store<ROWS, T>(acc, y, n, share.row0, no_residual, rotation);
}

// The SwiGLU of a block's BLOCK / 32 * ROWS rows (each warp's ROWS gate products, then its ROWS
// up products, in lane 0's acc), each rounded to T as gmlx_qmv4_silu_store rounds it (gmlx_silu_glu), then to
// 8-bit activations as gmlx_q8_round_row rounds a row of T (gmlx_q8_chunk): written into xq,
// gmlx_q8_rounded_row's layout of a row of N. The block's rows are whole groups of 32 below N;
// every thread of the block reaches it.
template <int N, int ROWS, int BLOCK, typename T>
__device__ __forceinline__ void gmlx_qmv4_silu_round_store(const float* acc, uint32_t* xq) {
  constexpr int RB = BLOCK / 32 * ROWS;
  constexpr int CHUNKS = RB / 8;
  __shared__ float v[RB];
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      v[(threadIdx.x >> 5) * ROWS + r] = static_cast<float>(gmlx_silu_glu<T>(acc[r], acc[ROWS + r]));
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < (CHUNKS + 31) / 32 * 32) {
    float f[8];
    if (t < CHUNKS) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        f[i] = v[8 * t + i];
      }
    }
    float* d = reinterpret_cast<float*>(xq + N / 4);
    gmlx_q8_chunk(f, t < CHUNKS, blockIdx.x * CHUNKS + t, reinterpret_cast<int2*>(xq), d,
                  d + N / 32);
  }
}

// gmlx_qmv4_silu_rows of xn = RMSNorm(x) for this warp's rows, its first weight loads issued
// before the norm unless EARLY is 0 (as gmlx_qmv4_norm_three_early, Q8 too); with ROUND 1 (Q8
// only) the SwiGLU written to xq rounded to 8-bit activations (gmlx_qmv4_silu_round_store)
// instead of to y, the row normed by the block's first NB threads (NB at most BLOCK: the
// normed row of a block of NB threads, as the kernel without ROUND normed it).
template <
    int K, int N, int ROWS, int BLOCK, typename S, typename T, typename W, int B8 = 0,
    int SWZ = 0, int Q8 = 0, int EARLY = 1, int ROUND = 0, int NB = BLOCK>
__device__ __forceinline__ void gmlx_qmv4_norm_silu_early(
    const W* nw, float eps, const T* x, T* xn,
    const uint32_t* wg, const S* sg, const S* bg,
    const uint32_t* wu, const S* su, const S* bu,
    T* y, uint32_t* xq = nullptr) {
  static_assert(!ROUND || Q8, "the SwiGLU is rounded to 8 bits after an 8-bit product");
  static_assert(NB <= BLOCK && NB % 32 == 0, "the norm's threads are whole warps of the block");
  const int row0 = gmlx_warp_index() * ROWS;
  const uint32_t* wr[2 * ROWS];
  const S* sr[2 * ROWS];
  const S* br[2 * ROWS];
  gmlx_qmv4_point<K, ROWS, S>(wg, sg, bg, N, row0, 0, wr, sr, br);
  gmlx_qmv4_point<K, ROWS, S>(wu, su, bu, N, row0, ROWS, wr, sr, br);
  const bool mine = row0 < N;
  GmlxQmv4Loads<K, 2 * ROWS, S, B8> first;
  if (EARLY && mine) {
    first.load(wr, sr, br, threadIdx.x & 31);
  }
  const GmlxQmv4Loads<K, 2 * ROWS, S, B8>* early = EARLY ? &first : nullptr;
  float acc[2 * ROWS];
  if (Q8) {
    const GmlxQ8Row row = gmlx_rms_norm_q8_block<K, NB, T, W, (NB < BLOCK)>(x, nw, eps);
    // with ROUND every warp's rows are below N (qmv4_norm_silu_round.cu asserts the blocks
    // hold all the rows, and is launched with that many), and each must reach the rounding
    if (!ROUND && !mine) {
      return;
    }
    gmlx_qmv4_dot_q8<K, 2 * ROWS, S, B8>(wr, sr, br, row, acc, early);
  } else {
    gmlx_rms_norm_block<K, BLOCK, SWZ>(x, nw, eps, xn);
    if (!mine) {
      return;
    }
    gmlx_qmv4_dot<K, 2 * ROWS, S, T, B8, SWZ>(wr, sr, br, xn, acc, early);
  }
  if (ROUND) {
    gmlx_qmv4_silu_round_store<N, ROWS, BLOCK, T>(acc, xq);
  } else {
    gmlx_qmv4_silu_store<ROWS, T>(acc, y, N, row0);
  }
}

// gmlx_qmv4_rows (a warp per ROWS rows, with `residual` as gmlx_qmv4_store takes it) against
// the row rounded to 8-bit activations by its block of BLOCK threads (gmlx_q8_row_block; every
// thread must reach it), each warp's first loads issued before.
template <int K, int ROWS, int BLOCK, typename S, typename T, int B8 = 0>
__device__ __forceinline__ void gmlx_qmv4_rows_q8(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    const T* x,
    T* y,
    int n,
    const T* residual) {
  const int row0 = gmlx_warp_index() * ROWS;
  const uint32_t* wr[ROWS];
  const S* sr[ROWS];
  const S* br[ROWS];
  gmlx_qmv4_point<K, ROWS, S>(w, scales, biases, n, row0, 0, wr, sr, br);
  const bool mine = row0 < n;
  GmlxQmv4Loads<K, ROWS, S, B8> first;
  if (mine) {
    first.load(wr, sr, br, threadIdx.x & 31);
  }
  const GmlxQ8Row row = gmlx_q8_row_block<K, BLOCK>(x);
  if (!mine) {
    return;
  }
  float acc[ROWS];
  gmlx_qmv4_dot_q8<K, ROWS, S, B8>(wr, sr, br, row, acc, &first);
  gmlx_qmv4_store<ROWS, T>(acc, y, n, row0, residual, GmlxRope{nullptr, 0.0f, 0, 0});
}

// gmlx_qmv4_rows_q8 against a row rounded before the launch (xq: gmlx_q8_round_row), which the
// warps read where it lies: no block rounds it again.
template <int K, int ROWS, typename S, typename T, int B8 = 0>
__device__ __forceinline__ void gmlx_qmv4_rows_q8_rounded(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    const uint32_t* xq,
    T* y,
    int n,
    const T* residual) {
  const int row0 = gmlx_warp_index() * ROWS;
  if (row0 >= n) {
    return;
  }
  const uint32_t* wr[ROWS];
  const S* sr[ROWS];
  const S* br[ROWS];
  gmlx_qmv4_point<K, ROWS, S>(w, scales, biases, n, row0, 0, wr, sr, br);
  float acc[ROWS];
  gmlx_qmv4_dot_q8<K, ROWS, S, B8>(wr, sr, br, gmlx_q8_rounded_row<K>(xq), acc, nullptr);
  gmlx_qmv4_store<ROWS, T>(acc, y, n, row0, residual, GmlxRope{nullptr, 0.0f, 0, 0});
}

// gmlx_qmv4_rows_q8_rounded by a block of SPLIT warps per ROWS rows (row0 = blockIdx.x * ROWS),
// each taking K / SPLIT columns of the rows and of the rounded row, their sums added in warp
// order (gmlx_split_sum). K / SPLIT is a multiple of 256: a part starts at a group that is a
// multiple of 8, where the codes' order of halves (gmlx_q8_half) repeats.
template <int K, int ROWS, int SPLIT, typename S, typename T, int B8 = 0>
__device__ __forceinline__ void gmlx_qmv4_rows_q8_rounded_split(
    const uint32_t* w,
    const S* scales,
    const S* biases,
    const uint32_t* xq,
    T* y,
    int n,
    const T* residual) {
  constexpr int PART = K / SPLIT;
  static_assert(SPLIT == 1 || PART % 256 == 0, "a part starts at a multiple of 8 groups");
  __shared__ float partial[SPLIT][ROWS];
  const int row0 = blockIdx.x * ROWS;
  const int part = threadIdx.x >> 5;
  const uint32_t* wr[ROWS];
  const S* sr[ROWS];
  const S* br[ROWS];
  gmlx_qmv4_point_part<K, ROWS, PART, S>(w, scales, biases, n, row0, part, wr, sr, br);
  const GmlxQ8Row whole = gmlx_q8_rounded_row<K>(xq);
  const int g0 = part * (PART / 32);
  const GmlxQ8Row mine{whole.codes + 2 * g0, whole.d + g0, whole.dsum + g0};
  float acc[ROWS];
  gmlx_qmv4_dot_q8<PART, ROWS, S, B8>(wr, sr, br, mine, acc, nullptr);
  if (gmlx_split_sum<ROWS, SPLIT>(partial, part, acc)) {
    gmlx_qmv4_store<ROWS, T>(acc, y, n, row0, residual, GmlxRope{nullptr, 0.0f, 0, 0});
  }
}
