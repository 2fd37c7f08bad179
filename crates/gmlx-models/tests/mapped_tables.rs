//! Tables a GGUF carries for lookups, read from the memory map: DeepSeek-V4's untied token
//! embedding and its hash-routing tables (`ffn_gate_tid2eid`) stay in the file, not in memory,
//! and a pass still pending when the model is unloaded (its maps dropped) evaluates to
//! llama.cpp's logits without hanging: a lookup copies its rows out before it returns, so no read
//! is ever queued against a map. A watchdog fails the test if anything waits.
mod common;

use std::sync::mpsc;
use std::time::Duration;

use gmlx_mlx::Array;
use gmlx_models::blocks::decoder::{Embedding, Ffn};
use gmlx_models::{load, LoadOptions, Logits};
use serde_json::Value;

#[test]
fn lookup_tables_are_mapped_and_a_pending_pass_outlives_the_model() {
    let (done, finished) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if finished.recv_timeout(Duration::from_secs(120)).is_err() {
            eprintln!("a pass waited on an unloaded model's tables for 120 s");
            std::process::exit(1);
        }
    });

    let (path, sequence) = common::fixture("deepseek4", "F16");
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(path.with_extension("json")).expect("golden"),
    )
    .expect("golden JSON");
    let want = common::rows(&golden["exact"]["logits"]);
    let loaded = load(&path, &LoadOptions::default()).expect("load");
    let decoder = loaded.model.decoder();
    // on a GPU the table stays resident (a mapped row would need each token id on the host)
    let on_cpu = loaded.device == gmlx_mlx::device::DeviceKind::Cpu;
    assert_eq!(
        matches!(decoder.token_embd, Embedding::Mapped(_)),
        on_cpu,
        "the untied embedding is read from the file on the CPU only"
    );
    let hashed = decoder
        .layers
        .iter()
        .filter(|l| matches!(&l.ffn, Ffn::Moe(m) if m.router.hash.is_some()))
        .count();
    assert_eq!(hashed, 2, "hash_layer_count 2: two mapped routing tables");

    let n = 80;
    let tokens = Array::from_slice(&sequence[..n], &[1, n as i32]);
    let mut cache = loaded.model.new_cache();
    let logits = loaded
        .model
        .forward(&tokens, &mut cache, Logits::All)
        .expect("forward");
    drop(cache);
    drop(loaded); // unmaps the tables; the pass is not evaluated yet
    logits.eval().expect("eval after unload");
    let vocab = logits.shape()[2] as usize;
    let worst = logits
        .as_slice::<f32>()
        .chunks(vocab)
        .zip(&want)
        .map(|(a, b)| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        })
        .fold(0f32, f32::max);
    assert!(worst < 1e-3, "after unloading, the pass differs by {worst}");

    done.send(()).expect("watchdog");
    watchdog.join().expect("watchdog");
}
