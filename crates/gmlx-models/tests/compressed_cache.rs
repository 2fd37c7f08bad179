//! DeepSeek-V4's cache across calls, against llama.cpp's logits on the fixture (window 16,
//! compress ratios [0, 4, 128, 4], indexer top-16, 312 positions): a sequence fed in pieces that
//! end inside blocks, on block ends and across the 128-position boundary gives llama.cpp's logits
//! at every position; the cache then holds the window's last rows, one pooled row per completed
//! block and at most two blocks of unpooled rows; a batch of two sequences at different
//! positions decodes as each does alone; a two-row pass without a cache (training's) matches too.
mod common;

use gmlx_mlx::Array;
use gmlx_models::cache::LayerCache;
use gmlx_models::{load, Direct, ForwardCtx, LoadOptions, Logits, Pass};
use serde_json::Value;

const TOLERANCE: f32 = 1e-3;

fn golden_logits() -> Vec<Vec<f32>> {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/deepseek4");
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("deepseek4-F16.json")).expect("golden"),
    )
    .expect("golden JSON");
    common::rows(&golden["exact"]["logits"])
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn pieces_across_block_ends_continue_the_window_pooled_and_indexer_caches() {
    let (path, sequence) = common::fixture("deepseek4", "F16");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let want = golden_logits();
    // ends at 3, 4, 6, 15, 65, 66, 67 (still dense), 127, 128 (the first 128-block completes
    // on a one-token piece), 134, 254, 312
    let pieces = [3, 1, 2, 9, 50, 1, 1, 60, 1, 6, 120, 58];
    let (cache, at, worst) = common::feed_pieces(&loaded.model, &sequence, &pieces, &want);
    assert_eq!(at, sequence.len());
    assert!(worst < TOLERANCE, "pieces differ from llama.cpp by {worst}");
    let held: Vec<(i32, i32, [i32; 2])> = cache
        .layers()
        .iter()
        .map(|l| match l {
            LayerCache::Compressed(c) => (c.raw_len(), c.pooled_len(), c.unpooled_len()),
            other => panic!("deepseek4 layers keep compressed caches, found {other:?}"),
        })
        .collect();
    // 312 = 78 blocks of 4 (the overlapped form keeps the last complete block and the one
    // filling: none is filling at 312) = 2 blocks of 128 + 56
    assert_eq!(
        held,
        [
            (15, 0, [0, 0]),
            (15, 78, [4, 4]),
            (15, 2, [56, 0]),
            (15, 78, [4, 4]),
        ]
    );
}

#[test]
fn a_batch_of_sequences_at_different_positions_decodes_as_each_alone() {
    let (path, sequence) = common::fixture("deepseek4", "F16");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let model = &loaded.model;
    let want = golden_logits();
    let (mut a, _, _) = common::feed_pieces(model, &sequence, &[127], &want);
    let (mut b, _, _) = common::feed_pieces(model, &sequence, &[66], &want);
    let mut worst = 0f32;
    for step in 0..3 {
        let (pa, pb) = (127 + step, 66 + step);
        let tokens = [sequence[pa], sequence[pb]];
        let logits = model
            .forward_rows(&tokens, &mut [&mut a, &mut b])
            .expect("forward_rows");
        logits.eval().expect("eval");
        let vocab = logits.shape()[1] as usize;
        let rows: Vec<&[f32]> = logits.as_slice::<f32>().chunks(vocab).collect();
        worst = worst
            .max(max_diff(rows[0], &want[pa]))
            .max(max_diff(rows[1], &want[pb]));
    }
    assert!(worst < TOLERANCE, "batched decode differs by {worst}");
}

#[test]
fn a_two_row_pass_without_a_cache_gives_the_same_logits() {
    let (path, sequence) = common::fixture("deepseek4", "F16");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let want = golden_logits();
    let n = 140;
    let rows: Vec<u32> = sequence[..n]
        .iter()
        .chain(&sequence[..n])
        .copied()
        .collect();
    let tokens = Array::from_slice(&rows, &[2, n as i32]);
    let mut ctx = ForwardCtx::uncached(&tokens);
    let logits = loaded
        .model
        .run(&mut ctx, Pass::logits(Logits::All), &mut Direct)
        .expect("forward");
    logits.eval().expect("eval");
    let vocab = logits.shape()[2] as usize;
    let worst = logits
        .as_slice::<f32>()
        .chunks(vocab)
        .enumerate()
        .map(|(i, row)| max_diff(row, &want[i % n]))
        .fold(0.0, f32::max);
    assert!(
        worst < TOLERANCE,
        "uncached two-row pass differs by {worst}"
    );
}
