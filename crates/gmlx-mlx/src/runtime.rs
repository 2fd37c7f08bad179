//! Facts about the MLX runtime this process loaded: version, backend, devices, library path.
use std::ffi::{c_char, CStr};
use std::fmt;

use crate::error::{Error, Result};

/// The compute backend of the loaded MLX runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Cpu,
    Cuda,
    Metal,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
            Backend::Metal => "metal",
        })
    }
}

/// The MLX version this workspace pins and builds mlx-c against.
pub const BUILD_MLX_VERSION: &str = env!("GMLX_MLX_BUILD_VERSION");

/// One device the runtime offers, with the properties MLX reports for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceInfo {
    /// `cpu` or `gpu`.
    pub kind: &'static str,
    pub index: i32,
    /// Key/value properties (`device_name`, `architecture`, `memory_size`, ...), as MLX gives them.
    pub properties: Vec<(String, String)>,
}

impl DeviceInfo {
    /// The value of one property, if MLX reported it.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

pub(crate) fn check(call: &'static str, code: i32) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Ffi { call, code })
    }
}

/// The version string of the loaded libmlx (not the one built against: `LD_LIBRARY_PATH` may
/// bring another build, such as MLX's CUDA wheel).
pub fn mlx_version() -> Result<String> {
    crate::init();
    // SAFETY: mlx_string is an owned handle; freed after copying its bytes.
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        check("mlx_version", mlx_sys::mlx_version(&mut s))?;
        let text = CStr::from_ptr(mlx_sys::mlx_string_data(s))
            .to_string_lossy()
            .into_owned();
        mlx_sys::mlx_string_free(s);
        Ok(text)
    }
}

/// The backend of the loaded libmlx: CUDA or Metal when it has that GPU backend, else CPU.
pub fn backend() -> Result<Backend> {
    crate::init();
    let mut cuda = false;
    let mut metal = false;
    // SAFETY: out-parameters are valid bools.
    unsafe {
        check(
            "mlx_cuda_is_available",
            mlx_sys::mlx_cuda_is_available(&mut cuda),
        )?;
        check(
            "mlx_metal_is_available",
            mlx_sys::mlx_metal_is_available(&mut metal),
        )?;
    }
    Ok(if cuda {
        Backend::Cuda
    } else if metal {
        Backend::Metal
    } else {
        Backend::Cpu
    })
}

/// How many devices of a kind the runtime has.
pub fn device_count(kind: mlx_rs::DeviceType) -> Result<i32> {
    crate::init();
    let mut count = 0;
    // SAFETY: out-parameter is a valid int.
    check("mlx_device_count", unsafe {
        mlx_sys::mlx_device_count(&mut count, kind.into())
    })?;
    Ok(count)
}

/// Every CPU and GPU device of the runtime, with its properties.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let mut out = Vec::new();
    for (kind, name) in [
        (mlx_rs::DeviceType::Cpu, "cpu"),
        (mlx_rs::DeviceType::Gpu, "gpu"),
    ] {
        for index in 0..device_count(kind)? {
            out.push(DeviceInfo {
                kind: name,
                index,
                properties: device_properties(kind, index)?,
            });
        }
    }
    Ok(out)
}

fn device_properties(kind: mlx_rs::DeviceType, index: i32) -> Result<Vec<(String, String)>> {
    let mut props = Vec::new();
    // SAFETY: every handle created here is freed before returning; key strings are copied.
    unsafe {
        let device = mlx_sys::mlx_device_new_type(kind.into(), index);
        let mut info = mlx_sys::mlx_device_info_new();
        let got = mlx_sys::mlx_device_info_get(&mut info, device);
        if got == 0 {
            let mut keys = mlx_sys::mlx_vector_string_new();
            if mlx_sys::mlx_device_info_get_keys(&mut keys, info) == 0 {
                for i in 0..mlx_sys::mlx_vector_string_size(keys) {
                    let mut key: *mut c_char = std::ptr::null_mut();
                    if mlx_sys::mlx_vector_string_get(&mut key, keys, i) != 0 || key.is_null() {
                        continue;
                    }
                    if let Some(value) = property_value(info, key) {
                        props.push((CStr::from_ptr(key).to_string_lossy().into_owned(), value));
                    }
                }
            }
            mlx_sys::mlx_vector_string_free(keys);
        }
        mlx_sys::mlx_device_info_free(info);
        mlx_sys::mlx_device_free(device);
    }
    props.sort();
    Ok(props)
}

/// # Safety
/// `info` must be a live device-info handle and `key` a NUL-terminated string.
unsafe fn property_value(info: mlx_sys::mlx_device_info, key: *const c_char) -> Option<String> {
    let mut is_string = false;
    // SAFETY: guaranteed by the caller.
    unsafe {
        if mlx_sys::mlx_device_info_is_string(&mut is_string, info, key) != 0 {
            return None;
        }
        if is_string {
            let mut value: *const c_char = std::ptr::null();
            (mlx_sys::mlx_device_info_get_string(&mut value, info, key) == 0 && !value.is_null())
                .then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
        } else {
            let mut value = 0usize;
            (mlx_sys::mlx_device_info_get_size(&mut value, info, key) == 0)
                .then(|| value.to_string())
        }
    }
}

/// The file of the shared library that defines `symbol` in this process, if any.
pub(crate) fn library_of(symbol: &CStr) -> Option<String> {
    // SAFETY: dlsym/dladdr only read the process's loaded-object tables; the returned file
    // name points into the loader's own storage and is copied at once.
    unsafe {
        let address = libc::dlsym(libc::RTLD_DEFAULT, symbol.as_ptr());
        if address.is_null() {
            return None;
        }
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(address, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let path = CStr::from_ptr(info.dli_fname)
            .to_string_lossy()
            .into_owned();
        Some(std::fs::canonicalize(&path).map_or(path, |p| p.display().to_string()))
    }
}

/// The path of the loaded libmlx, found through a symbol only libmlx defines
/// (`mlx::core::version()`; the `mlx_*` C functions live in our static libmlxc).
pub fn libmlx_path() -> Option<String> {
    library_of(c"_ZN3mlx4core7versionEv")
}
