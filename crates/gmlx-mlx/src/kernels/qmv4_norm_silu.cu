// y = silu(G n) * (U n) for n = RMSNorm(x) with weight nw, in one launch (a block's feed-forward
// norm, gate and up projections and SwiGLU; see qmv4.cuh). MLX generates the signature (nw, wg,
// sg, bg, wu, su, bu, x, y) and the constants T, S, W, K, N, ROWS, EPS, BLOCK, EARLY, B8, SWZ
// (as qmv4_norm_three.cu) and Q8 (1: the normed row in 8-bit activations, 16-bit T only; see
// gmlx_rms_norm_q8_block).
static_assert(!Q8 || sizeof(T) == 2, "8-bit activations are made from a 16-bit row");
__shared__ __align__(16) T xn[Q8 ? 1 : K];
if (EARLY || Q8) {
  gmlx_qmv4_norm_silu_early<K, N, ROWS, BLOCK, S, T, W, B8, SWZ, Q8, EARLY>(
      nw, __int_as_float(EPS), x, xn, wg, sg, bg, wu, su, bu, y);
} else {
  const int row0 = gmlx_warp_index() * ROWS;
  gmlx_rms_norm_block<K, BLOCK, SWZ>(x, nw, __int_as_float(EPS), xn);
  if (row0 < N) {
    gmlx_qmv4_silu_rows<K, ROWS, S, T, B8, SWZ>(wg, sg, bg, wu, su, bu, xn, y, N, row0);
  }
}
