// y = W x for one row x [K] and an MLX affine 4-bit matrix W [N, K] (see qmv4.cuh). MLX
// generates the signature (const uint32_t* w, const S* scales, const S* biases, const T* x,
// T* y) and the constants T (the activation type), K, N and ROWS (rows per warp).
const int row0 = gmlx_warp_index() * ROWS;
if (row0 < N) {
  gmlx_qmv4_rows<K, ROWS>(w, scales, biases, x, y, N, row0);
}
