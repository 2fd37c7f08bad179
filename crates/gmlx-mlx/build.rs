// Facts about the MLX this crate was linked against, published by our mlx-sys (links = "mlx")
// to its direct dependents, turned into compile-time constants.
fn main() {
    for (dep, name) in [
        ("DEP_MLX_VERSION", "GMLX_MLX_BUILD_VERSION"),
        ("DEP_MLX_LIBDIR", "GMLX_MLX_BUILD_LIBDIR"),
        ("DEP_MLX_BLAS", "GMLX_MLX_BUILD_BLAS"),
    ] {
        let value = std::env::var(dep).unwrap_or_else(|_| "unknown".into());
        println!("cargo:rustc-env={name}={value}");
    }
}
