// y = silu(G n) * (U n) for n = RMSNorm(x) with weight nw, in one launch (a block's feed-forward
// norm, gate and up projections and SwiGLU; see qmv4.cuh). MLX generates the signature (nw, wg,
// sg, bg, wu, su, bu, x, y) and the constants T, S, W, K, N, ROWS, EPS and BLOCK (as
// qmv4_norm_three.cu).
__shared__ __align__(16) T xn[K];
const int row0 = gmlx_warp_index() * ROWS;
if (PREFETCH && row0 < N) {
  gmlx_qmv4_prefetch<K, ROWS>(wg, sg, bg, N, row0);
  gmlx_qmv4_prefetch<K, ROWS>(wu, su, bu, N, row0);
}
gmlx_rms_norm_block<K, BLOCK>(x, nw, __int_as_float(EPS), xn);
if (row0 < N) {
  gmlx_qmv4_silu_rows<K, ROWS>(wg, sg, bg, wu, su, bu, xn, y, N, row0);
}
