// y = W x for one row x [K] and a Q6_K matrix W [N, K] in the file's blocks, a warp per row (see
// q6k.cuh). MLX generates the signature (const uint8_t* w, const T* x, T* y) and the constants
// T, K, N and INFLIGHT (blocks per lane loaded before any is used).
const int row = gmlx_q6k_warp_index();
if (row < N) {
  const float acc =
      gmlx_q6k_dot<K, INFLIGHT>(w + static_cast<size_t>(row) * (K / 256 * GMLX_Q6K_BYTES), x);
  if ((threadIdx.x & 31) == 0) {
    y[row] = static_cast<T>(acc);
  }
}
