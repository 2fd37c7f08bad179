// y0, y1, y2 = W0 n, W1 n, W2 n for n = RMSNorm(x) with weight nw, in one launch (a block's
// attention norm and its query, key and value projections; see qmv4.cuh). MLX generates the
// signature (nw, w0, s0, b0, w1, s1, b1, w2, s2, b2, x, y0, y1, y2) and the constants T, S, W
// (the norm weight's type), K, N0, N1, N2, ROWS, EPS (the norm's epsilon, its float's bits),
// BLOCK (threads per block), EARLY (1: each warp's first weight loads issued before the
// norm), B8 (as qmv4.cu), SWZ (1: the normed row held in shared memory in the swizzled
// layout, gmlx_xn_chunk, and the norm weight read 16 bytes per load) and Q8 (1: the normed row
// in 8-bit activations, 16-bit T only; gmlx_rms_norm_q8_block).
static_assert(!Q8 || sizeof(T) == 2, "8-bit activations are made from a 16-bit row");
__shared__ __align__(16) T xn[Q8 ? 1 : K];
if (EARLY || Q8) {
  gmlx_qmv4_norm_three_early<K, N0, N1, N2, ROWS, BLOCK, S, T, W, B8, SWZ, Q8, EARLY>(
      nw, __int_as_float(EPS), x, xn, w0, s0, b0, w1, s1, b1, w2, s2, b2, y0, y1, y2,
      GmlxRope{nullptr, 0.0f, 0, 0});
} else {
  gmlx_rms_norm_block<K, BLOCK, SWZ>(x, nw, __int_as_float(EPS), xn);
  gmlx_qmv4_three<K, N0, N1, N2, ROWS, S, T, B8, SWZ>(w0, s0, b0, w1, s1, b1, w2, s2, b2, xn, y0, y1, y2);
}
