// Attention of one decoded token (gmlx's attend_decode.cu), passed to MLX's custom-kernel API
// as its header. The query `q [H, D]`, the token's key and value `k`, `v [HKV, D]` and the
// layer's caches `kc`, `vc [HKV, cap, D]` (positions before `pos` filled) are of type T; the G
// query heads g * G .. g * G + G - 1 read key/value head g. Thread block b takes key/value head
// b / splits with all its query heads (each key and value is read once for them) and a
// contiguous range of the pos + 1 keys the token sees: the cache's before `pos` and its own at
// `pos`, which the block whose range holds it writes into both caches (MLX has no output that
// aliases an input: the caches are written in place; nothing in the launch reads that position
// from them).
//
// A key row is read by D / 8 lanes, 8 values each, so a block of BLOCK threads reads ROWS =
// BLOCK * 8 / D rows at once and a pass over CHUNK = PER * ROWS keys issues all of a thread's
// PER loads before using any (a decode step has few blocks: memory latency, not bandwidth,
// bounds one that waits on each load). Softmax runs online over the passes in base 2 (the
// scale carries log2 e). One block per head writes the output; several write their
// unnormalized sums, maximum and total to `part`, and the last block of a key/value head
// (counted in `counters`, which atomicInc leaves at zero) combines them.

// 8 values of type T as loaded: 16 bytes of a 2-byte type, 32 of float.
template <typename T>
struct GmlxRow8 {
  uint4 raw[sizeof(T) / 2];

  __device__ __forceinline__ void load(const T* p) {
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 2); ++i) {
      raw[i] = __ldg(reinterpret_cast<const uint4*>(p) + i);
    }
  }

  // from a row that may sit at any offset (the token's own key and value)
  __device__ __forceinline__ void read(const T* p) {
    T* e = reinterpret_cast<T*>(raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      e[i] = p[i];
    }
  }

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(T) / 2); ++i) {
      raw[i] = make_uint4(0, 0, 0, 0);
    }
  }

  __device__ __forceinline__ float operator[](int i) const {
    return static_cast<float>(reinterpret_cast<const T*>(raw)[i]);
  }
};

// A pass's PER rows of one thread (rows first, first + ROWS, ...) of a cache of rows of D
// values: the token's own row `own` at `pos`, zeros from `end` on.
template <typename T, int D, int PER, int ROWS>
__device__ __forceinline__ void gmlx_attend_rows(
    GmlxRow8<T>* rows,
    const T* cache,
    const T* own,
    int first,
    int end,
    int pos) {
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    const int j = first + r * ROWS;
    if (j >= end) {
      rows[r].zero();
    } else if (j == pos) {
      rows[r].read(own);
    } else {
      rows[r].load(cache + static_cast<size_t>(j) * D);
    }
  }
}

