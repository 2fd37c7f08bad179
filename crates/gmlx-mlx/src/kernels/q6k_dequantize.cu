// y = the weights of Q6_K rows w [rows, K / 256 * 210] in T, y [rows, K], as the reference
// dequantizes them (see q6k.cuh), a thread per lane's part of a block. MLX generates the
// signature (const uint8_t* w, T* y, w_shape) and the constants T and K; the rows are w's.
constexpr int NB = K / 256;
const size_t part = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
if (part < static_cast<size_t>(w_shape[0]) * NB * 8) {
  const size_t block = part / 8;
  const int l0 = 4 * static_cast<int>(part % 8);
  gmlx_q6k_part_write(gmlx_q6k_load(w + block * GMLX_Q6K_BYTES, l0), y + block * 256, l0);
}
