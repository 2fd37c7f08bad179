//! The float32 policy, alone in its test binary: it must observe the environment before any
//! other test's MLX call has applied the policy.
use gmlx_mlx::precision;

#[test]
fn tf32_is_off_unless_the_user_asked() {
    let user_set = std::env::var_os(precision::TF32_VAR).is_some();
    let policy = gmlx_mlx::init();
    assert_eq!(policy.from_environment, user_set);
    if !user_set {
        assert!(!policy.tf32);
        assert_eq!(std::env::var(precision::TF32_VAR).as_deref(), Ok("0"));
    }
}
