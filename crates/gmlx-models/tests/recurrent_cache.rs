//! The recurrent state of the hybrid gated-DeltaNet and KDA models across calls: on the
//! `qwen3next` fixture (layers 0-1 DeltaNet, layer 2 attention) and the `kimi-k3` one (layers
//! 0, 1 and 3 KDA, layer 2 latent attention, attention residuals), a sequence fed in pieces of
//! 1, 7, 64, 65 or 16, 17 tokens (chunked scans that start mid-chunk, single-token
//! recurrences between them) gives the logits of one pass over the whole sequence; the state
//! stays float32 and its size does not grow; under bfloat16 activations the state is still
//! float32.
mod common;

use gmlx_mlx::{Array, Dtype};
use gmlx_models::cache::LayerCache;
use gmlx_models::{load, LoadOptions, Logits};

/// Bytes and dtype of layer `l`'s delta-rule state.
fn state_of(cache: &gmlx_models::cache::SequenceCache, l: usize) -> (usize, Dtype) {
    let LayerCache::Recurrent(r) = &cache.layers()[l] else {
        panic!("layer {l} is a DeltaNet layer");
    };
    let state = r.state.as_ref().expect("a state after a pass");
    (r.nbytes(), state.dtype())
}

#[test]
fn pieces_of_any_length_continue_the_recurrent_state_exactly() {
    pieces_continue_the_state("qwen3next", &[1, 7, 64, 1, 65, 3, 100, 1, 1], |c| {
        matches!(c.layers()[2], LayerCache::FullKv(_))
    });
}

#[test]
fn pieces_straddling_kda_chunks_continue_its_state_exactly() {
    pieces_continue_the_state("kimi-k3", &[1, 7, 16, 1, 17, 3, 15, 33, 100, 1, 1], |c| {
        matches!(c.layers()[2], LayerCache::Latent(_))
            && matches!(c.layers()[3], LayerCache::Recurrent(_))
    });
}

/// `qwen4exp`: the PLE hash's token history and convolution history (layer 0), the DeltaNet
/// state and the QSA indexer's keys (layer 1) across pieces; the prompt has end-of-sequence
/// tokens at positions 15, 74, 251 and 252, so pieces also start right after one.
#[test]
fn pieces_continue_the_ple_history_and_the_qsa_keys_exactly() {
    pieces_continue_the_state("qwen4exp", &[1, 2, 13, 1, 60, 3, 67, 1, 100, 1, 1], |c| {
        matches!(c.layers()[0], LayerCache::Recurrent(_))
            && matches!(c.layers()[1], LayerCache::FullKv(_))
    });
}

fn pieces_continue_the_state(
    arch: &str,
    pieces: &[usize],
    layout: impl Fn(&gmlx_models::cache::SequenceCache) -> bool,
) {
    let (path, sequence) = common::fixture(arch, "F16");
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let model = &loaded.model;
    let whole = common::all_logits(&loaded, &sequence);

    let mut cache = model.new_cache();
    assert!(layout(&cache), "{arch}: unexpected cache layout");
    let mut at = 0;
    let mut worst = 0f32;
    let mut sizes = Vec::new();
    for &len in pieces {
        let piece = &sequence[at..(at + len).min(sequence.len())];
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
        let (bytes, dtype) = state_of(&cache, 0);
        assert_eq!(dtype, Dtype::Float32);
        sizes.push(bytes);
    }
    assert_eq!(at, pieces.iter().sum::<usize>().min(sequence.len()));
    assert!(
        worst < 1e-4,
        "{arch}: pieces differ from one pass by {worst}"
    );
    assert!(
        sizes.windows(2).all(|w| w[0] == w[1]),
        "the recurrent state changed size: {sizes:?}"
    );
}

#[test]
fn the_state_stays_float32_under_bfloat16_activations() {
    let (path, sequence) = common::fixture("qwen35", "Q8_0");
    let options = LoadOptions {
        dtype: Dtype::Bfloat16,
        ..LoadOptions::default()
    };
    let loaded = load(&path, &options).expect("load");
    let mut cache = loaded.model.new_cache();
    let tokens = Array::from_slice(&sequence[..100], &[1, 100]);
    let logits = loaded
        .model
        .forward(&tokens, &mut cache, Logits::Last)
        .expect("forward");
    logits.eval().expect("eval");
    for layer in [0, 1] {
        assert_eq!(state_of(&cache, layer).1, Dtype::Float32, "layer {layer}");
    }
    // the bfloat16 run still predicts what the float32 one does at the end of the prefix
    let exact = common::all_logits(
        &load(&path, &LoadOptions::default()).expect("load"),
        &sequence[..100],
    );
    let ours = logits.as_dtype(Dtype::Float32).expect("f32");
    let ours = ours.flatten(None, None).expect("flatten");
    ours.eval().expect("eval");
    assert_eq!(
        gmlx_models::sample::argmax(ours.as_slice::<f32>()),
        gmlx_models::sample::argmax(&exact[99]),
    );
}

/// The KDA and Qwen4 experimental models under bfloat16 activations: the recurrent state stays
/// float32, the logits come back finite, and the prediction at the end of a 100-token prefix is
/// the float32 run's where that run's top-1 leads by at least 0.5.
#[test]
fn the_new_hybrids_run_under_bfloat16() {
    for arch in ["kimi-k3", "glm5-next", "qwen4exp"] {
        let (path, sequence) = common::fixture(arch, "Q8_0");
        let options = LoadOptions {
            dtype: Dtype::Bfloat16,
            ..LoadOptions::default()
        };
        let loaded = load(&path, &options).expect("load");
        let mut cache = loaded.model.new_cache();
        let tokens = Array::from_slice(&sequence[..100], &[1, 100]);
        let logits = loaded
            .model
            .forward(&tokens, &mut cache, Logits::Last)
            .expect("forward");
        assert_eq!(state_of(&cache, 0).1, Dtype::Float32, "{arch}");
        let ours = logits
            .as_dtype(Dtype::Float32)
            .and_then(|l| l.flatten(None, None))
            .expect("f32");
        ours.eval().expect("eval");
        let ours = ours.as_slice::<f32>();
        assert!(
            ours.iter().all(|v| v.is_finite()),
            "{arch}: non-finite logits"
        );
        let exact = common::all_logits(
            &load(&path, &LoadOptions::default()).expect("load"),
            &sequence[..100],
        );
        let row = &exact[99];
        let top = gmlx_models::sample::argmax(row);
        let runner_up = row
            .iter()
            .enumerate()
            .filter(|&(i, _)| i as u32 != top)
            .map(|(_, &v)| v)
            .fold(f32::NEG_INFINITY, f32::max);
        eprintln!(
            "{arch}: float32 top-1 leads by {}",
            row[top as usize] - runner_up
        );
        if row[top as usize] - runner_up >= 0.5 {
            assert_eq!(gmlx_models::sample::argmax(ours), top, "{arch}");
        }
    }
}
