//! Gradient checkpointing: MLX's `checkpoint` transform, which mlx-rs does not wrap.
//!
//! A [`Checkpointed`] function keeps only its inputs for the backward pass and runs again to
//! rebuild its intermediate activations when a gradient flows through it, trading compute
//! for memory. Differentiate through it with `mlx_rs::transforms::grad` or `value_and_grad`
//! as through any other op.
//!
//! ```
//! use gmlx_mlx::checkpoint::Checkpointed;
//! use gmlx_mlx::mlx_rs::transforms::grad;
//! use gmlx_mlx::Array;
//!
//! let sin = Checkpointed::new(|xs: &[Array]| Ok(vec![xs[0].sin()?]))?;
//! let x = Array::from_slice(&[0.1f32, 0.7, 2.0], &[3]);
//! let mut g = grad(|xs: &[Array]| sin.apply(xs).map_err(|e| e.into_exception())?[0].sum(None));
//! let dx = g(&[x.clone()])?;
//! let want = x.cos()?;
//! let diff = dx.subtract(&want)?.abs()?.max(None)?;
//! assert!(diff.item_exact::<f32>() < 1e-6);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
use std::ffi::c_void;
use std::os::raw::c_int;

use mlx_rs::error::Exception;
use mlx_rs::Array;

use crate::closure;
use crate::error::{Error, Result};

type Body = Box<dyn FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception>>;

/// A function of arrays wrapped in MLX's checkpoint transform.
///
/// The function must own what it captures (`'static`): MLX keeps it alive inside the graph
/// of every output until that output is freed, and calls it again during the backward pass.
pub struct Checkpointed {
    closure: mlx_sys::mlx_closure,
}

impl std::fmt::Debug for Checkpointed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Checkpointed")
    }
}

/// Calls the boxed body of a closure made by [`function`].
pub(crate) unsafe extern "C" fn trampoline(
    out: *mut mlx_sys::mlx_vector_array,
    input: mlx_sys::mlx_vector_array,
    payload: *mut c_void,
) -> c_int {
    closure::guarded(|| {
        // SAFETY: `payload` is the `Box<Body>` leaked in `function`, alive until `destroy`
        // runs; MLX calls the closure from one thread at a time.
        let body = unsafe { &mut *(payload as *mut Body) };
        let arrays = unsafe { closure::arrays_of(input) }?;
        let outputs = body(&arrays).map_err(closure::message)?;
        // SAFETY: `out` is the live vector MLX passed.
        unsafe { closure::write(out, &outputs) }
    })
}

/// `f` as a plain mlx-c closure (owned by the caller, who frees it).
pub(crate) fn function<F>(f: F) -> mlx_sys::mlx_closure
where
    F: FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception> + 'static,
{
    let body: Box<Body> = Box::new(Box::new(f));
    let payload = Box::into_raw(body) as *mut c_void;
    // SAFETY: the payload is owned by the closure from here on; `destroy` frees it when MLX
    // drops the last copy of the closure.
    unsafe {
        mlx_sys::mlx_closure_new_func_payload(
            Some(trampoline),
            payload,
            Some(closure::destroy::<Body>),
        )
    }
}

impl Checkpointed {
    /// Wraps `f` (inputs to outputs) in MLX's checkpoint transform.
    pub fn new<F>(f: F) -> Result<Checkpointed>
    where
        F: FnMut(&[Array]) -> std::result::Result<Vec<Array>, Exception> + 'static,
    {
        crate::init();
        let raw = function(f);
        // SAFETY: `raw` is freed here; the checkpointed closure holds its own copy.
        unsafe {
            let mut closure = mlx_sys::mlx_closure_new();
            let rc = mlx_sys::mlx_checkpoint(&mut closure, raw);
            mlx_sys::mlx_closure_free(raw);
            if rc != 0 {
                mlx_sys::mlx_closure_free(closure);
                return Err(Error::Ffi {
                    call: "mlx_checkpoint",
                    code: rc,
                });
            }
            Ok(Checkpointed { closure })
        }
    }

    /// Runs the function on `inputs`; gradients through the outputs recompute it.
    pub fn apply(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        closure::apply(self.closure, inputs)
    }
}

impl Drop for Checkpointed {
    fn drop(&mut self) {
        // SAFETY: created in `new`, freed once. Graphs that still use the function hold their
        // own copies of it.
        unsafe {
            mlx_sys::mlx_closure_free(self.closure);
        }
    }
}

impl Error {
    /// This error as an mlx-rs exception, for closures handed to mlx-rs transforms.
    pub fn into_exception(self) -> Exception {
        match self {
            Error::Mlx(e) => e,
            other => Exception::custom(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradients_through_a_checkpoint_match_the_plain_function() -> Result<()> {
        let f = |xs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
            let h = xs[0].matmul(&xs[1])?;
            Ok(vec![h.multiply(mlx_rs::ops::sigmoid(&h)?)?])
        };
        let ck = Checkpointed::new(f)?;
        let x = mlx_rs::random::normal::<f32>(&[4, 8], None, None, &mlx_rs::random::key(1)?)?;
        let w = mlx_rs::random::normal::<f32>(&[8, 3], None, None, &mlx_rs::random::key(2)?)?;
        let args: &[i32] = &[0, 1];
        let mut plain = mlx_rs::transforms::value_and_grad_with_argnums(
            move |xs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                Ok(vec![f(xs)?[0].sum(None)?])
            },
            args,
        );
        let mut checked = mlx_rs::transforms::value_and_grad_with_argnums(
            |xs: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                let y = ck.apply(xs).map_err(Error::into_exception)?;
                Ok(vec![y[0].sum(None)?])
            },
            args,
        );
        let (v1, g1) = plain(&[x.clone(), w.clone()])?;
        let (v2, g2) = checked(&[x, w])?;
        let close = |a: &Array, b: &Array| -> Result<f32> {
            Ok(a.subtract(b)?.abs()?.max(None)?.item_exact::<f32>())
        };
        assert!(close(&v1[0], &v2[0])? < 1e-6);
        for (a, b) in g1.iter().zip(&g2) {
            assert!(close(a, b)? < 1e-6);
        }
        Ok(())
    }

    #[test]
    fn a_failing_body_is_an_error_not_an_abort() -> Result<()> {
        let ck = Checkpointed::new(|_: &[Array]| Err(Exception::custom("nope")))?;
        let err = ck
            .apply(&[Array::from_f32(1.0)])
            .expect_err("the body fails");
        assert!(err.to_string().contains("nope"), "{err}");
        Ok(())
    }
}
