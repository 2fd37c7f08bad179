//! What `gmlx env` reports is read from the live process and agrees with the build.
use gmlx_mlx::blas::{self, BlasKind};
use gmlx_mlx::device::{self, DeviceChoice, DeviceKind};
use gmlx_mlx::runtime::{self, Backend};
use gmlx_mlx::Error;

#[test]
fn loaded_mlx_is_the_pinned_version() {
    assert_eq!(
        runtime::mlx_version().expect("version"),
        runtime::BUILD_MLX_VERSION
    );
    let lib = runtime::libmlx_path().expect("libmlx is loaded");
    assert!(
        lib.ends_with("libmlx.so") || lib.ends_with("libmlx.dylib"),
        "{lib}"
    );
}

#[test]
fn openblas_serves_cblas_when_the_build_linked_it() {
    let info = blas::blas_info();
    match blas::BUILD_BLAS {
        "openblas" => {
            assert_eq!(info.kind, BlasKind::OpenBlas, "{info:?}");
            assert!(info
                .config
                .as_deref()
                .is_some_and(|c| c.contains("OpenBLAS")));
        }
        _ => assert_ne!(info.kind, BlasKind::OpenBlas, "{info:?}"),
    }
}

#[test]
fn auto_device_follows_the_backend() {
    let backend = runtime::backend().expect("backend");
    let auto = device::resolve(DeviceChoice::Auto).expect("auto");
    let cpu_devices = runtime::devices()
        .expect("devices")
        .into_iter()
        .filter(|d| d.kind == "cpu")
        .count();
    assert!(cpu_devices >= 1);
    match backend {
        Backend::Cpu => {
            assert_eq!(auto, DeviceKind::Cpu);
            match device::resolve(DeviceChoice::Gpu) {
                Err(Error::NoGpu { backend, library }) => {
                    assert_eq!(backend, Backend::Cpu);
                    assert!(library.contains("libmlx"), "{library}");
                }
                other => panic!("--device gpu on a CPU build gave {other:?}"),
            }
        }
        Backend::Cuda | Backend::Metal => assert_eq!(auto, DeviceKind::Gpu),
    }
    assert_eq!(
        device::resolve(DeviceChoice::Cpu).expect("cpu"),
        DeviceKind::Cpu
    );
}

#[test]
fn device_names_parse_and_bad_ones_are_named() {
    assert_eq!(
        "GPU".parse::<DeviceChoice>().expect("gpu"),
        DeviceChoice::Gpu
    );
    assert_eq!(
        "cpu".parse::<DeviceChoice>().expect("cpu"),
        DeviceChoice::Cpu
    );
    let err = "tpu"
        .parse::<DeviceChoice>()
        .expect_err("tpu is not a device");
    assert!(err.to_string().contains("\"tpu\""), "{err}");
}

#[test]
fn memory_statistics_see_an_allocation() {
    let before = gmlx_mlx::memory::stats().expect("stats");
    let a = gmlx_mlx::Array::zeros::<f32>(&[1024, 1024]).expect("zeros");
    a.eval().expect("eval");
    let after = gmlx_mlx::memory::stats().expect("stats");
    assert!(after.active_bytes >= before.active_bytes + 4 * 1024 * 1024 - 4096);
    assert!(after.peak_bytes >= after.active_bytes);
    drop(a);
}
