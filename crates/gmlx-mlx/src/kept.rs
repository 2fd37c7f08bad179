//! A graph node's primitive kept to make new nodes of the same operation from new inputs
//! (`mlx-sys`'s `shim/kept_primitive.cpp`), as MLX's `compile` replays a traced graph: the
//! operation's own work at each call (for a custom kernel, MLX generating the kernel's whole
//! text) is done once. [`crate::cuda_kernel`] keeps its launches' primitives this way.
use mlx_rs::Array;

use crate::closure::VectorCallError;

/// The primitive of one node with its outputs' shapes and dtypes.
pub(crate) struct KeptPrimitive(*mut std::ffi::c_void);

impl KeptPrimitive {
    /// The primitive that computes `node` (not yet evaluated: evaluation drops it); `None` for
    /// an array without one.
    pub(crate) fn of(node: &Array) -> Option<KeptPrimitive> {
        // SAFETY: the handle is live; the shim copies what it keeps.
        let kept = unsafe { mlx_sys::gmlx_kept_primitive_new(node.as_ptr()) };
        (!kept.is_null()).then_some(KeptPrimitive(kept))
    }

    /// New outputs of the kept node's shapes and dtypes, computed from `inputs` (as many as the
    /// kept node had, of the same dtypes: the primitive was made for those); MLX's reason where
    /// it cannot.
    pub(crate) fn apply(&self, inputs: &[Array]) -> Result<Vec<Array>, String> {
        // SAFETY: the kept primitive and the vectors are live for the call.
        crate::closure::call_on_vectors(inputs, |out, inputs| unsafe {
            mlx_sys::gmlx_kept_primitive_apply(out, self.0, inputs)
        })
        .map_err(|e| match e {
            VectorCallError::Code(_) => {
                "MLX could not make the node (its message is on stderr)".to_owned()
            }
            VectorCallError::Unreadable(reason) => reason,
        })
    }
}

impl Drop for KeptPrimitive {
    fn drop(&mut self) {
        // SAFETY: made by gmlx_kept_primitive_new, freed once.
        unsafe { mlx_sys::gmlx_kept_primitive_free(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_rs::ops;

    #[test]
    fn a_kept_primitive_computes_its_operation_on_new_inputs() {
        let (a, b) = (
            Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]),
            Array::from_slice(&[10.0f32, 20.0, 30.0], &[3]),
        );
        let sum = ops::add(&a, &b).expect("add");
        let kept = KeptPrimitive::of(&sum).expect("an add has a primitive");
        let (c, d) = (
            Array::from_slice(&[0.5f32, -1.0, 4.0], &[3]),
            Array::from_slice(&[2.0f32, 2.0, -4.0], &[3]),
        );
        let again = kept.apply(&[c, d]).expect("apply");
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].as_slice::<f32>(), &[2.5f32, 1.0, 0.0]);
        // the first node still computes its own inputs' sum
        assert_eq!(sum.as_slice::<f32>(), &[11.0f32, 22.0, 33.0]);
        // a node of several outputs keeps them all, in order
        let parts =
            ops::split_equal(Array::from_slice(&[1i32, 2, 3, 4], &[4]), 2, 0).expect("split");
        let kept = KeptPrimitive::of(&parts[1]).expect("split has a primitive");
        let again = kept
            .apply(&[Array::from_slice(&[5i32, 6, 7, 8], &[4])])
            .expect("apply");
        let values: Vec<Vec<i32>> = again.iter().map(|a| a.as_slice::<i32>().to_vec()).collect();
        assert_eq!(values, [vec![5, 6], vec![7, 8]]);
        // an evaluated array has no primitive left to keep
        assert!(KeptPrimitive::of(&sum).is_none());
    }
}
