//! gmlx's own CUDA kernels through MLX's custom-kernel API: each kernel made once per thread,
//! its common header reaching MLX as an `#include` of a file in gmlx's cache, and one launch
//! per call with its template values and grid. [`crate::cuda_qmv`] (the 4-bit products) and
//! [`crate::cuda_attention`] (decode attention) describe their kernels with a [`Spec`].
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::ops::RangeInclusive;
use std::sync::{Mutex, OnceLock};

use mlx_rs::{Array, Dtype, Stream};

use crate::closure::VectorCallError;
use crate::error::{Error, Result};
use crate::kept::KeptPrimitive;
use crate::runtime::{check, Backend};

/// One kernel: its name (MLX's key for the compiled kernel, with a hash of the text added),
/// the body MLX wraps in the signature it generates, the header placed before it, and the
/// names of its inputs and outputs in order.
pub(crate) struct Spec {
    pub name: &'static str,
    pub source: &'static str,
    pub header: &'static str,
    pub inputs: &'static [&'static str],
    pub outputs: &'static [&'static str],
}

/// One output: its shape and dtype.
pub(crate) type Output<'a> = (&'a [i32], Dtype);

/// Applies kernel `spec` to `inputs` with `outputs`, the template types `types` (named so that
/// they enter the compiled kernel's name: MLX keys its compiled kernels by name and template
/// values), integer constants `ints`, over `(threads in all, threads per block)`. With
/// kept primitives on (unless `GMLX_CUDA_KERNEL_REUSE=0`) a launch whose [`launch_key`] an earlier one of this thread had
/// reuses that launch's primitive ([`KeptPrimitive`]): MLX generates a kernel's whole text at
/// every call of its custom-kernel function, and a decode step makes a few hundred calls.
pub(crate) fn launch(
    spec: &Spec,
    inputs: &[Array],
    outputs: &[Output<'_>],
    types: &[(&CStr, Dtype)],
    ints: &[(&CStr, i32)],
    (grid, block): (i32, i32),
) -> Result<Vec<Array>> {
    let key = reuse_enabled()
        .then(|| launch_key(spec, inputs, outputs, types, ints, (grid, block)))
        .flatten();
    let reused = key
        .as_ref()
        .and_then(|key| KEPT.with(|kept| kept.borrow().get(key).map(|k| k.apply(inputs))));
    let arrays = match reused {
        Some(arrays) => arrays.map_err(|reason| error(spec, &reason))?,
        None => {
            let arrays = launch_new(spec, inputs, outputs, types, ints, (grid, block))?;
            if let Some(key) = key {
                keep(key, &arrays);
            }
            arrays
        }
    };
    if arrays.len() != outputs.len() {
        return Err(error(spec, "MLX returned another number of outputs"));
    }
    Ok(arrays)
}

/// Keeps the primitive of a launch's `arrays` under `key` (where it has one).
fn keep(key: Vec<i64>, arrays: &[Array]) {
    let Some(k) = arrays.first().and_then(KeptPrimitive::of) else {
        return;
    };
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.insert(key, k);
    });
}

/// The environment variable that turns off (`0`) making a launch's node from the primitive of an
/// earlier launch of the same kernel, settings and argument types ([`launch`]).
pub const REUSE_VAR: &str = "GMLX_CUDA_KERNEL_REUSE";

/// Whether [`launch`] reuses primitives (unless `GMLX_CUDA_KERNEL_REUSE=0`: the host's graph
/// building per SmolLM2-135M decode step went from 776-1 349 us to 413-441 us on an H100,
/// `bench/runs/2026-12-07-h100-2/`).
fn reuse_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| switched_on(REUSE_VAR))
}

/// Primitives kept per thread at most; past it the map starts over (a decode step launches a
/// few dozen distinct settings; the attention's grid grows with the context).
const MAX_KEPT: usize = 1024;

thread_local! {
    /// This thread's kept primitives by [`launch_key`].
    static KEPT: RefCell<HashMap<Vec<i64>, KeptPrimitive>> = RefCell::new(HashMap::new());
}

