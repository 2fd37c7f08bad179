//! Shared helpers of the gmlx-gguf integration tests: a deterministic RNG, random codec blocks
//! with finite scales, scratch directories, and the Python oracle (gguf-py + NumPy).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use gmlx_gguf::GgmlType;

/// SplitMix64: small, fast, deterministic.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// A finite f16 bit pattern (any sign, exponent below 31, any mantissa).
    pub fn finite_f16(&mut self) -> u16 {
        loop {
            let b = self.next_u64() as u16;
            if (b >> 10) & 0x1F != 0x1F {
                return b;
            }
        }
    }

    pub fn finite_f32(&mut self) -> u32 {
        loop {
            let b = self.next_u64() as u32;
            if (b >> 23) & 0xFF != 0xFF {
                return b;
            }
        }
    }
}

/// Byte offsets of the f16 scale fields of one block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 | T::Q1_0 | T::Q2_0 | T::IQ4_NL | T::IQ4_XS => &[0],
        T::Q4_1 | T::Q5_1 | T::Q4_K | T::Q5_K => &[0, 2],
        T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ3_XXS | T::IQ3_S | T::IQ1_S => &[0],
        T::Q2_K => &[80, 82],
        T::Q3_K => &[108],
        T::Q6_K => &[208],
        T::TQ1_0 => &[52],
        T::TQ2_0 => &[64],
        _ => &[],
    }
}

/// `n` random blocks of `ty`: random bytes, with every f16 scale (and every float element of
/// the plain float types) replaced by a random finite value.
pub fn random_blocks(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let ts = ty.type_size();
    let mut out = rng.bytes(n * ts);
    for blk in out.chunks_exact_mut(ts) {
        match ty {
            GgmlType::F16 => blk.copy_from_slice(&rng.finite_f16().to_le_bytes()),
            GgmlType::BF16 => blk.copy_from_slice(&((rng.finite_f32() >> 16) as u16).to_le_bytes()),
            GgmlType::F32 => blk.copy_from_slice(&rng.finite_f32().to_le_bytes()),
            GgmlType::F64 => loop {
                let v = f64::from_bits(rng.next_u64());
                if v.is_finite() && (v as f32).is_finite() {
                    blk.copy_from_slice(&v.to_le_bytes());
                    break;
                }
            },
            GgmlType::IQ1_M => {
                // The f16 super-block scale lives in the top nibble of the four u16 scale words.
                let d = rng.finite_f16();
                for k in 0..4 {
                    let at = 48 + 2 * k;
                    let w = u16::from_le_bytes([blk[at], blk[at + 1]]);
                    let w = (w & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12);
                    blk[at..at + 2].copy_from_slice(&w.to_le_bytes());
                }
            }
            _ => {
                for &at in f16_fields(ty) {
                    blk[at..at + 2].copy_from_slice(&rng.finite_f16().to_le_bytes());
                }
            }
        }
    }
    out
}

/// A fresh scratch directory under the target's test tmpdir.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gmlx-gguf")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The oracle interpreter: `$GMLX_PYTHON`, else `~/.cache/gmlx/pyenv/bin/python` if it exists,
/// else `python3`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("GMLX_PYTHON") {
        return PathBuf::from(p);
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = Path::new(&home).join(".cache/gmlx/pyenv/bin/python");
        if p.exists() {
            return p;
        }
    }
    PathBuf::from("python3")
}

/// Run a script of tests/python with the oracle interpreter; panics (fails the test) with a
/// clear message if the interpreter or its `gguf`/`numpy` packages are missing.
pub fn run_oracle(script: &str, args: &[&Path]) -> String {
    let py = python();
    let check = Command::new(&py)
        .args(["-c", "import gguf, numpy"])
        .output();
    match check {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "Python oracle unusable: {} cannot import gguf and numpy ({}). Set GMLX_PYTHON to an \
             interpreter with the packages of xtask/python-requirements.txt (gguf==0.19.0, numpy).",
            py.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => panic!(
            "Python oracle missing: cannot run {} ({e}). Set GMLX_PYTHON to an interpreter with \
             the packages of xtask/python-requirements.txt (gguf==0.19.0, numpy).",
            py.display()
        ),
    }
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new(&py)
        .arg(&script_path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script_path.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        script_path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
