//! A long prompt arriving while a stream decodes is prefilled a chunk per step: the running
//! stream keeps getting tokens until the new request's first token comes.
mod common;

use std::time::{Duration, Instant};

use gmlx_models::SamplingParams;
use gmlx_serve::engine::Event;
use gmlx_serve::ReadAhead;
use tokio::sync::mpsc::error::TryRecvError;

#[test]
fn running_streams_keep_streaming_while_a_long_prompt_prefills() {
    let (engine, tokenizer) = common::engine(4, ReadAhead::default());
    let request = |id: &str, text: &str, max_tokens: usize| {
        common::request(&tokenizer, id, text, max_tokens, SamplingParams::default())
    };
    let mut running = engine
        .submit(request("running", "Tell me a long story.", 400))
        .expect("submit");
    match running.blocking_recv() {
        Some(Event::Token(_)) => {}
        other => panic!("expected a first token, got {other:?}"),
    }

    let long_text = "The quick brown fox jumps over the lazy dog. ".repeat(60);
    let long = request("long", &long_text, 1);
    let chunks = long.prompt.len().div_ceil(128);
    assert!(chunks >= 4, "{} prompt tokens", long.prompt.len());
    let mut newcomer = engine.submit(long).expect("submit");

    let mut tokens_meanwhile = 0;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        match running.try_recv() {
            Ok(Event::Token(_)) => tokens_meanwhile += 1,
            Ok(other) => panic!("the running stream ended early: {other:?}"),
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => panic!("the running stream was dropped"),
        }
        match newcomer.try_recv() {
            Ok(Event::Token(_)) => break,
            Ok(other) => panic!("expected the newcomer's first token, got {other:?}"),
            Err(TryRecvError::Empty) => std::thread::sleep(Duration::from_millis(1)),
            Err(TryRecvError::Disconnected) => panic!("the newcomer was dropped"),
        }
        assert!(
            Instant::now() < deadline,
            "no first token within 10 minutes"
        );
    }
    // one decode step of the running stream after each prompt chunk but the last
    assert!(
        tokens_meanwhile + 1 >= chunks,
        "{tokens_meanwhile} tokens streamed during a {chunks}-chunk prefill"
    );
    // cancel the running stream and free the model before the process exits
    engine.shutdown();
}
