//! Build script of our drop-in `mlx-sys` 0.7.0 (wired in with `[patch.crates-io]`).
//!
//! Upstream mlx-sys 0.7.0 builds MLX from source and links Apple frameworks. This one:
//!   1. finds the prebuilt MLX: `$MLX_PREFIX`, or else the hash-pinned PyPI wheel
//!      `mlx-cpu==0.32.2` (Linux x86_64; `mlx-metal` on Apple silicon, untested), downloaded
//!      once with pip into the gmlx cache directory;
//!   2. takes the mlx-c 0.7.0 sources from the upstream crate itself: a nested
//!      `cargo metadata` on a throw-away manifest makes Cargo download, checksum-verify and
//!      unpack it (nothing is vendored);
//!   3. builds mlx-c as a static `libmlxc.a` with CMake against that MLX, and gmlx's shim over
//!      MLX's C++ API (`shim/`: what mlx-c does not offer) as `libgmlxshim.a`;
//!   4. generates the Rust bindings with bindgen over all `mlx/c/*.h`, as upstream does;
//!   5. links `libmlx` dynamically, and OpenBLAS ahead of it when it is installed (the wheel
//!      bundles reference BLAS, about 20x slower for float32 matmul on CPU).
//!
//! Environment:
//!   MLX_PREFIX      a prebuilt MLX (lib/libmlx.so or .dylib, include/mlx, share/cmake/MLX)
//!   MLX_C_SRC       an mlx-c 0.7.0 source tree to use instead of the upstream crate's
//!   GMLX_CACHE_DIR  where the wheel is unpacked (default: $XDG_CACHE_HOME/gmlx or ~/.cache/gmlx)
//!   GMLX_BLAS       `openblas` (default when found), `reference` (the wheel's own BLAS), or
//!                   the path of a `libopenblas.so.0`
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

/// The crates.io mlx-sys whose `src/mlx-c` we build, and the sha256 of its .crate file.
const UPSTREAM_VERSION: &str = "0.7.0";
const UPSTREAM_CHECKSUM: &str = "da965f83ce211b80f9b681d9bbd6fa625fe6bb2e659ba7bc55dd95eea8d3b028";
/// The MLX release mlx-c 0.7.0 is written for (0.32.4 already breaks `mlx_gather_qmm`). The
/// one place the version is pinned.
const PINNED_MLX: &str = "0.32.2";

/// A PyPI wheel that holds a prebuilt MLX under `mlx/` (`lib/`, `include/`, `share/cmake/`).
struct Wheel {
    package: &'static str,
    platform: &'static str,
    sha256: &'static str,
    /// The shared library inside `mlx/lib/`.
    library: &'static str,
}

