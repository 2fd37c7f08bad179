// The binary finds libmlx without LD_LIBRARY_PATH: mlx-sys publishes its directory.
fn main() {
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{dir}");
    }
}
