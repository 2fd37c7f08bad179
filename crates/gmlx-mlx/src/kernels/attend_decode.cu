// Attention of one decoded token over its layer's caches (see attend.cuh). MLX generates the
// signature (q, k, v, kc, vc, pos, counters, out, part; kc_shape) and the constants T, D, G,
// HKV (key/value heads), PER, BLOCK, SCALE (the scale's float bits) and VE (1: a pass's values
// loaded with its keys); the caches and counters come as inputs and are written in place.
gmlx_attend_decode<T, D, G, PER, BLOCK, VE>(
    q, k, v, const_cast<T*>(kc), const_cast<T*>(vc), kc_shape[2], pos[0],
    const_cast<unsigned int*>(counters), out, part,
    __int_as_float(SCALE) * 1.4426950408889634f, gridDim.x / HKV, blockIdx.x);
