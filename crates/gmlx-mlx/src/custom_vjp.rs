//! Functions with a hand-written backward pass (MLX's `custom_vjp`), and `depends`, which
//! orders work inside one graph. mlx-rs wraps neither.
//!
//! ```
//! use gmlx_mlx::custom_vjp::CustomVjp;
//! use gmlx_mlx::mlx_rs::transforms::grad;
//! use gmlx_mlx::Array;
//!
//! // the forward pass is `sin`, the backward pass claims the derivative is 2
//! let f = CustomVjp::new(
//!     |xs: &[Array]| Ok(vec![xs[0].sin()?]),
//!     |_primals: &[Array], cotangents: &[Array], _outputs: &[Array]| {
//!         Ok(vec![cotangents[0].multiply(Array::from_f32(2.0))?])
//!     },
//! )?;
//! let mut g = grad(|xs: &[Array]| f.apply(xs).map_err(|e| e.into_exception())?[0].sum(None));
//! let dx = g(&[Array::from_slice(&[0.1f32, 0.7], &[2])])?;
//! let dx = dx.contiguous()?; // the cotangent of a sum is a broadcast one
//! assert_eq!(dx.as_slice::<f32>(), &[2.0, 2.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use std::ffi::c_void;
use std::os::raw::c_int;

use mlx_rs::error::Exception;
use mlx_rs::Array;

use crate::closure::{self, VectorCallError};
use crate::error::{Error, Result};

type Backward =
    Box<dyn FnMut(&[Array], &[Array], &[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// A function whose gradient MLX takes from `backward` instead of differentiating `forward`.
///
/// Both functions must own what they capture (`'static`): MLX keeps them inside the graph of
/// every output until that output is freed.
pub struct CustomVjp {
    closure: mlx_sys::mlx_closure,
}

impl std::fmt::Debug for CustomVjp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomVjp")
    }
}

unsafe extern "C" fn backward_trampoline(
    out: *mut mlx_sys::mlx_vector_array,
    primals: mlx_sys::mlx_vector_array,
    cotangents: mlx_sys::mlx_vector_array,
    outputs: mlx_sys::mlx_vector_array,
    payload: *mut c_void,
) -> c_int {
    closure::guarded(|| {
        // SAFETY: `payload` is the `Box<Backward>` leaked in `CustomVjp::new`, alive until
        // `destroy` runs; the vectors are live for this call.
        let body = unsafe { &mut *(payload as *mut Backward) };
        let (p, c, o) = unsafe {
            (
                closure::arrays_of(primals)?,
                closure::arrays_of(cotangents)?,
                closure::arrays_of(outputs)?,
            )
        };
        let grads = body(&p, &c, &o).map_err(closure::message)?;
        if grads.len() != p.len() {
            return Err(format!(
                "a custom backward pass returned {} gradients for {} inputs",
                grads.len(),
                p.len()
            ));
        }
        // SAFETY: `out` is the live vector MLX passed.
        unsafe { closure::write(out, &grads) }
    })
}

impl CustomVjp {
    /// `forward` (inputs to outputs) differentiated by `backward(primals, cotangents,
    /// outputs)`, which returns one gradient per primal, shaped like it.
    pub fn new<F, B>(forward: F, backward: B) -> Result<CustomVjp>
    where
        F: FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception> + 'static,
        B: FnMut(&[Array], &[Array], &[Array]) -> std::result::Result<Vec<Array>, Exception>
            + 'static,
    {
        crate::init();
        let fun = crate::checkpoint::function(forward);
        let body: Box<Backward> = Box::new(Box::new(backward));
        let payload = Box::into_raw(body) as *mut c_void;
        // SAFETY: the payload is owned by the custom closure from here on; `fun` and `vjp` are
        // freed here, the resulting closure holds its own copies.
        unsafe {
            let vjp = mlx_sys::mlx_closure_custom_new_func_payload(
                Some(backward_trampoline),
                payload,
                Some(closure::destroy::<Backward>),
            );
            let mut closure = mlx_sys::mlx_closure_new();
            let rc = mlx_sys::mlx_custom_vjp(&mut closure, fun, vjp);
            mlx_sys::mlx_closure_free(fun);
            mlx_sys::mlx_closure_custom_free(vjp);
            if rc != 0 {
                mlx_sys::mlx_closure_free(closure);
                return Err(Error::Ffi {
                    call: "mlx_custom_vjp",
                    code: rc,
                });
            }
            Ok(CustomVjp { closure })
        }
    }