/// The wheel for each target the build knows: the CPU wheel on Linux x86_64 (tested every
/// day), the Metal wheel on Apple silicon (untested: no Mac here; its hash is PyPI's file).
/// Elsewhere, `MLX_PREFIX` names an MLX install.
fn wheel_for_target() -> Wheel {
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    match (os.as_str(), arch.as_str()) {
        ("linux", "x86_64") => Wheel {
            package: "mlx-cpu",
            platform: "manylinux_2_35_x86_64",
            sha256: "fc5d31b90fc4f457b2f9614ed45651a567d22a6a11a03d114a90a4e10bdd8878",
            library: "libmlx.so",
        },
        ("macos", "aarch64") => Wheel {
            package: "mlx-metal",
            platform: "macosx_14_0_arm64",
            sha256: "3825fff379dbc107dd3413e564a06caeaa24819910ec49c0439e454c06a1b9b8",
            library: "libmlx.dylib",
        },
        _ => panic!(
            "no prebuilt MLX wheel is known for {os}-{arch}: set MLX_PREFIX to an MLX \
             {PINNED_MLX} install (lib/, include/, share/cmake/MLX)"
        ),
    }
}
/// Where Debian/Ubuntu packages put OpenBLAS (`libopenblas0-pthread`, `-openmp`, `-serial`).
const OPENBLAS_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/openblas-pthread",
    "/usr/lib/x86_64-linux-gnu/openblas-openmp",
    "/usr/lib/x86_64-linux-gnu/openblas-serial",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=compat");
    println!("cargo:rerun-if-changed=shim");
    for var in ["MLX_PREFIX", "MLX_C_SRC", "GMLX_CACHE_DIR", "GMLX_BLAS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let format_compat = manifest_dir.join("compat/format_compat.hpp");
    let half_compat = manifest_dir.join("compat/half_compat.h");

    let prefix = mlx_prefix();
    let version = mlx_version(&prefix);
    if version != PINNED_MLX {
        println!(
            "cargo:warning=MLX at {} is {version}; mlx-c {UPSTREAM_VERSION} is written for \
             {PINNED_MLX}",
            prefix.display()
        );
    }
    let mlx_c = mlx_c_sources(&out_dir);
    require_tool("cmake", "cmake");

    // ---- mlx-c against the prebuilt MLX ---------------------------------------------------
    let dst = cmake::Config::new(&mlx_c)
        // one build dir per MLX version, so switching MLX never reuses stale objects
        .out_dir(out_dir.join(format!("mlx-c-for-mlx-{version}")))
        .cxxflag(format!("-include {}", format_compat.display()))
        .cxxflag(format!("-include {}", half_compat.display()))
        .define("MLX_C_USE_SYSTEM_MLX", "ON")
        .define("MLX_DIR", prefix.join("share/cmake/MLX"))
        .define("MLX_C_BUILD_EXAMPLES", "OFF")
        .define("BUILD_SHARED_LIBS", "OFF")
        .define("CMAKE_INSTALL_LIBDIR", "lib")
        .build();

    // ---- gmlx's own shim over MLX's C++ API (shim/*.cpp), beside mlx-c ---------------------
    cc::Build::new()
        .cpp(true)
        .std("c++20")
        .file(manifest_dir.join("shim/kept_primitive.cpp"))
        .include(prefix.join("include"))
        .include(&mlx_c)
        .flag(format!("-include{}", format_compat.display()))
        .flag(format!("-include{}", half_compat.display()))
        .warnings(false)
        .compile("gmlxshim");

    // ---- link ------------------------------------------------------------------------------
    println!(
        "cargo:rustc-link-search=native={}",
        dst.join("lib").display()
    );
    println!("cargo:rustc-link-lib=static=mlxc");
    let blas = link_blas(&out_dir);
    // libmlx is linked through a symlink inside OUT_DIR: Cargo puts link-search dirs inside
    // OUT_DIR on the library path of `cargo run` / `cargo test`, so every crate's tests find
    // libmlx with no rpath or LD_LIBRARY_PATH. The link points at the prefix's parent so that
    // libmlx's own RPATH ($ORIGIN/../../mlx_cpu.libs) still resolves.
    let mlx_lib = prefix.join("lib");
    let root_link = out_dir.join("mlx-root");
    let _ = fs::remove_file(&root_link);
    let parent = prefix.parent().expect("MLX_PREFIX has a parent directory");
    symlink(parent, &root_link);
    let prefix_name = prefix.file_name().expect("MLX_PREFIX has a name");
    println!(
        "cargo:rustc-link-search=native={}",
        root_link.join(prefix_name).join("lib").display()
    );
    println!("cargo:rustc-link-lib=dylib=mlx");
    match env::var("CARGO_CFG_TARGET_OS").as_deref() {
        Ok("macos") | Ok("ios") => println!("cargo:rustc-link-lib=dylib=c++"),
        _ => println!("cargo:rustc-link-lib=dylib=stdc++"),
    }
    // rpath for this crate's own tests; binaries read DEP_MLX_LIBDIR in their build.rs.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", mlx_lib.display());

    println!("cargo::metadata=libdir={}", mlx_lib.display());
    let include = env::join_paths([prefix.join("include"), mlx_c.clone()]).expect("join");
    println!("cargo::metadata=include={}", include.to_string_lossy());
    println!("cargo::metadata=defines=");
    println!("cargo::metadata=version={version}");
    println!("cargo::metadata=blas={blas}");
    println!("cargo:rustc-env=GMLX_MLX_BUILD_VERSION={version}");
    println!("cargo:rustc-env=GMLX_MLX_BUILD_PREFIX={}", prefix.display());
    println!("cargo:rustc-env=GMLX_BLAS_LINKED={blas}");

    // ---- bindings: upstream's bindgen configuration, plus the half-type compat header -----
    let mut headers: Vec<PathBuf> = fs::read_dir(mlx_c.join("mlx/c"))
        .expect("mlx-c headers")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "h"))
        .collect();
    headers.sort();
    let bindings = headers
        .iter()
        .fold(
            bindgen::Builder::default()
                .rust_target("1.73.0".parse().expect("rust-version"))
                .clang_arg(format!("-I{}", mlx_c.display()))
                .clang_args(["-include".to_string(), half_compat.display().to_string()])
                .blocklist_function("malloc")
                .blocklist_function("realloc"),
            |b, h| b.header(h.to_string_lossy()),
        )
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen failed ({e}); it needs libclang (Debian: apt-get install libclang1-14 \
                 libclang-common-14-dev)"
            )
        });
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("write bindings.rs");
}

