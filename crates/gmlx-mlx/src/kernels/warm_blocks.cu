// The launch's last WB blocks ask L2 for the next launch's arrays n0 .. n8 (N0B .. N8B bytes,
// 0 for a slot left empty; gmlx_warm_l2) and end; the blocks before them run the kernel below.
if (blockIdx.x >= gridDim.x - WB) {
  const int b = blockIdx.x - (gridDim.x - WB);
  gmlx_warm_l2(n0, N0B, b, WB);
  gmlx_warm_l2(n1, N1B, b, WB);
  gmlx_warm_l2(n2, N2B, b, WB);
  gmlx_warm_l2(n3, N3B, b, WB);
  gmlx_warm_l2(n4, N4B, b, WB);
  gmlx_warm_l2(n5, N5B, b, WB);
  gmlx_warm_l2(n6, N6B, b, WB);
  gmlx_warm_l2(n7, N7B, b, WB);
  gmlx_warm_l2(n8, N8B, b, WB);
  return;
}
