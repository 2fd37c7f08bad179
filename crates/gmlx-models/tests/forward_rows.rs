//! Continuous batching: B sequences of different lengths decoded together in one
//! `forward_rows` step give the same logits as each decoded alone.
#![allow(clippy::unwrap_used)]
use gmlx_mlx::Array;
use gmlx_models::{default_model, load, LoadOptions, Logits};

fn host(a: &Array) -> Vec<f32> {
    let flat = a.flatten(None, None).unwrap();
    flat.eval().unwrap();
    flat.as_slice::<f32>().to_vec()
}

#[test]
fn rows_decoded_together_match_each_row_alone() {
    let loaded = load(default_model::fetch().unwrap(), &LoadOptions::default()).unwrap();
    let model = &loaded.model;
    let prompts: [&[u32]; 3] = [&[1, 2, 3, 4, 5, 6, 7], &[42, 43], &[100, 200, 300, 400]];
    let prefill = || {
        prompts
            .iter()
            .map(|p| {
                let mut cache = model.new_cache();
                let tokens = Array::from_slice(p, &[1, p.len() as i32]);
                model.forward(&tokens, &mut cache, Logits::Last).unwrap();
                cache
            })
            .collect::<Vec<_>>()
    };
    let mut alone = prefill();
    let mut together = prefill();
    // two steps, so the second one reads what the batched step appended
    for step in [[11u32, 12, 13], [21, 22, 23]] {
        let solo: Vec<Vec<f32>> = alone
            .iter_mut()
            .zip(step)
            .map(|(caches, t)| {
                let l = model
                    .forward(&Array::from_slice(&[t], &[1, 1]), caches, Logits::Last)
                    .unwrap();
                host(&l)
            })
            .collect();
        let mut rows: Vec<&mut _> = together.iter_mut().collect();
        let batched = model.forward_rows(&step, &mut rows).unwrap();
        let vocab = model.config().vocab as usize;
        assert_eq!(batched.shape(), &[3, vocab as i32]);
        let batched = host(&batched);
        for (b, solo) in solo.iter().enumerate() {
            let row = &batched[b * vocab..(b + 1) * vocab];
            let worst = row
                .iter()
                .zip(solo)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(worst <= 1e-5, "row {b}: max |diff| {worst}");
        }
    }
    for (a, t) in alone.iter().zip(&together) {
        assert_eq!(a.position(), t.position());
    }
}
