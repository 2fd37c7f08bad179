// y = W x for a row x [K] rounded to 8-bit activations before the launch (xq, q8_round.cu) and
// an MLX affine 4-bit matrix W [N, K]: qmv4.cu's Q8 1 without each block rounding the row.
// MLX generates the signature (w, scales, biases, xq, y) and the constants T (y's type), K, N,
// ROWS, SPLIT and B8 (as qmv4.cu); SPLIT 1: a warp per ROWS rows.
if (SPLIT > 1) {
  gmlx_qmv4_rows_q8_rounded_split<K, ROWS, SPLIT, S, T, B8>(
      w, scales, biases, xq, y, N, static_cast<const T*>(nullptr));
} else {
  gmlx_qmv4_rows_q8_rounded<K, ROWS, S, T, B8>(
      w, scales, biases, xq, y, N, static_cast<const T*>(nullptr));
}
