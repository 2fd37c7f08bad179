// attend_decode.cu in the blocks before the warming ones (warm_blocks.cu, placed before this):
// the attention of a short context leaves the GPU's memory idle while the next launch's matrix
// comes into L2. MLX generates the signature (q, k, v, kc, vc, pos, counters, n0 .. n8, out,
// part; kc_shape) and the constants of attend_decode.cu with WB and N0B .. N8B.
gmlx_attend_decode<T, D, G, PER, BLOCK, VE>(
    q, k, v, const_cast<T*>(kc), const_cast<T*>(vc), kc_shape[2], pos[0],
    const_cast<unsigned int*>(counters), out, part,
    __int_as_float(SCALE) * 1.4426950408889634f, (gridDim.x - WB) / HKV, blockIdx.x);
