//! Thread blocks added to a CUDA launch that ask the GPU's L2 cache for the matrices the next
//! launch multiplies (`kernels/warm.cuh`), while the launch's own blocks work: a launch that
//! leaves the GPU's memory idle (the decode attention after a short context) or under-used (the
//! 8B down product, 1.4 TB/s on an H100 where the gate-up product reads 2.1) can bring in the
//! next product's bytes, whose loads then wait on L2 rather than on memory. Nothing waits for
//! the lines: a warming block asks for its share and ends.
//!
//! A warming launch takes [`SLOTS`] arrays more than its plain form (`n0` to `n8`, each with its
//! bytes as a constant, 0 for a slot left empty) and [`blocks`] more blocks, the last ones.
use std::ffi::CStr;
use std::sync::OnceLock;

use mlx_rs::Array;

use crate::cuda_kernel::{self, Spec};
use crate::error::Result;
use crate::qmm::Packed;

/// Arrays a warming launch takes: codes, scales and biases of up to three matrices.
pub const SLOTS: usize = 9;

const BYTES: [&CStr; SLOTS] = [
    c"N0B", c"N1B", c"N2B", c"N3B", c"N4B", c"N5B", c"N6B", c"N7B", c"N8B",
];

/// A warming launch's extra inputs and integer constants.
pub(crate) type WarmOperands = (Vec<Array>, Vec<(&'static CStr, i32)>);

/// Thread blocks a warming launch adds: one a multiprocessor (132, an H100's, where the CUDA
/// driver does not say).
pub fn blocks() -> i32 {
    cuda_kernel::multiprocessors().unwrap_or(132)
}

/// The environment variable that asks for the warmed lines at L2's usual eviction priority
/// (`0`; [`evict_last`]).
pub const EVICT_LAST_VAR: &str = "GMLX_CUDA_WARM_EVICT_LAST";

/// Whether the warmed lines are the last L2 evicts (`prefetch.global.L2::evict_last`), so that
/// the reads between the warming and the launch that needs them do not push them out; unless
/// `GMLX_CUDA_WARM_EVICT_LAST=0` (plain `prefetch.global.L2`).
fn evict_last() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| cuda_kernel::switched_on(EVICT_LAST_VAR))
}

/// The arrays of up to three matrices that a launch pulls into L2 for the next one: each
/// matrix's codes and scales, and its biases where the next launch reads them (not where it
/// derives them from the scales, [`crate::cuda_qmv`]'s centered form).
#[derive(Clone)]
pub struct WarmSet {
    arrays: Vec<Array>,
}

impl WarmSet {
    /// The set for `next`, or `None` where it has no matrix or more than three.
    pub fn of(next: &[Packed<'_>]) -> Option<WarmSet> {
        if next.is_empty() || next.len() * 3 > SLOTS {
            return None;
        }
        let mut arrays = Vec::with_capacity(SLOTS);
        for p in next {
            arrays.extend([p.w.clone(), p.scales.clone()]);
            let derived = crate::cuda_qmv::derived_biases(std::slice::from_ref(p)) == 1;
            arrays.extend(p.biases.filter(|_| !derived).cloned());
        }
        Some(WarmSet { arrays })
    }

    /// The launch's extra inputs (the empty slots filled with `filler`, which no block reads)
    /// and constants (`WB`, the warming blocks; `WL`, [`evict_last`]; each slot's bytes), for a
    /// launch of `spec`.
    pub(crate) fn operands(&self, spec: &Spec, filler: &Array) -> Result<WarmOperands> {
        let mut inputs = Vec::with_capacity(SLOTS);
        let mut ints = vec![(c"WB", blocks()), (c"WL", i32::from(evict_last()))];
        for (slot, name) in BYTES.iter().enumerate() {
            let (array, bytes) = match self.arrays.get(slot) {
                Some(a) => (a, byte_count(spec, a)?),
                None => (filler, 0),
            };
            inputs.push(array.clone());
            ints.push((*name, bytes));
        }
        Ok((inputs, ints))
    }

    /// The bytes the set pulls in.
    pub fn bytes(&self) -> usize {
        self.arrays.iter().map(|a| a.nbytes()).sum()
    }
}

/// `a`'s bytes as a warming kernel's constant takes them (at most 2 GiB).
fn byte_count(spec: &Spec, a: &Array) -> Result<i32> {
    i32::try_from(a.nbytes())
        .map_err(|_| cuda_kernel::error(spec, "an array of more than 2 GiB to pull into L2"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qmm::Mode;

    static SPEC: Spec = Spec {
        name: "warm_test",
        source: "",
        header: "",
        inputs: &[],
        outputs: &[],
    };

    #[test]
    fn a_set_holds_codes_scales_and_the_biases_a_launch_reads() {
        // 4 rows of 128 values: 256 bytes of codes, 64 of float32 scales and of biases
        let w = Array::from_slice(&[0u32; 64], &[4, 16]);
        let s = Array::from_slice(&[1.0f32; 16], &[4, 4]);
        let b = Array::from_slice(&[-8.0f32; 16], &[4, 4]);
        let matrix = |centered| Packed {
            w: &w,
            scales: &s,
            biases: Some(&b),
            group_size: 32,
            bits: 4,
            mode: Mode::Affine,
            centered,
        };
        // a centered matrix's biases are derived from its scales (GMLX_CUDA_QMV_CENTERED)
        let set = WarmSet::of(&[matrix(false), matrix(true)]).expect("two matrices");
        assert_eq!(set.bytes(), 256 + 64 + 64 + 256 + 64);
        let filler = Array::from_slice(&[0.0f32], &[1]);
        let (inputs, ints) = set.operands(&SPEC, &filler).expect("operands");
        assert_eq!(inputs.len(), SLOTS);
        assert_eq!(ints[0], (c"WB", blocks()));
        let bytes: Vec<i32> = ints[2..].iter().map(|&(_, n)| n).collect();
        assert_eq!(bytes, [256, 64, 64, 256, 64, 0, 0, 0, 0]);
        assert_eq!(inputs[5].nbytes(), 4, "an empty slot holds the filler");
        assert!(WarmSet::of(&[]).is_none());
        assert!(WarmSet::of(&[matrix(false); 4]).is_none(), "at most three");
    }
}
