// y = r + W x for one row x [K], a row r [N] and an MLX affine 4-bit matrix W [N, K] (a
// block's output or down projection and the residual add after it; see qmv4.cuh). MLX
// generates the signature (w, scales, biases, x, r, y) and the constants T, K, N, ROWS,
// SPLIT, B8, Q8 and BLOCK (as qmv4.cu).
static_assert(!Q8 || (sizeof(T) == 2 && SPLIT == 1), "8-bit activations: a 16-bit row, a warp a row");
if (Q8) {
  gmlx_qmv4_rows_q8<K, ROWS, BLOCK, S, T, B8>(w, scales, biases, x, y, N, r);
} else if (SPLIT > 1) {
  gmlx_qmv4_rows_split<K, ROWS, SPLIT, S, T, B8>(w, scales, biases, x, y, N, r);
} else {
  const int row0 = gmlx_warp_index() * ROWS;
  if (row0 < N) {
    gmlx_qmv4_rows<K, ROWS, S, T, B8>(w, scales, biases, x, y, N, row0, r);
  }
}
