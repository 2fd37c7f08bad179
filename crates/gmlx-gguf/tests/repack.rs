//! MLX affine repacking: the affine form decodes to exactly the reference dequantization.

mod common;

use common::{random_blocks, Rng};
use gmlx_gguf::repack::{affine_layout, pack_bits, unpack_bits};
use gmlx_gguf::{repack_affine, Error, GgmlType};

const MAPPABLE: &[GgmlType] = &[
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q2_0,
    GgmlType::Q1_0,
];

#[test]
fn bit_stream_packing_round_trips_and_straddles_words() {
    let mut rng = Rng(11);
    for bits in [2u32, 3, 4, 5, 6, 8] {
        for n in [32usize, 64, 96, 128, 1024] {
            let vals: Vec<u8> = (0..n).map(|_| rng.below(1 << bits) as u8).collect();
            let mut words = vec![0u32; n * bits as usize / 32];
            pack_bits(&vals, bits, &mut words);
            assert_eq!(unpack_bits(&words, bits, n), vals, "bits {bits} n {n}");
        }
    }
    // 3 bits: element i at stream bits [3i, 3i+3); element 10 spans word 0 bits 30..31 and
    // word 1 bit 0.
    let mut vals = vec![0u8; 32];
    vals[10] = 0b111;
    vals[0] = 0b101;
    let mut words = vec![0u32; 3];
    pack_bits(&vals, 3, &mut words);
    assert_eq!(words, [0b101 | (0b11 << 30), 0b1, 0]);
    // 4 bits: element 1 is bits 4..8 of word 0 (LSB first).
    let mut vals = vec![0u8; 8];
    vals[1] = 0xA;
    let mut words = vec![0u32; 1];
    pack_bits(&vals, 4, &mut words);
    assert_eq!(words, [0xA0]);
}

#[test]
fn repacked_codecs_decode_exactly_to_the_reference() {
    let mut rng = Rng(0xAFF1);
    let mut total = 0usize;
    for &ty in MAPPABLE {
        let layout = affine_layout(ty).expect("layout");
        for rows in [1u64, 3, 17, 257] {
            let cols = (ty.block_size() * 4) as u64;
            let n_blocks = (rows * cols) as usize / ty.block_size();
            let bytes = random_blocks(ty, n_blocks, &mut rng);
            let aff = repack_affine(ty, &bytes, &[cols, rows]).expect("repack");
            assert_eq!(aff.layout, layout);
            assert_eq!((aff.rows as u64, aff.cols as u64), (rows, cols));
            assert_eq!(
                aff.q.len() as u64,
                rows * cols * u64::from(layout.bits) / 32
            );
            assert_eq!(
                aff.scales.len() as u64,
                rows * cols / layout.group_size as u64
            );
            let reference = gmlx_gguf::dequantize(ty, &bytes, rows * cols).expect("deq");
            let decoded = aff.dequantize();
            assert_eq!(decoded.len(), reference.len());
            for (i, (a, b)) in decoded.iter().zip(&reference).enumerate() {
                // Equal as f32 values; only the sign of a zero may differ.
                assert!(
                    a == b && (a.to_bits() == b.to_bits() || *a == 0.0),
                    "{ty} rows {rows} element {i}: affine {a} vs reference {b}"
                );
            }
            total += n_blocks;
        }
    }
    println!("{total} random blocks repacked exactly");
}

#[test]
fn codecs_that_cannot_map_say_why() {
    for ty in GgmlType::all() {
        if MAPPABLE.contains(&ty) {
            continue;
        }
        match affine_layout(ty) {
            Err(Error::NotAffine { reason, .. }) => assert!(!reason.is_empty()),
            other => panic!("{ty}: {other:?}"),
        }
    }
    let e = repack_affine(GgmlType::Q6_K, &[0; 210], &[256])
        .expect_err("Q6_K")
        .to_string();
    assert!(e.contains("Q6_K") && e.contains("16-element"), "{e}");
    let e = repack_affine(GgmlType::Q4_0, &[0; 17], &[32]).expect_err("short");
    assert!(matches!(e, Error::ByteLength { .. }), "{e}");
}
