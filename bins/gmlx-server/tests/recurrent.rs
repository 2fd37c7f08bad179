//! Serving a hybrid model whose recurrent layers keep a state per sequence (the `qwen35moe`
//! fixture: gated DeltaNet and attention layers, MoE with a shared expert): batched decode
//! rows carry their own state, so seeded requests give what they give alone.
mod util;

use serde_json::json;
use util::{post, Server};

fn fixture() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/qwen35moe/qwen35moe-Q8_0.gguf");
    path.to_str().expect("utf-8 path").to_owned()
}

fn sampled(server: &Server, i: u64) -> String {
    let body = json!({
        "prompt": format!("The capital of France is Paris. def main(): return {i}"),
        "max_tokens": 24,
        "temperature": 0.9,
        "seed": 1000 + i,
        "ignore_eos": true,
    });
    let reply = post(&server.addr, "/v1/completions", &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned()
}

#[test]
fn seeded_requests_to_a_recurrent_model_match_their_solo_runs_under_concurrency() {
    let model = fixture();
    let server = Server::start_raw(&[&model, "--port", "0", "--batch-width", "8"]);
    let solo: Vec<String> = (0..6).map(|i| sampled(&server, i)).collect();
    let distinct: std::collections::HashSet<&String> = solo.iter().collect();
    assert!(
        distinct.len() > 1,
        "every seed gave the same text: {solo:?}"
    );
    let server = std::sync::Arc::new(server);
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let server = server.clone();
            std::thread::spawn(move || sampled(&server, i))
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        let together = handle.join().expect("join");
        assert_eq!(
            solo[i],
            together,
            "seed {} differs under concurrency",
            1000 + i
        );
    }
}

/// The same model with its routed experts streamed from the file (`--stream-experts`)
/// answers seeded requests, sent together, with the resident model's solo texts.
#[test]
fn a_streamed_moe_model_serves_what_the_resident_one_does() {
    let model = fixture();
    let resident = Server::start_raw(&[&model, "--port", "0"]);
    let solo: Vec<String> = (0..4).map(|i| sampled(&resident, i)).collect();
    drop(resident);
    let streamed = std::sync::Arc::new(Server::start_raw(&[
        &model,
        "--port",
        "0",
        "--batch-width",
        "4",
        "--stream-experts",
        "--expert-arena-mb",
        "1",
    ]));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let server = streamed.clone();
            std::thread::spawn(move || sampled(&server, i))
        })
        .collect();
    for (i, handle) in handles.into_iter().enumerate() {
        assert_eq!(solo[i], handle.join().expect("join"), "seed {}", 1000 + i);
    }
}
