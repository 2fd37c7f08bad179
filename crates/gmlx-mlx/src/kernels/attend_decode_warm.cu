// attend_decode.cu in the launch's first blocks, and in its last WB blocks the next launch's
// matrix (w0 its codes, w1 its scales, w2 its biases: W0B, W1B, W2B bytes, W2B 0 where that
// launch derives the biases) pulled into L2 meanwhile (gmlx_warm_l2): the attention of a short
// context leaves the GPU's memory idle. MLX generates the signature (q, k, v, kc, vc, pos,
// counters, w0, w1, w2, out, part; kc_shape) and the constants of attend_decode.cu with WB,
// W0B, W1B and W2B.
const unsigned int attending = gridDim.x - WB;
if (blockIdx.x >= attending) {
  const int b = blockIdx.x - attending;
  gmlx_warm_l2(w0, W0B, b, WB);
  gmlx_warm_l2(w1, W1B, b, WB);
  gmlx_warm_l2(w2, W2B, b, WB);
  return;
}
gmlx_attend_decode<T, D, G, PER, BLOCK, VE>(
    q, k, v, const_cast<T*>(kc), const_cast<T*>(vc), kc_shape[2], pos[0],
    const_cast<unsigned int*>(counters), out, part,
    __int_as_float(SCALE) * 1.4426950408889634f, attending / HKV, blockIdx.x);
