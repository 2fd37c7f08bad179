//! MLX arrays over host vectors without a copy: MLX takes the vector and frees it when the
//! array's buffer is released (`mlx_array_new_data_managed_payload`).
use mlx_rs::Array;

use crate::error::{Error, Result};

/// A float32 array of `shape` over `data`, which it owns from here on.
pub fn f32_array(data: Vec<f32>, shape: &[i32]) -> Result<Array> {
    let elements: i64 = shape.iter().map(|&d| i64::from(d)).product();
    if shape.iter().any(|&d| d < 0) || elements != data.len() as i64 {
        return Err(Error::HostKernel {
            reason: format!(
                "{} floats cannot be an array of shape {shape:?}",
                data.len()
            ),
        });
    }
    unsafe extern "C" fn free_vec(payload: *mut std::ffi::c_void) {
        // SAFETY: `payload` is the box leaked below, released once by MLX.
        drop(unsafe { Box::from_raw(payload.cast::<Vec<f32>>()) });
    }
    let mut data = Box::new(data);
    let ptr = data.as_mut_ptr().cast::<std::ffi::c_void>();
    let payload = Box::into_raw(data).cast::<std::ffi::c_void>();
    // SAFETY: `ptr` points at `elements` floats that live until MLX calls `free_vec` with the
    // payload; the shape outlives the call.
    let raw = unsafe {
        mlx_sys::mlx_array_new_data_managed_payload(
            ptr,
            shape.as_ptr(),
            shape.len() as i32,
            mlx_sys::mlx_dtype__MLX_FLOAT32,
            payload,
            Some(free_vec),
        )
    };
    if raw.ctx.is_null() {
        // MLX failed (out of memory) either before it took the payload or after: its array
        // releases the payload when it is dropped, also when the handle's own allocation fails
        // after it. Freeing the payload here could free it twice, so this path leaves it.
        return Err(Error::HostKernel {
            reason: "MLX could not make an array over host memory".into(),
        });
    }
    // SAFETY: a new array handle, owned by the returned value.
    Ok(unsafe { Array::from_ptr(raw) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owned_vector_reads_back_and_computes() {
        let a = f32_array(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).expect("array");
        assert_eq!(a.shape(), &[2, 3]);
        let b = a.sum(None).expect("sum");
        b.eval().expect("eval");
        assert_eq!(b.as_slice::<f32>(), &[21.0]);
        assert!(f32_array(vec![1.0; 5], &[2, 3]).is_err());
    }
}
