// Embed an rpath to the prebuilt libmlx so the binary runs without LD_LIBRARY_PATH.
// mlx-sys (links = "mlx") publishes its directory as DEP_MLX_LIBDIR to direct dependents.
// The rpath is a RUNPATH: LD_LIBRARY_PATH (e.g. MLX's CUDA build) still comes first.
fn main() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
    }
}
