// The launch's last WB blocks ask L2 for the next launch's arrays n0 .. n8 (N0B .. N8B bytes,
// 0 for a slot left empty; gmlx_warm_l2 with LAST = WL) and end; the blocks before them run the
// kernel below.
if (blockIdx.x >= gridDim.x - WB) {
  const int b = blockIdx.x - (gridDim.x - WB);
  gmlx_warm_l2<WL>(n0, N0B, b, WB);
  gmlx_warm_l2<WL>(n1, N1B, b, WB);
  gmlx_warm_l2<WL>(n2, N2B, b, WB);
  gmlx_warm_l2<WL>(n3, N3B, b, WB);
  gmlx_warm_l2<WL>(n4, N4B, b, WB);
  gmlx_warm_l2<WL>(n5, N5B, b, WB);
  gmlx_warm_l2<WL>(n6, N6B, b, WB);
  gmlx_warm_l2<WL>(n7, N7B, b, WB);
  gmlx_warm_l2<WL>(n8, N8B, b, WB);
  return;
}
