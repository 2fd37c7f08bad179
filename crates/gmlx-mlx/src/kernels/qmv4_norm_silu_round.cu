// xq = silu(G n) * (U n) for n = RMSNorm(x) with weight nw, rounded to 8-bit activations for a
// product that reads its row rounded (qmv4_add_rounded.cu): qmv4_norm_silu.cu with Q8 1, then
// q8_round.cu, in one launch. MLX generates the signature (nw, wg, sg, bg, wu, su, bu, x, xq)
// and the constants T (16 bits), S, W, K, N, ROWS, EPS, BLOCK and B8 (as qmv4_norm_silu.cu) and
// NB, the threads that norm the row (qmv4_norm_silu.cu's BLOCK, for its normed row); a block's
// BLOCK / 32 * ROWS rows are whole groups of 32, and no weight loads are issued before the norm
// (with them the kernel would need more registers than a block of 1 024 threads has).
static_assert(sizeof(T) == 2, "8-bit activations are made from a 16-bit row");
static_assert(BLOCK / 32 * ROWS % 32 == 0 && BLOCK / 32 * ROWS / 8 <= BLOCK &&
                  N % (BLOCK / 32 * ROWS) == 0,
              "a block's rows are whole groups of 32, and the blocks all the rows");
gmlx_qmv4_norm_silu_early<K, N, ROWS, BLOCK, S, T, W, B8, 0, 1, 0, 1, NB>(
    nw, __int_as_float(EPS), x, static_cast<T*>(nullptr), wg, sg, bg, wu, su, bu,
    static_cast<T*>(nullptr), xq);