    /// Runs `forward` on `inputs`; gradients through the outputs call `backward`.
    pub fn apply(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        closure::apply(self.closure, inputs)
    }
}

impl Drop for CustomVjp {
    fn drop(&mut self) {
        // SAFETY: created in `new`, freed once; graphs hold their own copies.
        unsafe {
            mlx_sys::mlx_closure_free(self.closure);
        }
    }
}

/// `inputs`, unchanged, but computed only after `dependencies`: MLX evaluates a graph in
/// whatever order its inputs allow, and this adds an edge, so work that would otherwise run
/// side by side (and hold its memory at once) runs one piece after another.
pub fn depends(inputs: &[Array], dependencies: &[Array]) -> Result<Vec<Array>> {
    crate::init();
    let d = closure::vector_of(dependencies);
    // SAFETY: the vectors are live for the call; `d` is freed once, after it.
    let arrays =
        closure::call_on_vectors(inputs, |out, i| unsafe { mlx_sys::mlx_depends(out, i, d) });
    // SAFETY: made above, freed once.
    unsafe { mlx_sys::mlx_vector_array_free(d) };
    arrays.map_err(|e| match e {
        VectorCallError::Code(code) => Error::Ffi {
            call: "mlx_depends",
            code,
        },
        VectorCallError::Unreadable(e) => Error::Mlx(Exception::custom(e)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backward_pass_gets_primals_cotangents_and_outputs() -> Result<()> {
        // y = x², backward computed from the output: dy/dx = 2 · y / x
        let f = CustomVjp::new(
            |xs: &[Array]| Ok(vec![xs[0].square()?]),
            |p: &[Array], c: &[Array], o: &[Array]| {
                Ok(vec![o[0]
                    .multiply(Array::from_f32(2.0))?
                    .divide(&p[0])?
                    .multiply(&c[0])?])
            },
        )?;
        let mut g = mlx_rs::transforms::grad(|xs: &[Array]| {
            f.apply(xs).map_err(Error::into_exception)?[0]
                .multiply(Array::from_slice(&[1.0f32, 3.0], &[2]))?
                .sum(None)
        });
        let dx = g(&[Array::from_slice(&[0.5f32, -2.0], &[2])])?;
        assert_eq!(dx.as_slice::<f32>(), &[1.0, -12.0]);
        Ok(())
    }

    #[test]
    fn a_wrong_number_of_gradients_is_an_error() -> Result<()> {
        let f = CustomVjp::new(
            |xs: &[Array]| Ok(vec![xs[0].add(&xs[1])?]),
            |_: &[Array], c: &[Array], _: &[Array]| Ok(vec![c[0].clone()]),
        )?;
        let mut g = mlx_rs::transforms::grad(|xs: &[Array]| {
            f.apply(xs).map_err(Error::into_exception)?[0].sum(None)
        });
        // MLX reports only that the backward pass failed; the process goes on
        let result = g(&[Array::from_f32(1.0), Array::from_f32(2.0)]).and_then(|dx| dx.eval());
        assert!(result.is_err(), "one gradient for two inputs was taken");
        Ok(())
    }

    #[test]
    fn depends_keeps_the_values() -> Result<()> {
        let a = Array::from_slice(&[1.0f32, 2.0], &[2]);
        let b = Array::from_f32(5.0).exp()?;
        let out = depends(&[a], &[b])?;
        assert_eq!(out[0].as_slice::<f32>(), &[1.0, 2.0]);
        Ok(())
    }
}
