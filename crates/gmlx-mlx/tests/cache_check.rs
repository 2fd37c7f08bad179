//! MLX's cache-thrashing abort, alone in its test binary: it must observe the environment
//! before any other test's MLX call has applied the default.
use gmlx_mlx::cache_check::THRASHING_CHECK_VAR;

#[test]
fn the_thrashing_abort_is_off_unless_the_user_set_it() {
    let user_value = std::env::var(THRASHING_CHECK_VAR).ok();
    gmlx_mlx::init();
    assert_eq!(
        std::env::var(THRASHING_CHECK_VAR).ok(),
        Some(user_value.unwrap_or_else(|| "0".to_string()))
    );
}
