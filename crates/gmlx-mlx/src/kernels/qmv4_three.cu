// y0, y1, y2 = W0 x, W1 x, W2 x in one launch (a block's query, key and value projections; see
// qmv4.cuh). MLX generates the signature (w0, s0, b0, w1, s1, b1, w2, s2, b2, x, y0, y1, y2)
// and the constants T, K, N0, N1, N2 and ROWS: the first warps take W0's rows, then W1's, then
// W2's.
constexpr int WARPS0 = (N0 + ROWS - 1) / ROWS;
constexpr int WARPS1 = (N1 + ROWS - 1) / ROWS;
constexpr int WARPS2 = (N2 + ROWS - 1) / ROWS;
const int warp = gmlx_warp_index();
if (warp < WARPS0) {
  gmlx_qmv4_rows<K, ROWS>(w0, s0, b0, x, y0, N0, warp * ROWS);
} else if (warp < WARPS0 + WARPS1) {
  gmlx_qmv4_rows<K, ROWS>(w1, s1, b1, x, y1, N1, (warp - WARPS0) * ROWS);
} else if (warp < WARPS0 + WARPS1 + WARPS2) {
  gmlx_qmv4_rows<K, ROWS>(w2, s2, b2, x, y2, N2, (warp - WARPS0 - WARPS1) * ROWS);
}