/// `$MLX_PREFIX`, or the target's wheel unpacked in the cache directory (downloaded on first
/// use).
fn mlx_prefix() -> PathBuf {
    let prefix = match env::var_os("MLX_PREFIX") {
        Some(p) => PathBuf::from(p),
        None => cached_wheel(&wheel_for_target()),
    };
    let prefix = fs::canonicalize(&prefix)
        .unwrap_or_else(|e| panic!("MLX_PREFIX={}: {e}", prefix.display()));
    let config = prefix.join("share/cmake/MLX/MLXConfigVersion.cmake");
    assert!(
        config.is_file(),
        "{} is not an MLX install (no {})",
        prefix.display(),
        config.display()
    );
    println!("cargo:rerun-if-changed={}", config.display());
    prefix
}

fn cache_dir() -> PathBuf {
    gmlx_cache::dir()
}

/// The `mlx/` directory of `wheel` at `PINNED_MLX`, fetched with pip (hash-checked) and
/// unpacked once into `<cache>/<package>-<version>/`.
fn cached_wheel(wheel: &Wheel) -> PathBuf {
    let Wheel {
        package,
        platform,
        sha256,
        library,
    } = *wheel;
    let dest = cache_dir().join(format!("{package}-{PINNED_MLX}"));
    let prefix = dest.join("mlx");
    if prefix.join("lib").join(library).is_file() {
        return prefix;
    }
    let parent = dest.parent().expect("cache dir");
    fs::create_dir_all(parent).unwrap_or_else(|e| panic!("create {}: {e}", parent.display()));
    let work = parent.join(format!(".{package}-{PINNED_MLX}.{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).expect("create wheel work dir");
    let requirement = work.join("requirements.txt");
    fs::write(
        &requirement,
        format!("{package}=={PINNED_MLX} --hash=sha256:{sha256}\n"),
    )
    .expect("write requirements");
    println!(
        "cargo:warning=downloading {package}=={PINNED_MLX} from PyPI into {}",
        dest.display()
    );
    let python = env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
        ])
        .args(["--require-hashes", "--platform", platform, "-r"])
        .arg(&requirement)
        .arg("-d")
        .arg(&work)
        .status()
        .unwrap_or_else(|e| panic!("could not run `{python} -m pip` to fetch MLX: {e}"));
    assert!(
        status.success(),
        "pip could not download {package}=={PINNED_MLX}; set MLX_PREFIX to an MLX install instead"
    );
    let wheel = fs::read_dir(&work)
        .expect("read wheel dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("pip left no wheel");
    let unpacked = work.join("unpacked");
    let status = Command::new(&python)
        .args([
            "-c",
            "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
        ])
        .arg(&wheel)
        .arg(&unpacked)
        .status()
        .expect("run python to unzip the wheel");
    assert!(status.success(), "could not unpack {}", wheel.display());
    if fs::rename(&unpacked, &dest).is_err() && !prefix.join("lib").join(library).is_file() {
        panic!("could not move the unpacked wheel to {}", dest.display());
    }
    let _ = fs::remove_dir_all(&work);
    prefix
}

fn mlx_version(prefix: &Path) -> String {
    let text = fs::read_to_string(prefix.join("share/cmake/MLX/MLXConfigVersion.cmake"))
        .expect("read MLXConfigVersion.cmake");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("set(PACKAGE_VERSION \""))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("unknown")
        .to_owned()
}

/// Links OpenBLAS so that its `cblas_*` and LAPACK symbols come before those of the wheel's
/// bundled reference BLAS in the global symbol scope (a binary's own NEEDED libraries are
/// searched before libmlx's). Returns the BLAS linked: `openblas` or `reference`.
fn link_blas(out_dir: &Path) -> &'static str {
    let choice = env::var("GMLX_BLAS").unwrap_or_default();
    let library = match choice.as_str() {
        "reference" => return "reference",
        "" | "openblas" => OPENBLAS_DIRS
            .iter()
            .map(|d| Path::new(d).join("libopenblas.so.0"))
            .find(|p| p.is_file()),
        path => Some(PathBuf::from(path)),
    };
    let Some(library) = library.filter(|p| p.is_file()) else {
        if choice.is_empty() {
            println!(
                "cargo:warning=OpenBLAS not found: MLX will use the wheel's reference BLAS, \
                 about 20x slower on CPU (Debian: apt-get install libopenblas0-pthread)"
            );
            return "reference";
        }
        panic!("GMLX_BLAS={choice}: no such OpenBLAS library");
    };
    let dir = out_dir.join("blas");
    let _ = fs::create_dir_all(&dir);
    let link = dir.join("libopenblas.so.0");
    let _ = fs::remove_file(&link);
    symlink(&library, &link);
    // No Rust code calls into OpenBLAS, so --as-needed (after --gc-sections) would drop it. A
    // tiny C object, linked whole, takes the address of one of its symbols in a constructor:
    // .init_array is never collected, so OpenBLAS stays a NEEDED library of every binary.
    let anchor = dir.join("blas_anchor.c");
    fs::write(
        &anchor,
        "extern char *openblas_get_config(void);\n\
         void *volatile gmlx_openblas_anchor;\n\
         __attribute__((constructor)) static void gmlx_keep_openblas(void) {\n\
           gmlx_openblas_anchor = (void *)&openblas_get_config;\n\
         }\n",
    )
    .expect("write blas_anchor.c");
    cc::Build::new()
        .file(&anchor)
        .cargo_metadata(false)
        .out_dir(&dir)
        .compile("gmlx_blas_anchor");
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=static:+whole-archive=gmlx_blas_anchor");
    println!("cargo:rustc-link-lib=dylib:+verbatim=libopenblas.so.0");
    "openblas"
}

