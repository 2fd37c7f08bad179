//! `gmlx env` end to end: the real binary, its exit codes and its JSON report.
use std::process::Command;

fn gmlx(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gmlx"))
        .args(args)
        .output()
        .expect("run gmlx")
}

/// The JSON report of a `gmlx env --json` run that must have succeeded.
fn env_report(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn env_json_reports_runtime_blas_and_memory() {
    let out = gmlx(&["env", "--json"]);
    let report = env_report(&out);
    assert_eq!(report["mlx_version"], report["build_mlx_version"]);
    assert!(["cpu", "cuda", "metal"].contains(&report["backend"].as_str().unwrap_or("")));
    assert!(report["devices"].as_array().is_some_and(|d| !d.is_empty()));
    assert!(report["memory"]["limit_bytes"]
        .as_u64()
        .is_some_and(|b| b > 0));
    assert_eq!(report["precision"]["tf32"], false);
    // The binary was linked like every test: when the build found OpenBLAS, it serves cblas.
    if gmlx_mlx::blas::BUILD_BLAS == "openblas" {
        assert_eq!(report["blas"]["kind"], "openblas", "{report}");
    }
}

#[test]
fn env_text_names_the_blas_in_use() {
    let out = gmlx(&["env"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for field in ["mlx ", "backend ", "blas ", "float32 ", "memory "] {
        assert!(text.contains(field), "missing {field:?} in:\n{text}");
    }
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(gmlx(&["no-such-verb"]).status.code(), Some(2));
    assert_eq!(gmlx(&["env", "--no-such-flag"]).status.code(), Some(2));
}

/// What `cargo install --path bins/gmlx-cli` gives: the binary copied elsewhere, started from
/// another directory with no environment, finds the MLX runtime through its RUNPATH.
#[test]
fn an_installed_binary_runs_from_any_directory_without_environment() {
    let dir = std::env::temp_dir().join(format!("gmlx-install-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let installed = dir.join("gmlx");
    std::fs::copy(env!("CARGO_BIN_EXE_gmlx"), &installed).expect("copy the binary");
    let out = Command::new(&installed)
        .args(["env", "--json"])
        .env_clear()
        .current_dir("/")
        .output()
        .expect("run the copied binary");
    let _ = std::fs::remove_dir_all(&dir);
    let report = env_report(&out);
    assert_eq!(report["mlx_version"], report["build_mlx_version"]);
}
