//! `Generation` runs the same decode step as the server: greedy pieces carry their
//! log-probability when asked, the chosen token is the most likely one, and `ignore_eos`
//! runs to the budget.
use gmlx_models::{default_model, load, FinishReason, GenerateOptions, Generation, LoadOptions};

#[test]
fn greedy_pieces_carry_logprobs_and_ignore_eos_runs_to_the_budget() {
    let loaded = load(
        default_model::fetch().expect("model"),
        &LoadOptions::default(),
    )
    .expect("load");
    let prompt = gmlx_models::chat::user_prompt(&loaded.tokenizer, None, "Hi").expect("prompt");
    let options = GenerateOptions {
        max_tokens: 40,
        logprobs: Some(3),
        ..Default::default()
    };
    let mut generation =
        Generation::new(&loaded.model, &loaded.tokenizer, &prompt, options).expect("generation");
    let pieces: Vec<_> = generation
        .by_ref()
        .collect::<Result<_, _>>()
        .expect("pieces");
    assert_eq!(generation.finish_reason(), Some(FinishReason::Eos));
    for p in &pieces {
        let lp = p.logprob.as_ref().expect("a logprob per piece");
        assert_eq!(lp.top.len(), 3);
        assert!(lp.logprob <= 0.0);
        // greedy: the chosen token is the most likely, and the top list is sorted
        assert!((lp.top[0].2 - lp.logprob).abs() < 1e-6, "{lp:?}");
        assert!(lp.top.windows(2).all(|w| w[0].2 >= w[1].2));
    }
    let n = pieces.len();
    let options = GenerateOptions {
        max_tokens: n + 5,
        ignore_eos: true,
        ..Default::default()
    };
    let mut generation =
        Generation::new(&loaded.model, &loaded.tokenizer, &prompt, options).expect("generation");
    let longer: Vec<_> = generation
        .by_ref()
        .collect::<Result<_, _>>()
        .expect("pieces");
    assert_eq!(longer.len(), n + 5);
    assert_eq!(generation.finish_reason(), Some(FinishReason::Length));
    assert_eq!(
        longer[..n - 1],
        pieces[..n - 1]
            .iter()
            .map(|p| gmlx_models::Piece {
                logprob: None,
                ..p.clone()
            })
            .collect::<Vec<_>>()[..]
    );
}
