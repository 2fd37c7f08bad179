//! Reading ahead (the next decode step submitted before the tokens of the step before are read)
//! changes when the host learns the tokens, never which: the same concurrent requests (seeded
//! draws, greedy, a stop string that ends a row while the others go on, a row with a
//! different budget) give the same tokens with it as without.
mod common;

use gmlx_models::SamplingParams;
use gmlx_serve::engine::{Event, ValidRequest};
use gmlx_serve::ReadAhead;
use gmlx_tokenizer::Tokenizer;

/// Each request's tokens, in the order streamed, and how it finished; the steps read ahead.
fn run(read_ahead: ReadAhead) -> (Vec<(Vec<u32>, String)>, u64) {
    let (engine, tokenizer) = common::engine(4, read_ahead);
    let receivers: Vec<_> = requests(&tokenizer)
        .into_iter()
        .map(|r| engine.submit(r).expect("submit"))
        .collect();
    let mut out = Vec::new();
    for mut rx in receivers {
        let mut tokens = Vec::new();
        let finish = loop {
            match rx.blocking_recv() {
                Some(Event::Token(t)) => tokens.push(t.token),
                Some(Event::Done(d)) => break d.finish.as_str().to_owned(),
                other => panic!("unexpected {other:?}"),
            }
        };
        out.push((tokens, finish));
    }
    let ahead = engine.stats().read_ahead_steps;
    engine.shutdown();
    (out, ahead)
}

fn requests(tokenizer: &Tokenizer) -> Vec<ValidRequest> {
    let request = |id: &str, text: &str, max_tokens: usize, sampling: SamplingParams| {
        common::request(tokenizer, id, text, max_tokens, sampling)
    };
    let seeded = |seed| SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        seed: Some(seed),
        ..SamplingParams::default()
    };
    let mut stopping = request("stop", "Write a sentence about the sea.", 40, seeded(7));
    stopping.stop = vec![" a".to_owned()];
    vec![
        request("seeded", "Once upon a time", 40, seeded(1)),
        request(
            "greedy",
            "The capital of France is",
            32,
            SamplingParams::default(),
        ),
        stopping,
        request("short", "List three colours:", 9, seeded(3)),
    ]
}

#[test]
fn reading_ahead_gives_the_same_tokens() {
    let (ahead, ahead_steps) = run(ReadAhead::Always);
    let (plain, plain_steps) = run(ReadAhead::Never);
    assert_eq!(plain_steps, 0);
    assert!(ahead_steps > 0, "no step was read ahead");
    assert_eq!(ahead, plain);
    // the stop string ended its row while the others went on
    assert_eq!(ahead[2].1, "stop", "{:?}", ahead[2]);
    assert!(ahead[2].0.len() < 40);
    assert_eq!(ahead[0].0.len(), 40);
}
