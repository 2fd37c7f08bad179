// One decoder block of one decoded token (see layer.cuh). MLX generates the signature (x, an,
// wq, sq, bq, wk, sk, bk, wv, sv, bv, inv_freq, pos, kc, vc, counters, wo, so, bo, fw, wg, sg,
// bg, wu, su, bu, wd, sd, bd, sync, y, q, k, v, att, h, act, part; kc_shape) and the constants
// T, S, W, K (hidden width), NQ, NKV (query and key/value rows), F (feed-forward rows), D
// (values per head), G (query heads per key/value head), HKV, RD (rotated rows per head),
// ROWS (rows a warp task), BLOCK (threads a block), EPS, FEPS (the two norms' epsilons),
// PSCALE (the position's scale) and SCALE (the attention's, float bits), PER (attend.cuh's rows
// a thread per pass), B8A, B8O, B8U, B8D (the q k v, output, gate-up and down matrices'
// biases derived from their scales), and GEN (where the barrier's generation lies in `sync`,
// gmlx_grid_sync). The caches and the words `counters` and `sync` come as
// inputs and are written in place.
__shared__ __align__(16) T xn[K];
unsigned int* barrier = const_cast<unsigned int*>(sync);
const int at = pos[0];
gmlx_rms_norm_block<K, BLOCK>(x, an, __int_as_float(EPS), xn);
gmlx_layer_three<K, NQ, NKV, NKV, ROWS, S, T, B8A>(
    wq, sq, bq, wk, sk, bk, wv, sv, bv, xn, q, k, v,
    GmlxRope{inv_freq, static_cast<float>(at) * __int_as_float(PSCALE), D, RD});
gmlx_grid_sync<GEN>(barrier);
gmlx_layer_attend<T, D, G, HKV, PER, BLOCK>(
    q, k, v, const_cast<T*>(kc), const_cast<T*>(vc), kc_shape[2], at,
    const_cast<unsigned int*>(counters), att, part,
    __int_as_float(SCALE) * 1.4426950408889634f);
gmlx_grid_sync<GEN>(barrier);
gmlx_layer_add<NQ, K, ROWS, S, T, B8O>(wo, so, bo, att, x, h);
gmlx_grid_sync<GEN>(barrier);
// h was written by other blocks in this launch: read from L2, not the read-only path
gmlx_rms_norm_block<K, BLOCK, 0, T, W, 0>(h, fw, __int_as_float(FEPS), xn);
gmlx_layer_silu<K, F, (ROWS / 2 > 0 ? ROWS / 2 : 1), S, T, B8U>(wg, sg, bg, wu, su, bu, xn, act);
gmlx_grid_sync<GEN>(barrier);
gmlx_layer_add<F, K, ROWS, S, T, B8D>(wd, sd, bd, act, h, y);
