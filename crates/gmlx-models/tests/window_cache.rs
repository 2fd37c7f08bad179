//! Sliding-window layers keep a rotating cache bounded by the window: on the gpt-oss fixture
//! (window 8 on layer 0, full attention on layer 1), a sequence 5.5 times the window fed in
//! chunks that straddle the ring's wrap, then one token at a time, gives the logits of one
//! pass over the whole sequence, while layer 0's cache never grows past the window.
mod common;

use gmlx_mlx::Array;
use gmlx_models::cache::LayerCache;
use gmlx_models::{load, LoadOptions, Logits};

/// Keys and values of one position: `[1, kv_heads 2, 1, head_dim 16]` float32 each.
const POSITION_BYTES: usize = 2 * 2 * 16 * 4;

#[test]
fn windowed_cache_is_bounded_by_its_window_and_exact() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("gpt-oss/gpt-oss-F16.json")).expect("golden"),
    )
    .expect("golden JSON");
    let sequence = common::ids(&golden["sequence"]);
    let loaded = load(
        dir.join("gpt-oss/gpt-oss-F16.gguf"),
        &LoadOptions::default(),
    )
    .expect("load");
    let model = &loaded.model;
    let window = 8;
    assert!(
        sequence.len() >= 4 * window,
        "the sequence must be 4x the window"
    );

    let whole = common::all_logits(&loaded, &sequence);

    let mut cache = model.new_cache();
    let LayerCache::RotatingKv(ring) = &cache.layers()[0] else {
        panic!("layer 0 is a sliding-window layer");
    };
    assert_eq!(ring.window(), window as i32);
    assert!(matches!(cache.layers()[1], LayerCache::FullKv(_)));
    let mut pieces: Vec<&[u32]> = Vec::new();
    let (chunked, single) = sequence.split_at(26);
    pieces.extend(chunked.chunks(3)); // 3 does not divide 8: chunks straddle the wrap
    pieces.extend(single.chunks(1));
    let mut at = 0;
    let mut worst = 0f32;
    for piece in pieces {
        let tokens = Array::from_slice(piece, &[1, piece.len() as i32]);
        let logits = model
            .forward(&tokens, &mut cache, Logits::All)
            .expect("forward");
        logits.eval().expect("eval");
        let vocab = logits.shape()[2] as usize;
        for (i, row) in logits.as_slice::<f32>().chunks(vocab).enumerate() {
            let d = row
                .iter()
                .zip(&whole[at + i])
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            worst = worst.max(d);
        }
        at += piece.len();
        assert_eq!(cache.position() as usize, at);
        let ring_bytes = cache.layers()[0].nbytes();
        assert!(
            ring_bytes <= window * POSITION_BYTES,
            "after {at} tokens the windowed layer holds {ring_bytes} bytes, more than {window} positions"
        );
    }
    assert!(
        worst <= 1e-4,
        "chunked and cached logits differ from one pass by {worst}"
    );
    let full_bytes = cache.layers()[1].nbytes();
    assert!(
        full_bytes >= sequence.len() * POSITION_BYTES,
        "the full layer holds every position ({full_bytes} bytes)"
    );
}
