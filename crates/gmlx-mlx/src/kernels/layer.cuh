// A whole decoder block of one decoded token in one launch (gmlx's layer_decode.cu), placed
// after qmv4.cuh and attend.cuh in the header MLX gets. A small model's decode step is bound by
// the host's work per launch (building and submitting each of a few hundred), not by the GPU;
// here a block of a llama-shaped model is one launch instead of five. Its stages depend on
// each other's whole results (the attention reads every query row, the output projection every
// head), so the launch's thread blocks wait for each other between stages (gmlx_grid_sync):
// the grid is no larger than the GPU holds at once, every block resident, and each stage's
// warps and blocks take its rows or heads in turn.
//
// Stages: RMSNorm of x and the query, key and value rows, the queries and keys rotated (q, k,
// v); the attention of the token, its key and value written into the caches (att); h = x +
// Wo att; RMSNorm of h and silu(G hn) * (U hn) (act); y = h + Wd act. Each stage computes what
// gmlx's kernel of its own computes with exact (not 8-bit) activations, with the same device
// functions. Rows written by one stage are read by the next through plain loads or L2 loads
// (`__ldcg`), never the read-only path: after the barrier's fences every block sees them, as
// after a cooperative launch's grid sync.

// Waits until every thread block of the launch has reached the same call (every thread of
// each block must reach it); writes before it are visible to every block after it. `sync`: an
// arrival count that each barrier leaves at zero and, GEN words on (the host's choice: a cache
// line of its own, away from the arrivals' atomics), a generation that each barrier advances,
// shared by every launch on the stream (launches run one after another). A block that waits
// 2^24 turns (seconds; a grid larger than the GPU holds at once would wait forever) stops the
// launch with an error instead.
template <int GEN>
__device__ __forceinline__ void gmlx_grid_sync(unsigned int* sync) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned int* generation = sync + GEN;
    // read before arriving: the last block advances it only after every block arrived
    const unsigned int seen = *generation;
    __threadfence();
    if (atomicAdd(sync, 1u) == gridDim.x - 1) {
      atomicExch(sync, 0u);
      __threadfence();
      atomicAdd(sync + GEN, 1u);
    } else {
      for (unsigned int spins = 0; *generation == seen; ++spins) {
        __nanosleep(64);
        if (spins > (1u << 24)) {
          __trap();
        }
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// The queries', keys' and values' rows (gmlx_qmv4_three, queries and keys rotated by `rope`),
// the launch's warps taking gmlx_qmv4_three_share's warp turns in turn.
template <int K, int N0, int N1, int N2, int ROWS, typename S, typename T, int B8>
__device__ __forceinline__ void gmlx_layer_three(
    const uint32_t* w0, const S* s0, const S* b0,
    const uint32_t* w1, const S* s1, const S* b1,
    const uint32_t* w2, const S* s2, const S* b2,
    const T* xn, T* y0, T* y1, T* y2, GmlxRope rope) {
  constexpr int TASKS = (N0 + ROWS - 1) / ROWS + (N1 + ROWS - 1) / ROWS + (N2 + ROWS - 1) / ROWS;
  const int warps = gridDim.x * (blockDim.x >> 5);
  for (int t = gmlx_warp_index(); t < TASKS; t += warps) {
    gmlx_qmv4_three<K, N0, N1, N2, ROWS, S, T, B8>(
        w0, s0, b0, w1, s1, b1, w2, s2, b2, xn, y0, y1, y2, rope, t);
  }
}

// y = residual + W x, N rows of K columns, ROWS rows a task.
template <int K, int N, int ROWS, typename S, typename T, int B8>
__device__ __forceinline__ void gmlx_layer_add(
    const uint32_t* w, const S* s, const S* b, const T* x, const T* residual, T* y) {
  const int warps = gridDim.x * (blockDim.x >> 5);
  for (int t = gmlx_warp_index(); t < (N + ROWS - 1) / ROWS; t += warps) {
    gmlx_qmv4_rows<K, ROWS, S, T, B8>(w, s, b, x, y, N, t * ROWS, residual);
  }
}

// y = silu(G x) * (U x), N rows of K columns, ROWS rows of each a task.
template <int K, int N, int ROWS, typename S, typename T, int B8>
__device__ __forceinline__ void gmlx_layer_silu(
    const uint32_t* wg, const S* sg, const S* bg,
    const uint32_t* wu, const S* su, const S* bu, const T* x, T* y) {
  const int warps = gridDim.x * (blockDim.x >> 5);
  for (int t = gmlx_warp_index(); t < (N + ROWS - 1) / ROWS; t += warps) {
    gmlx_qmv4_silu_rows<K, ROWS, S, T, B8>(wg, sg, bg, wu, su, bu, x, y, N, t * ROWS);
  }
}

// The attention stage: HKV * splits blocks of attend.cuh's work, taken by the launch's thread
// blocks in turn, as many splits per head as the launch has blocks for (whole passes each).
template <typename T, int D, int G, int HKV, int PER, int BLOCK>
__device__ __forceinline__ void gmlx_layer_attend(
    const T* q, const T* k, const T* v, T* kc, T* vc, int cap, int pos,
    unsigned int* counters, T* out, float* part, float scale_log2) {
  constexpr int CHUNK = BLOCK * 8 / D * PER;
  const int passes = (pos + 1 + CHUNK - 1) / CHUNK;
  const int most = max(static_cast<int>(gridDim.x) / HKV, 1);
  const int per_split = (passes + most - 1) / most;
  const int splits = (passes + per_split - 1) / per_split;
  for (unsigned int b = blockIdx.x; b < HKV * splits; b += gridDim.x) {
    gmlx_attend_decode<T, D, G, PER, BLOCK, 0>(
        q, k, v, kc, vc, cap, pos, counters, out, part, scale_log2, splits, b);
    // the next turn reuses the shared memory that threads may still be reading
    __syncthreads();
  }
}
