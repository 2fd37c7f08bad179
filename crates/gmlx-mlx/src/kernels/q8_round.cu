// xq = the row x [K] (16-bit T) rounded to 8-bit activations once, for the one-matrix kernels
// that read it rounded (qmv4_rounded.cu, qmv4_add_rounded.cu; see gmlx_q8_round_row). MLX
// generates the signature (const T* x, uint32_t* xq) and the constants T and K; a thread per
// 8 values, whole warps.
static_assert(sizeof(T) == 2 && K % 32 == 0, "8-bit activations: a 16-bit row of whole groups");
gmlx_q8_round_row<K>(x, xq);
