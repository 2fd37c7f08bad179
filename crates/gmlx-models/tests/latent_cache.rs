//! The latent (MLA) cache and the lightning indexer of `hy_v4` across calls, against
//! llama.cpp's logits on the fixture (indexer top-k 64, 312 positions): a sequence fed in
//! pieces (single tokens and chunks that start mid-sequence, before and after the indexer
//! starts to select) gives llama.cpp's logits at every position; a prefix no longer than the
//! top-k, where every key is selected, does too; the cache holds one latent row and one
//! indexer key per position, in the layers that own an indexer only.
mod common;

use gmlx_models::cache::LayerCache;
use gmlx_models::{load, LoadOptions};
use serde_json::Value;

const TOLERANCE: f32 = 1e-3;

fn golden_logits() -> Vec<Vec<f32>> {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hy_v4");
    let golden: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("hy_v4-F16.json")).expect("golden"))
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
fn pieces_of_any_length_continue_the_latent_and_indexer_caches() {
    let (path, sequence) = common::fixture("hy_v4", "F16");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let model = &loaded.model;
    let want = golden_logits();
    // 50 tokens select every key; the pieces after position 64 select 64 of them
    let (cache, at, worst) =
        common::feed_pieces(model, &sequence, &[50, 1, 20, 1, 1, 100, 7, 200], &want);
    assert_eq!(at, sequence.len());
    assert!(worst < TOLERANCE, "pieces differ from llama.cpp by {worst}");
    let owners: Vec<bool> = cache
        .layers()
        .iter()
        .map(|l| match l {
            LayerCache::Latent(c) => {
                assert_eq!(c.len(), at as i32);
                c.nbytes() > latent_only(c)
            }
            other => panic!("hy_v4 layers keep latent caches, found {other:?}"),
        })
        .collect();
    assert_eq!(
        owners,
        [true, false, true],
        "indexer keys where indexer.types says"
    );
}

/// Bytes a latent cache without indexer keys would hold at this length: 256-position chunks
/// of one float32 row of kv rank 64 + rotary 16.
fn latent_only(c: &gmlx_models::cache::Latent) -> usize {
    let chunks = (c.len() as usize).div_ceil(256);
    chunks * 256 * (64 + 16) * 4
}

#[test]
fn a_prefix_within_the_indexer_top_k_attends_to_every_key() {
    let (path, sequence) = common::fixture("hy_v4", "F16");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let want = golden_logits();
    let ours = common::all_logits(&loaded, &sequence[..48]);
    let worst = ours
        .iter()
        .zip(&want)
        .map(|(a, b)| max_diff(a, b))
        .fold(0.0, f32::max);
    assert!(worst < TOLERANCE, "uncached prefix differs by {worst}");
}

/// `glm5-next` (KDA layers 0 and 3, latent layers 1 and 2; layer 1 scores pools of 4 keys, top
/// 16 pools plus its own incomplete pool, layer 2 reuses the choice): pieces that end inside a
/// pool, on a pool boundary, before and after position 67 (where the choice turns sparse)
/// give llama.cpp's logits at every position; only the scoring layer keeps indexer rows.
#[test]
fn pieces_continue_the_pooled_indexer_and_the_kda_state() {
    let (path, sequence) = common::fixture("glm5-next", "F16");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/glm5-next");
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("glm5-next-F16.json")).expect("golden"),
    )
    .expect("golden JSON");
    let want = common::rows(&golden["exact"]["logits"]);
    let (cache, at, worst) = common::feed_pieces(
        &loaded.model,
        &sequence,
        &[3, 1, 4, 58, 1, 1, 2, 17, 1, 100, 5, 200],
        &want,
    );
    assert_eq!(at, sequence.len());
    assert!(worst < TOLERANCE, "pieces differ from llama.cpp by {worst}");
    let kinds: Vec<&str> = cache
        .layers()
        .iter()
        .map(|l| match l {
            LayerCache::Recurrent(_) => "recurrent",
            LayerCache::Latent(c) if c.nbytes() > latent_rows(c, 64) => "latent+indexer",
            LayerCache::Latent(_) => "latent",
            other => panic!("unexpected cache {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        ["recurrent", "latent+indexer", "latent", "recurrent"]
    );
}

/// Bytes of `c`'s latent rows alone: 256-position chunks of float32 rows of `width`.
fn latent_rows(c: &gmlx_models::cache::Latent, width: usize) -> usize {
    (c.len() as usize).div_ceil(256) * 256 * width * 4
}