/// What decides a launch's primitive: the kernel, the stream it runs on (the thread's default),
/// the grid, the outputs' shapes and dtypes, the template values, and the inputs' dtypes (MLX
/// writes them into the kernel's signature); not the inputs themselves. `None` where the
/// stream cannot be named.
fn launch_key(
    spec: &Spec,
    inputs: &[Array],
    outputs: &[Output<'_>],
    types: &[(&CStr, Dtype)],
    ints: &[(&CStr, i32)],
    (grid, block): (i32, i32),
) -> Option<Vec<i64>> {
    let stream = Stream::thread_local_or_default();
    let mut index = -1;
    // SAFETY: the stream is live for the call.
    if unsafe { mlx_sys::mlx_stream_get_index(&mut index, stream.as_ptr()) } != 0 {
        return None;
    }
    let dtype = |d: Dtype| i64::from(mlx_sys::mlx_dtype::from(d));
    let mut key = vec![
        spec as *const Spec as i64,
        i64::from(index),
        i64::from(grid),
        i64::from(block),
    ];
    for (shape, d) in outputs {
        key.push(shape.len() as i64);
        key.extend(shape.iter().map(|&n| i64::from(n)));
        key.push(dtype(*d));
    }
    for (name, d) in types {
        key.extend([name.as_ptr() as i64, dtype(*d)]);
    }
    for (name, value) in ints {
        key.extend([name.as_ptr() as i64, i64::from(*value)]);
    }
    key.extend(inputs.iter().map(|a| dtype(a.dtype())));
    Some(key)
}

/// [`launch`] through MLX's custom-kernel call (which generates the kernel's text); the caller
/// checks the outputs' count.
fn launch_new(
    spec: &Spec,
    inputs: &[Array],
    outputs: &[Output<'_>],
    types: &[(&CStr, Dtype)],
    ints: &[(&CStr, i32)],
    (grid, block): (i32, i32),
) -> Result<Vec<Array>> {
    struct Config(mlx_sys::mlx_fast_cuda_kernel_config);
    impl Drop for Config {
        fn drop(&mut self) {
            // SAFETY: made by mlx_fast_cuda_kernel_config_new, freed once.
            unsafe { mlx_sys::mlx_fast_cuda_kernel_config_free(self.0) };
        }
    }
    // SAFETY: a new config, freed by its guard.
    let config = Config(unsafe { mlx_sys::mlx_fast_cuda_kernel_config_new() });
    // SAFETY: the config is live; the shapes and names outlive each call.
    unsafe {
        for (shape, dtype) in outputs {
            check(
                "mlx_fast_cuda_kernel_config_add_output_arg",
                mlx_sys::mlx_fast_cuda_kernel_config_add_output_arg(
                    config.0,
                    shape.as_ptr(),
                    shape.len(),
                    (*dtype).into(),
                ),
            )?;
        }
        check(
            "mlx_fast_cuda_kernel_config_set_grid",
            mlx_sys::mlx_fast_cuda_kernel_config_set_grid(config.0, grid, 1, 1),
        )?;
        check(
            "mlx_fast_cuda_kernel_config_set_thread_group",
            mlx_sys::mlx_fast_cuda_kernel_config_set_thread_group(config.0, block, 1, 1),
        )?;
        for (name, dtype) in types {
            check(
                "mlx_fast_cuda_kernel_config_add_template_arg_dtype",
                mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_dtype(
                    config.0,
                    name.as_ptr(),
                    (*dtype).into(),
                ),
            )?;
        }
        for (name, value) in ints {
            check(
                "mlx_fast_cuda_kernel_config_add_template_arg_int",
                mlx_sys::mlx_fast_cuda_kernel_config_add_template_arg_int(
                    config.0,
                    name.as_ptr(),
                    *value,
                ),
            )?;
        }
    }
    with_kernel(spec, |kernel| apply(spec, kernel, inputs, config.0))
}

/// The uint32 zeros `[len]` that `cell` keeps for this thread, made and evaluated at the first
/// call: words that kernels write in place and leave at zero (or count on), shared by a
/// thread's launches, which run in order on its stream.
pub(crate) fn thread_words(
    cell: &'static std::thread::LocalKey<OnceLock<Array>>,
    len: i32,
) -> Result<Array> {
    cell.with(|cell| {
        if let Some(w) = cell.get() {
            return Ok(w.clone());
        }
        let zeros = crate::ops::zeros_dtype(&[len], Dtype::Uint32)?;
        zeros.eval()?;
        let _ = cell.set(zeros.clone());
        Ok(zeros)
    })
}

/// Whether MLX runs on its CUDA backend (where gmlx's kernels can run at all).
pub(crate) fn on_cuda() -> bool {
    crate::runtime::backend().is_ok_and(|b| b == Backend::Cuda)
}

/// The multiprocessors of the GPU that MLX's CUDA backend runs on (the process's CUDA device 0,
/// a MIG instance's own count where the process sees one), asked of the CUDA driver; `None` off
/// CUDA or where the driver does not answer. MLX's device information has no such count.
pub(crate) fn multiprocessors() -> Option<i32> {
    static COUNT: OnceLock<Option<i32>> = OnceLock::new();
    *COUNT.get_or_init(|| {
        if on_cuda() {
            driver_multiprocessors()
        } else {
            None
        }
    })
}

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT` from the driver library MLX's backend loads.
fn driver_multiprocessors() -> Option<i32> {
    type Init = unsafe extern "C" fn(u32) -> i32;
    type DeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    type Attribute = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;
    const MULTIPROCESSOR_COUNT: i32 = 16;
    // SAFETY: the symbols are the CUDA driver API's, called with their C signatures and valid
    // out-pointers; the handle is closed after the calls (the library stays loaded for MLX).
    unsafe {
        let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if lib.is_null() {
            return None;
        }
        let init = libc::dlsym(lib, c"cuInit".as_ptr());
        let device_get = libc::dlsym(lib, c"cuDeviceGet".as_ptr());
        let attribute = libc::dlsym(lib, c"cuDeviceGetAttribute".as_ptr());
        let mut count = None;
        if !init.is_null() && !device_get.is_null() && !attribute.is_null() {
            let init: Init = std::mem::transmute(init);
            let device_get: DeviceGet = std::mem::transmute(device_get);
            let attribute: Attribute = std::mem::transmute(attribute);
            let (mut device, mut n) = (0, 0);
            if init(0) == 0
                && device_get(&mut device, 0) == 0
                && attribute(&mut n, MULTIPROCESSOR_COUNT, device) == 0
                && n > 0
            {
                count = Some(n);
            }
        }
        libc::dlclose(lib);
        count
    }
}

/// A kernel's switch: on unless environment variable `var` is `0`.
pub(crate) fn switched_on(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v.trim() != "0")
}

/// An experiment's setting: on only where environment variable `var` is `1`.
pub(crate) fn opted_in(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v.trim() == "1")
}

/// Environment variable `var` as an integer in `range`, else `default`.
pub(crate) fn int_setting(var: &str, range: RangeInclusive<i32>, default: i32) -> i32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| range.contains(n))
        .unwrap_or(default)
}

pub(crate) fn error(spec: &Spec, reason: &str) -> Error {
    Error::CudaKernel {
        kernel: spec.name,
        reason: reason.to_owned(),
    }
}

/// The one output of a launch of kernel `spec`.
pub(crate) fn single(spec: &Spec, outputs: Vec<Array>) -> Result<Array> {
    outputs
        .into_iter()
        .next()
        .ok_or_else(|| error(spec, "MLX returned no output"))
}

/// `f` on kernel `spec`, made once per thread (its handle is not shared between threads).
fn with_kernel<R>(
    spec: &Spec,
    f: impl FnOnce(mlx_sys::mlx_fast_cuda_kernel) -> Result<R>,
) -> Result<R> {
    struct Made(mlx_sys::mlx_fast_cuda_kernel);
    impl Drop for Made {
        fn drop(&mut self) {
            // SAFETY: made by mlx_fast_cuda_kernel_new, freed once.
            unsafe { mlx_sys::mlx_fast_cuda_kernel_free(self.0) };
        }
    }
    thread_local! {
        static KERNELS: RefCell<HashMap<&'static str, Made>> = RefCell::new(HashMap::new());
    }
    KERNELS.with(|kernels| {
        let made = kernels.borrow().get(spec.name).map(|k| k.0);
        let kernel = match made {
            Some(k) => k,
            None => {
                let k = new_kernel(spec)?;
                kernels.borrow_mut().insert(spec.name, Made(k));
                k
            }
        };
        f(kernel)
    })
}

fn cstring(spec: &Spec, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| error(spec, "a name with a NUL byte"))
}

/// An mlx-c string vector, freed when dropped.
struct Names(mlx_sys::mlx_vector_string);

impl Names {
    fn new(spec: &Spec, list: &[&str]) -> Result<Names> {
        // SAFETY: a new vector, freed by the guard; mlx-c copies each string appended.
        let names = Names(unsafe { mlx_sys::mlx_vector_string_new() });
        for name in list {
            let c = cstring(spec, name)?;
            // SAFETY: the vector is live, `c` outlives the call.
            check("mlx_vector_string_append_value", unsafe {
                mlx_sys::mlx_vector_string_append_value(names.0, c.as_ptr())
            })?;
        }
        Ok(names)
    }
}

impl Drop for Names {
    fn drop(&mut self) {
        // SAFETY: made by mlx_vector_string_new, freed once.
        unsafe { mlx_sys::mlx_vector_string_free(self.0) };
    }
}

fn new_kernel(spec: &Spec) -> Result<mlx_sys::mlx_fast_cuda_kernel> {
    let inputs = Names::new(spec, spec.inputs)?;
    let outputs = Names::new(spec, spec.outputs)?;
    let (source, header) = (without_comments(spec.source), without_comments(spec.header));
    // MLX keeps a compiled kernel under its name and template values alone (in memory and in
    // its kernel cache on disk): the name carries a hash of the text, so an edited kernel is
    // never served from an older build
    let hash = fnv1a(&[&header, &source]);
    let name = format!("{}_{hash:08x}", spec.name);
    let header = header_include(&header).unwrap_or(header);
    let name = cstring(spec, &name)?;
    let (source, header) = (cstring(spec, &source)?, cstring(spec, &header)?);
    // SAFETY: every pointer is live for the call; mlx-c copies what it keeps.
    let kernel = unsafe {
        mlx_sys::mlx_fast_cuda_kernel_new(
            name.as_ptr(),
            inputs.0,
            outputs.0,
            source.as_ptr(),
            header.as_ptr(),
            true,
            0,
        )
    };
    if kernel.ctx.is_null() {
        return Err(error(spec, "MLX could not make it"));
    }
    Ok(kernel)
}

/// An `#include` of `header`, written to `<gmlx cache>/cuda-kernels/gmlx_<hash>.cuh` (kept
/// there) once per process; `None` where it cannot be written or named, or for an empty
/// header. MLX hashes a custom kernel's whole text at every launch to find its compiled
/// module and copies it into a new string at every call: with a header of several kilobytes
/// inline that is several microseconds of host time per launch, a few hundred launches per
/// decode step. NVRTC reads an included file by its absolute path when it compiles a kernel
/// (at its first launch with new template values): a file removed while the process runs
/// fails those compilations.
pub(crate) fn header_include(header: &str) -> Option<String> {
    if header.is_empty() {
        return None;
    }
    static INCLUDES: OnceLock<Mutex<HashMap<u32, Option<String>>>> = OnceLock::new();
    let hash = fnv1a(&[header]);
    let mut includes = INCLUDES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    includes
        .entry(hash)
        .or_insert_with(|| write_header(header, hash))
        .clone()
}

fn write_header(header: &str, hash: u32) -> Option<String> {
    let dir = gmlx_cache::dir().join("cuda-kernels");
    let path = dir.join(format!("gmlx_{hash:08x}.cuh"));
    let text = path.to_str()?;
    if !path.is_absolute() || text.contains(['"', '\n', '\\']) {
        return None;
    }
    let current = std::fs::read_to_string(&path).is_ok_and(|t| t == header);
    if !current {
        std::fs::create_dir_all(&dir).ok()?;
        // another process may write the same file: each writes its own and renames
        let partial = dir.join(format!("gmlx_{hash:08x}.{}.partial", std::process::id()));
        let written =
            std::fs::write(&partial, header).and_then(|()| std::fs::rename(&partial, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
            return None;
        }
    }
    Some(format!("#include \"{text}\"\n"))
}

/// `source` without its whole-line comments and blank lines, each line ending in a newline: MLX
/// copies a kernel's header and source into a new string at every launch (the text is looked up
/// by name only when the kernel is compiled), so the text it gets is kept short. The kernels'
/// sources have no line continuations, block comments or string literals.
pub(crate) fn without_comments(source: &str) -> String {
    source
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.is_empty() && !t.starts_with("//")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The 32-bit FNV-1a hash of `parts`, in order.
fn fnv1a(parts: &[&str]) -> u32 {
    parts
        .iter()
        .flat_map(|p| p.bytes())
        .fold(0x811c_9dc5, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
}

fn apply(
    spec: &Spec,
    kernel: mlx_sys::mlx_fast_cuda_kernel,
    inputs: &[Array],
    config: mlx_sys::mlx_fast_cuda_kernel_config,
) -> Result<Vec<Array>> {
    let stream = Stream::thread_local_or_default();
    // SAFETY: the kernel, config, stream and vectors are live for the call.
    crate::closure::call_on_vectors(inputs, |outputs, inputs| unsafe {
        mlx_sys::mlx_fast_cuda_kernel_apply(outputs, kernel, inputs, config, stream.as_ptr())
    })
    .map_err(|e| match e {
        VectorCallError::Code(code) => Error::Ffi {
            call: "mlx_fast_cuda_kernel_apply",
            code,
        },
        VectorCallError::Unreadable(reason) => error(spec, &reason),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_key_tells_apart_whatever_the_kernel_is_made_of() {
        static A: Spec = Spec {
            name: "a",
            source: "",
            header: "",
            inputs: &["x"],
            outputs: &["y"],
        };
        static B: Spec = Spec { name: "b", ..A };
        let x16 = Array::from_slice(&[1.0f32, 2.0], &[2])
            .as_dtype(Dtype::Float16)
            .expect("cast");
        let x32 = Array::from_slice(&[3.0f32, 4.0], &[2]);
        let key = |spec: &Spec, x: &Array, shape: &[i32], t: Dtype, n: i32, grid: (i32, i32)| {
            launch_key(
                spec,
                std::slice::from_ref(x),
                &[(shape, t)],
                &[(c"T", t)],
                &[(c"N", n)],
                grid,
            )
            .expect("the default stream has an index")
        };
        let base = key(&A, &x16, &[2], Dtype::Float16, 2, (64, 32));
        // another launch of the same kernel on other values of the same dtype: the same key
        let same_input = Array::from_slice(&[9.0f32, 9.0], &[2])
            .as_dtype(Dtype::Float16)
            .expect("cast");
        assert_eq!(
            base,
            key(&A, &same_input, &[2], Dtype::Float16, 2, (64, 32))
        );
        for (what, other) in [
            ("kernel", key(&B, &x16, &[2], Dtype::Float16, 2, (64, 32))),
            (
                "input dtype",
                key(&A, &x32, &[2], Dtype::Float16, 2, (64, 32)),
            ),
            (
                "output shape",
                key(&A, &x16, &[1, 2], Dtype::Float16, 2, (64, 32)),
            ),
            (
                "output and template dtype",
                key(&A, &x16, &[2], Dtype::Bfloat16, 2, (64, 32)),
            ),
            (
                "template int",
                key(&A, &x16, &[2], Dtype::Float16, 3, (64, 32)),
            ),
            ("grid", key(&A, &x16, &[2], Dtype::Float16, 2, (128, 32))),
            ("block", key(&A, &x16, &[2], Dtype::Float16, 2, (64, 64))),
        ] {
            assert_ne!(base, other, "another {what} gave the same key");
        }
    }

    #[test]
    fn a_header_is_included_from_a_file_that_holds_it() {
        let header = without_comments(include_str!("kernels/qmv4.cuh"));
        let include = header_include(&header).expect("the cache folder is writable here");
        let path = include
            .strip_prefix("#include \"")
            .and_then(|rest| rest.strip_suffix("\"\n"))
            .expect("one include line");
        assert_eq!(std::fs::read_to_string(path).expect("written"), header);
        // a second kernel finds it in place
        assert_eq!(header_include(&header).as_deref(), Some(include.as_str()));
        // another header has its own file
        let other = header_include("// other\nint x;\n").expect("written");
        assert_ne!(other, include);
        assert_eq!(header_include(""), None);
    }

    #[test]
    fn kernel_text_keeps_code_lines_and_drops_comments() {
        let text = without_comments("// a comment\n\n  int a = 1;  // kept\n#pragma unroll\n");
        assert_eq!(text, "  int a = 1;  // kept\n#pragma unroll\n");
    }
}
