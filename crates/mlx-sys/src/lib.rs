//! Drop-in replacement for crates.io `mlx-sys` 0.7.0: the same bindgen output over the same
//! mlx-c 0.7.0 headers, linked against the prebuilt `libmlx` of the PyPI MLX wheel (see
//! `build.rs`). Wired in with `[patch.crates-io]` in the workspace manifest.
#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(clippy::all)]
#![allow(unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// mlx-rs 0.33 seeds `RandomState::new()` with `mach_approximate_time()`, an Apple libSystem
/// function that mach-sys only declares. Off Apple platforms it is defined here; the value is
/// only a PRNG seed, so nanoseconds since the Unix epoch serve.
#[cfg(not(target_vendor = "apple"))]
#[no_mangle]
pub extern "C" fn mach_approximate_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

// gmlx's shim over MLX's C++ API (`shim/kept_primitive.cpp`): a node's primitive kept to make
// new nodes from new inputs.
extern "C" {
    /// The primitive of `node` (not yet evaluated) with its node's output shapes and dtypes;
    /// null where it has none. Freed by [`gmlx_kept_primitive_free`].
    pub fn gmlx_kept_primitive_new(node: mlx_array) -> *mut std::ffi::c_void;
    /// New outputs of the kept primitive on `inputs` into `res`; 0 on success.
    pub fn gmlx_kept_primitive_apply(
        res: *mut mlx_vector_array,
        kept: *const std::ffi::c_void,
        inputs: mlx_vector_array,
    ) -> std::ffi::c_int;
    pub fn gmlx_kept_primitive_free(kept: *mut std::ffi::c_void);
}