// Block `block` of the HKV * splits the launch has (blockIdx.x in a launch of its own; gmlx's
// decode-layer kernel takes them in turn). VE: a pass's value rows are loaded with its key rows, into registers of their own (one wait
// on memory a pass instead of two, for PER * 16 or 32 bytes more registers a thread); else
// after the pass's softmax, into the key rows' registers.
template <typename T, int D, int G, int PER, int BLOCK, int VE>
__device__ __forceinline__ void gmlx_attend_decode(
    const T* q,
    const T* k,
    const T* v,
    T* kc,
    T* vc,
    int cap,
    int pos,
    unsigned int* counters,
    T* out,
    float* part,
    float scale_log2,
    int splits,
    unsigned int block) {
  constexpr int LPK = D / 8;
  constexpr int ROWS = BLOCK / LPK;
  constexpr int CHUNK = ROWS * PER;
  constexpr int WARPS = BLOCK / 32;
  static_assert(LPK >= 1 && LPK <= 32 && (LPK & (LPK - 1)) == 0, "D / 8 lanes per row");
  const float NEG_INF = -__int_as_float(0x7f800000);
  __shared__ float scores[G][CHUNK];
  __shared__ float sums[ROWS][G * D];
  // per query head: running maximum, running total, the last pass's rescaling
  __shared__ float stats[G][3];
  __shared__ bool last;
  const int g = block / splits;
  const int s = block % splits;
  const int keys_seen = pos + 1;
  const int chunks = (keys_seen + CHUNK - 1) / CHUNK;
  const int per_split = (chunks + splits - 1) / splits;
  const int first = s * per_split * CHUNK;
  const int stop = min(keys_seen, (s + 1) * per_split * CHUNK);
  const int t = threadIdx.x;
  const int lane = t & 31;
  const int warp = t >> 5;
  const int row = t / LPK;
  const int col = (t % LPK) * 8;
  const T* keys = kc + static_cast<size_t>(g) * cap * D + col;
  const T* values = vc + static_cast<size_t>(g) * cap * D + col;
  float qs[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      qs[h][i] = static_cast<float>(q[(g * G + h) * D + col + i]) * scale_log2;
    }
  }
  float acc[G][8];
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      acc[h][i] = 0.0f;
    }
  }
  if (t < G) {
    stats[t][0] = NEG_INF;
    stats[t][1] = 0.0f;
  }
  for (int c0 = first; c0 < stop; c0 += CHUNK) {
    const int end = min(stop, c0 + CHUNK);
    GmlxRow8<T> rows[PER];
    GmlxRow8<T> value_rows[VE ? PER : 1];
    gmlx_attend_rows<T, D, PER, ROWS>(rows, keys, k + g * D + col, c0 + row, end, pos);
    if (VE) {
      gmlx_attend_rows<T, D, PER, ROWS>(value_rows, values, v + g * D + col, c0 + row, end, pos);
    }
    // scores: a row's dot product summed over its LPK lanes (rows never straddle a warp)
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      const int j = c0 + r * ROWS + row;
#pragma unroll
      for (int h = 0; h < G; ++h) {
        float score = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          score = fmaf(qs[h][i], rows[r][i], score);
        }
#pragma unroll
        for (int o = LPK / 2; o > 0; o >>= 1) {
          score += __shfl_xor_sync(0xffffffffu, score, o);
        }
        if (t % LPK == 0) {
          scores[h][r * ROWS + row] = j < end ? score : NEG_INF;
        }
      }
    }
    __syncthreads();
    // each head's softmax weights for the pass, a warp per head
    for (int h = warp; h < G; h += WARPS) {
      float top = NEG_INF;
      for (int i = lane; i < CHUNK; i += 32) {
        top = fmaxf(top, scores[h][i]);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
      }
      const float m = fmaxf(stats[h][0], top);
      float total = 0.0f;
      for (int i = lane; i < CHUNK; i += 32) {
        const float p = exp2f(scores[h][i] - m);
        scores[h][i] = p;
        total += p;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        total += __shfl_xor_sync(0xffffffffu, total, o);
      }
      __syncwarp();
      if (lane == 0) {
        const float rescale = exp2f(stats[h][0] - m);
        stats[h][2] = rescale;
        stats[h][1] = stats[h][1] * rescale + total;
        stats[h][0] = m;
      }
    }
    if (!VE) {
      gmlx_attend_rows<T, D, PER, ROWS>(rows, values, v + g * D + col, c0 + row, end, pos);
    }
    __syncthreads();
    const GmlxRow8<T>* vr = VE ? value_rows : rows;
#pragma unroll
    for (int h = 0; h < G; ++h) {
      const float rescale = stats[h][2];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        acc[h][i] *= rescale;
      }
#pragma unroll
      for (int r = 0; r < PER; ++r) {
        const float p = scores[h][r * ROWS + row];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          acc[h][i] = fmaf(p, vr[r][i], acc[h][i]);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int h = 0; h < G; ++h) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      sums[row][h * D + col + i] = acc[h][i];
    }
  }
  if (pos >= first && pos < stop) {
    const size_t at = (static_cast<size_t>(g) * cap + pos) * D;
    for (int i = t; i < D; i += BLOCK) {
      kc[at + i] = k[g * D + i];
      vc[at + i] = v[g * D + i];
    }
  }
  __syncthreads();
  float* mine = part + static_cast<size_t>(block) * G * (D + 2);
  for (int x = t; x < G * D; x += BLOCK) {
    const int h = x / D;
    const int d = x % D;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      o += sums[r][x];
    }
    if (splits == 1) {
      out[(g * G + h) * D + d] = static_cast<T>(o / stats[h][1]);
    } else {
      mine[h * (D + 2) + d] = o;
    }
  }
  if (splits == 1) {
    return;
  }
  if (t < G) {
    mine[t * (D + 2) + D] = stats[t][0];
    mine[t * (D + 2) + D + 1] = stats[t][1];
  }
  // the threadFenceReduction pattern: every partial visible before the count says so
  __threadfence();
  __syncthreads();
  if (t == 0) {
    last = atomicInc(counters + g, splits - 1) == static_cast<unsigned int>(splits - 1);
  }
  __syncthreads();
  if (!last) {
    return;
  }
  __threadfence();
  const float* group = part + static_cast<size_t>(g) * splits * G * (D + 2);
  for (int x = t; x < G * D; x += BLOCK) {
    const int h = x / D;
    const int d = x % D;
    float top = NEG_INF;
    for (int c = 0; c < splits; ++c) {
      top = fmaxf(top, __ldcg(group + (c * G + h) * (D + 2) + D));
    }
    float total = 0.0f;
    float o = 0.0f;
    for (int c = 0; c < splits; ++c) {
      const float* p = group + (c * G + h) * (D + 2);
      const float w = exp2f(__ldcg(p + D) - top);
      total = fmaf(__ldcg(p + D + 1), w, total);
      o = fmaf(__ldcg(p + d), w, o);
    }
    out[(g * G + h) * D + d] = static_cast<T>(o / total);
  }
}
