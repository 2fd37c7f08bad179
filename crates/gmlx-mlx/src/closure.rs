//! Rust functions as mlx-c closures: the plumbing [`crate::checkpoint`] and
//! [`crate::custom_vjp`] share (argument vectors, error passing, the payload's lifetime).
use std::cell::RefCell;
use std::ffi::c_void;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mlx_rs::error::Exception;
use mlx_rs::Array;

use crate::error::{Error, Result};

thread_local! {
    /// The error of the last failing body on this thread: MLX only sees a failure code.
    static LAST_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The arrays of an mlx-c vector, each a new handle owned by its `Array`.
///
/// # Safety
/// `v` must be a live vector.
pub(crate) unsafe fn arrays_of(
    v: mlx_sys::mlx_vector_array,
) -> std::result::Result<Vec<Array>, String> {
    let n = unsafe { mlx_sys::mlx_vector_array_size(v) };
    let mut arrays = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: a fresh handle, owned by the `Array` that wraps it.
        unsafe {
            let mut a = mlx_sys::mlx_array_new();
            if mlx_sys::mlx_vector_array_get(&mut a, v, i) != 0 {
                mlx_sys::mlx_array_free(a);
                return Err("reading a closure's arguments failed".to_owned());
            }
            arrays.push(Array::from_ptr(a));
        }
    }
    Ok(arrays)
}

/// A new mlx-c vector holding (retaining) `arrays`; the caller frees it.
pub(crate) fn vector_of(arrays: &[Array]) -> mlx_sys::mlx_vector_array {
    let ptrs: Vec<mlx_sys::mlx_array> = arrays.iter().map(Array::as_ptr).collect();
    // SAFETY: the vector copies (retains) each array.
    unsafe { mlx_sys::mlx_vector_array_new_data(ptrs.as_ptr(), ptrs.len()) }
}

/// How an mlx-c call over vectors of arrays ([`call_on_vectors`]) failed.
pub(crate) enum VectorCallError {
    /// The call's own failure code.
    Code(c_int),
    /// Its output vector could not be read.
    Unreadable(String),
}

/// `call(&mut out, input)` with `inputs` as a new mlx-c vector `input`, and `out`, a new vector
/// the call fills, read back as arrays; both vectors are freed here.
pub(crate) fn call_on_vectors(
    inputs: &[Array],
    call: impl FnOnce(*mut mlx_sys::mlx_vector_array, mlx_sys::mlx_vector_array) -> c_int,
) -> std::result::Result<Vec<Array>, VectorCallError> {
    let input = vector_of(inputs);
    // SAFETY: `input` and `out` are created here, handed to `call` live, and freed once.
    unsafe {
        let mut out = mlx_sys::mlx_vector_array_new();
        let rc = call(&mut out, input);
        mlx_sys::mlx_vector_array_free(input);
        let arrays = if rc == 0 {
            arrays_of(out).map_err(VectorCallError::Unreadable)
        } else {
            Err(VectorCallError::Code(rc))
        };
        mlx_sys::mlx_vector_array_free(out);
        arrays
    }
}

/// Writes `outputs` into `out`.
///
/// # Safety
/// `out` must point at a live vector.
pub(crate) unsafe fn write(
    out: *mut mlx_sys::mlx_vector_array,
    outputs: &[Array],
) -> std::result::Result<(), String> {
    let vec = vector_of(outputs);
    // SAFETY: `out` is live (the caller's contract); `vec` is freed once here.
    let rc = unsafe {
        let rc = mlx_sys::mlx_vector_array_set(out, vec);
        mlx_sys::mlx_vector_array_free(vec);
        rc
    };
    if rc != 0 {
        return Err("writing a closure's outputs failed".to_owned());
    }
    Ok(())
}

/// Runs `body` for MLX: 0 on success, else 1 with the error kept for [`apply`] to report.
pub(crate) fn guarded(body: impl FnOnce() -> std::result::Result<(), String>) -> c_int {
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(_) => "a Rust function called by MLX panicked".to_owned(),
    };
    LAST_ERROR.with(|l| *l.borrow_mut() = Some(error));
    1
}

/// An exception's message, for [`guarded`].
pub(crate) fn message(e: Exception) -> String {
    e.what().to_owned()
}

/// Frees a `Box<T>` payload leaked into a closure; MLX calls it once.
pub(crate) unsafe extern "C" fn destroy<T>(payload: *mut c_void) {
    if !payload.is_null() {
        // SAFETY: the box leaked by the closure's constructor.
        let _ = catch_unwind(AssertUnwindSafe(|| unsafe {
            drop(Box::from_raw(payload as *mut T));
        }));
    }
}

/// Applies `closure` to `inputs`, reporting a failing Rust body's own error.
pub(crate) fn apply(closure: mlx_sys::mlx_closure, inputs: &[Array]) -> Result<Vec<Array>> {
    LAST_ERROR.with(|l| l.borrow_mut().take());
    // SAFETY: the closure is live; the vectors are live for the call.
    call_on_vectors(inputs, |out, input| unsafe {
        mlx_sys::mlx_closure_apply(out, closure, input)
    })
    .map_err(|e| match e {
        VectorCallError::Code(rc) => match LAST_ERROR.with(|l| l.borrow_mut().take()) {
            Some(what) => Error::Mlx(Exception::custom(what)),
            None => Error::Ffi {
                call: "mlx_closure_apply",
                code: rc,
            },
        },
        VectorCallError::Unreadable(e) => Error::Mlx(Exception::custom(e)),
    })
}