fn require_tool(tool: &str, debian_package: &str) {
    let found = Command::new(tool).arg("--version").output().is_ok();
    assert!(
        found,
        "`{tool}` is needed to build mlx-c (Debian: apt-get install {debian_package})"
    );
}

fn symlink(target: &Path, link: &Path) {
    #[cfg(unix)]
    std::os::unix::fs::symlink(target, link)
        .unwrap_or_else(|e| panic!("symlink {} -> {}: {e}", link.display(), target.display()));
    #[cfg(not(unix))]
    panic!(
        "only Unix targets are supported ({} -> {})",
        link.display(),
        target.display()
    );
}

/// The mlx-c sources: `$MLX_C_SRC`, or `src/mlx-c` of the crates.io mlx-sys package, which
/// Cargo itself fetches (registry cache, mirrors, proxies and checksum checks as configured).
fn mlx_c_sources(out_dir: &Path) -> PathBuf {
    if let Some(dir) = env::var_os("MLX_C_SRC") {
        return PathBuf::from(dir);
    }
    let probe = out_dir.join("upstream-mlx-sys");
    fs::create_dir_all(&probe).expect("create probe dir");
    fs::write(
        probe.join("Cargo.toml"),
        format!(
            "[package]\nname = \"mlx-sys-upstream-probe\"\nversion = \"0.0.0\"\n\
             edition = \"2021\"\npublish = false\n\n[lib]\npath = \"lib.rs\"\n\n\
             [dependencies]\nmlx-sys = {{ version = \"={UPSTREAM_VERSION}\", \
             default-features = false }}\n\n\
             # a workspace of its own: the outer workspace's [patch] must not apply here\n\
             [workspace]\n"
        ),
    )
    .expect("write probe manifest");
    fs::write(probe.join("lib.rs"), "").expect("write probe lib.rs");

    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let metadata = |offline: bool| {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&probe)
            .args(["metadata", "--format-version", "1", "--manifest-path"])
            .arg(probe.join("Cargo.toml"));
        if offline {
            cmd.arg("--offline");
        }
        cmd.output().expect("failed to run cargo metadata")
    };
    // The registry cache first; the network only when the crate is not cached yet.
    let mut output = metadata(true);
    if !output.status.success() {
        output = metadata(false);
    }
    assert!(
        output.status.success(),
        "could not obtain crates.io mlx-sys {UPSTREAM_VERSION} for its mlx-c sources: {}\n\
         (set MLX_C_SRC to an mlx-c 0.7.0 source tree to build without it)",
        String::from_utf8_lossy(&output.stderr)
    );

    // Cargo checked the download against the index checksum it wrote to the lock file;
    // make sure that is the checksum we pinned.
    let lock = fs::read_to_string(probe.join("Cargo.lock")).expect("probe Cargo.lock");
    let entry = lock
        .split("[[package]]")
        .find(|p| {
            p.contains("name = \"mlx-sys\"")
                && p.contains(&format!("version = \"{UPSTREAM_VERSION}\""))
        })
        .expect("mlx-sys missing from the probe's Cargo.lock");
    assert!(
        entry.contains(&format!("checksum = \"{UPSTREAM_CHECKSUM}\"")),
        "crates.io mlx-sys {UPSTREAM_VERSION} has another checksum than the pinned one:\n{entry}"
    );

    let meta: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let pkg = meta["packages"]
        .as_array()
        .expect("packages array")
        .iter()
        .find(|p| p["name"] == "mlx-sys" && p["version"] == UPSTREAM_VERSION)
        .expect("mlx-sys missing from cargo metadata");
    assert!(
        pkg["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("registry+")),
        "the probe resolved mlx-sys to {} (a [patch] in .cargo/config.toml?)",
        pkg["source"]
    );
    let manifest = PathBuf::from(pkg["manifest_path"].as_str().expect("manifest_path"));
    let mlx_c = manifest.parent().expect("crate dir").join("src/mlx-c");
    assert!(
        mlx_c.join("CMakeLists.txt").is_file(),
        "no mlx-c in {}",
        mlx_c.display()
    );
    mlx_c
}
