// Asks the GPU's L2 cache for `bytes` bytes from p, a 128-byte line per request, the lines
// spread over `blocks` thread blocks (this one `block`), for a later launch of the same stream
// whose loads of them then wait on L2 rather than on memory. Nothing waits for the lines: the
// block goes on (or ends) as soon as it has asked. LAST 1: the lines are the last L2 evicts
// (`evict_last`), else as any other line.
template <int LAST>
__device__ __forceinline__ void gmlx_warm_l2(const void* p, long long bytes, int block, int blocks) {
  const char* base = static_cast<const char*>(p);
  const long long stride = static_cast<long long>(blocks) * blockDim.x * 128;
  for (long long at = (static_cast<long long>(block) * blockDim.x + threadIdx.x) * 128; at < bytes;
       at += stride) {
    if (LAST) {
      asm volatile("prefetch.global.L2::evict_last [%0];" : : "l"(base + at));
    } else {
      asm volatile("prefetch.global.L2 [%0];" : : "l"(base + at));
    }
  }
}
