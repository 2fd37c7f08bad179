// y = W x for one row x [K] and an MLX affine 4-bit matrix W [N, K] (see qmv4.cuh). MLX
// generates the signature (const uint32_t* w, const S* scales, const S* biases, const T* x,
// T* y) and the constants T (the activation type), K, N, ROWS (rows per warp) and SPLIT (1: a
// warp per ROWS rows; more: a block of SPLIT warps per ROWS rows, each warp K / SPLIT columns)
// and B8 (1: the biases are -8 times the scales, derived rather than read; see qmv4.cuh).
if (SPLIT > 1) {
  gmlx_qmv4_rows_split<K, ROWS, SPLIT, S, T, B8>(w, scales, biases, x, y, N, static_cast<const T*>(nullptr));
} else {
  const int row0 = gmlx_warp_index() * ROWS;
  if (row0 < N) {
    gmlx_qmv4_rows<K, ROWS, S, T, B8>(w, scales, biases, x, y, N, row0);
  }
}
