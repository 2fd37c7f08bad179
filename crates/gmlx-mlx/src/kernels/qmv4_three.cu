// y0, y1, y2 = W0 x, W1 x, W2 x in one launch (a block's query, key and value projections; see
// qmv4.cuh). MLX generates the signature (w0, s0, b0, w1, s1, b1, w2, s2, b2, x, y0, y1, y2)
// and the constants T, S, K, N0, N1, N2, ROWS and B8 (as qmv4.cu).
gmlx_qmv4_three<K, N0, N1, N2, ROWS, S, T, B8>(w0, s0, b0, w1, s1, b1, w2, s2, b2, x, y0, y1, y2);
