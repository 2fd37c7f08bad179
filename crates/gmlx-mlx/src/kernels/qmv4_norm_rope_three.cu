// y0, y1, y2 = W0 n, W1 n, W2 n for n = RMSNorm(x) with weight nw, y0 and y1 rotated at
// position pos[0] (a block's attention norm, query, key and value projections and the rotation
// of queries and keys, in one launch; see qmv4.cuh). MLX generates the signature (nw, w0, s0,
// b0, w1, s1, b1, w2, s2, b2, x, inv_freq, pos, y0, y1, y2) and the constants T, S, W, K, N0,
// N1, N2, ROWS, EPS, BLOCK, EARLY, B8, SWZ, Q8 (as qmv4_norm_three.cu), D (rows per head), RD
// (rotated rows per head) and PSCALE (the position's scale, its float's bits).
static_assert(!Q8 || sizeof(T) == 2, "8-bit activations are made from a 16-bit row");
__shared__ __align__(16) T xn[Q8 ? 1 : K];
// the position is read before the norm, its load's wait under the norm's
const GmlxRope rope{inv_freq, static_cast<float>(pos[0]) * __int_as_float(PSCALE), D, RD};
if (EARLY || Q8) {
  gmlx_qmv4_norm_three_early<K, N0, N1, N2, ROWS, BLOCK, S, T, W, B8, SWZ, Q8, EARLY>(
      nw, __int_as_float(EPS), x, xn, w0, s0, b0, w1, s1, b1, w2, s2, b2, y0, y1, y2, rope);
} else {
  gmlx_rms_norm_block<K, BLOCK, SWZ>(x, nw, __int_as_float(EPS), xn);
  gmlx_qmv4_three<K, N0, N1, N2, ROWS, S, T, B8, SWZ>(w0, s0, b0, w1, s1, b1, w2, s2, b2, xn, y0, y1, y2, rope);
}
