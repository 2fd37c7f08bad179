// y = silu(G x) * (U x) in one launch (a gated MLP's gate and up projections and its SwiGLU; see
// qmv4.cuh). MLX generates the signature (wg, sg, bg, wu, su, bu, x, y) and the constants T,
// S, K, N, ROWS (rows of each matrix per warp) and B8 (as qmv4.cu).
const int row0 = gmlx_warp_index() * ROWS;
if (row0 < N) {
  gmlx_qmv4_silu_rows<K, ROWS, S, T, B8>(wg, sg, bg, wu, su, bu, x, y, N, row0);
}
