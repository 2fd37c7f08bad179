// y = W x for one row x [K] and an MLX affine 4-bit matrix W [N, K] (see qmv4.cuh). MLX
// generates the signature (const uint32_t* w, const S* scales, const S* biases, const T* x,
// T* y) and the constants T (the activation type), K, N, ROWS (rows per warp) and SPLIT (1: a
// warp per ROWS rows; more: a block of SPLIT warps per ROWS rows, each warp K / SPLIT columns),
// B8 (1: the biases are -8 times the scales, derived rather than read; see qmv4.cuh), Q8 (1:
// the row in 8-bit activations, 16-bit T and SPLIT 1 only; gmlx_q8_row_block) and BLOCK
// (threads per block).
static_assert(!Q8 || (sizeof(T) == 2 && SPLIT == 1), "8-bit activations: a 16-bit row, a warp a row");
if (Q8) {
  gmlx_qmv4_rows_q8<K, ROWS, BLOCK, S, T, B8>(
      w, scales, biases, x, y, N, static_cast<const T*>(nullptr));
} else if (SPLIT > 1) {
  gmlx_qmv4_rows_split<K, ROWS, SPLIT, S, T, B8>(w, scales, biases, x, y, N, static_cast<const T*>(nullptr));
} else {
  const int row0 = gmlx_warp_index() * ROWS;
  if (row0 < N) {
    gmlx_qmv4_rows<K, ROWS, S, T, B8>(w, scales, biases, x, y, N, row0);
  }
}
