// A node's primitive kept to be applied again to new inputs, for gmlx (not part of mlx-c).
//
// MLX makes a custom kernel's node by generating the kernel's whole text at every call (its
// signature, constants and body); gmlx launches the same few kernels with the same settings
// hundreds of times a decode step. A kept primitive makes the node directly: the outputs of
// the kept node's shapes and dtypes, computed by the same (stateless) primitive from the new
// inputs, as `mlx::compile` does when it replays a traced graph.
#include <exception>
#include <iostream>
#include <memory>
#include <vector>

#include "mlx/c/private/array.h"
#include "mlx/c/private/vector.h"
#include "mlx/mlx.h"

namespace {

struct KeptPrimitive {
  std::shared_ptr<mlx::core::Primitive> primitive;
  std::vector<mlx::core::Shape> shapes;
  std::vector<mlx::core::Dtype> dtypes;
};

}  // namespace

extern "C" {

// The primitive of `node` (an array not yet evaluated) with the shapes and dtypes of its
// node's outputs in order; NULL where the array has no primitive.
void* gmlx_kept_primitive_new(const mlx_array node) {
  try {
    const mlx::core::array& a = mlx_array_get_(node);
    if (!a.has_primitive()) {
      return nullptr;
    }
    auto kept = std::make_unique<KeptPrimitive>();
    kept->primitive = a.primitive_ptr();
    for (const auto& out : a.outputs()) {
      kept->shapes.push_back(out.shape());
      kept->dtypes.push_back(out.dtype());
    }
    return kept.release();
  } catch (const std::exception& e) {
    std::cerr << "gmlx_kept_primitive_new: " << e.what() << std::endl;
    return nullptr;
  }
}

// New outputs computed by the kept primitive from `inputs` (as many, of the same dtypes, as the
// kept node's); 0 on success.
int gmlx_kept_primitive_apply(
    mlx_vector_array* res,
    const void* kept,
    const mlx_vector_array inputs) {
  try {
    const auto* k = static_cast<const KeptPrimitive*>(kept);
    auto outputs = mlx::core::array::make_arrays(
        k->shapes, k->dtypes, k->primitive, mlx_vector_array_get_(inputs));
    mlx_vector_array_set_(*res, outputs);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gmlx_kept_primitive_apply: " << e.what() << std::endl;
    return 1;
  }
}

void gmlx_kept_primitive_free(void* kept) {
  delete static_cast<KeptPrimitive*>(kept);
}

}  // extern "C"
