//! Streamed experts against resident ones on the MoE fixtures: with an arena of fewer slots
//! than experts (and with every slot emptied before each step), a long greedy generation gives
//! bitwise the logits of the resident model, step by step.
mod common;

use common::{fixture, greedy_logits, streamed};
use gmlx_models::{load, LoadOptions};
use gmlx_stream::StreamOptions;

/// Tokens decoded after the prompt.
const STEPS: usize = 40;

#[test]
fn streamed_experts_give_the_resident_logits() {
    for (arch, codec) in [
        ("qwen3moe", "Q4_K_M"),
        ("gpt-oss", "MXFP4_MOE"),
        ("qwen35moe", "Q8_0"),
        ("hy_v4", "Q4_K_M"),
        ("deepseek4", "MXFP4_MOE"),
        ("kimi-k3", "MXFP4_MOE"),
        ("glm5-next", "MXFP4_MOE"),
        ("qwen4exp", "Q8_0"),
    ] {
        let (path, sequence) = fixture(arch, codec);
        let prompt = &sequence[..12];
        let resident = load(&path, &LoadOptions::default()).expect("load");
        let want = greedy_logits(&resident, prompt, STEPS);
        for flush in [false, true] {
            let (loaded, experts) = streamed(
                &path,
                StreamOptions {
                    slots: Some(2), // of 4 experts, top-2 routing
                    flush_every_step: flush,
                    ..StreamOptions::default()
                },
            );
            let got = greedy_logits(&loaded, prompt, STEPS);
            let report = experts.report().expect("a report after the load");
            for (step, (a, b)) in want.iter().zip(&got).enumerate() {
                assert!(
                    a == b,
                    "{arch} {codec} (flush {flush}): logits differ at step {step}"
                );
            }
            let layers = report.stats.layers.len() as u64;
            assert!(layers > 0, "{arch}: no MoE layer streamed");
            assert_eq!(report.slots, 2);
            assert!(
                report.stats.transient_steps >= layers,
                "the prefill reads outside the arena"
            );
            assert!(
                report.evictions() > 0,
                "{arch}: no eviction with 2 slots of 4"
            );
            if flush {
                // every decode step after the first evicts what the step before bound
                let decode_steps = (STEPS as u64 - 1) * layers;
                assert!(
                    report.evictions() >= 2 * (decode_steps - layers),
                    "{arch}: {} evictions over {decode_steps} layer steps",
                    report.evictions()
                );
                assert_eq!(report.hit_rate(), Some(0.0));
            }
            println!("{arch} {codec} flush={flush}: {report}");
        }
    }
}

/// An arena of one slot under top-2 routing never fits a step: every step reads its experts
/// outside the arena, and the logits are still the resident ones.
#[test]
fn steps_that_need_more_experts_than_slots_read_outside_the_arena() {
    let (path, sequence) = fixture("qwen3moe", "Q8_0");
    let prompt = &sequence[..6];
    let resident = load(&path, &LoadOptions::default()).expect("load");
    let want = greedy_logits(&resident, prompt, 8);
    let (loaded, experts) = streamed(
        &path,
        StreamOptions {
            slots: Some(1),
            ..StreamOptions::default()
        },
    );
    assert_eq!(greedy_logits(&loaded, prompt, 8), want);
    let report = experts.report().expect("report");
    assert_eq!(report.hit_rate(), None, "no step fit the arena");
    assert_eq!(
        report.stats.transient_steps,
        8 * report.stats.layers.len().max(2) as u64
    );
}
