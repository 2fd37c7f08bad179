//! Route record and replay, expert mass and the expert probe on the MoE fixtures.
mod common;

use std::rc::Rc;

use common::{fixture, forced_logits};
use gmlx_models::{load, LoadOptions};
use gmlx_stream::{ExpertMass, ExpertProbe, RouteRecorder, RouteReplayer};

const PREFILL: usize = 10;
const TOKENS: usize = 24;

#[test]
fn a_replayed_record_gives_the_recorded_logits_and_its_experts() {
    let (path, sequence) = fixture("qwen3moe", "Q4_K_M");
    let tokens = &sequence[..TOKENS];
    let mut recorded_model = load(&path, &LoadOptions::default()).expect("load").model;
    let recorder = Rc::new(RouteRecorder::new());
    assert_eq!(
        recorded_model.add_route_hook(recorder.clone()),
        2,
        "MoE layers"
    );
    let recorded = forced_logits(&recorded_model, tokens, PREFILL).expect("record");
    assert_eq!(
        recorder.routes().len(),
        2 * TOKENS,
        "a route per layer and position"
    );
    let dir = std::env::temp_dir().join(format!("gmlx-routes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("routes.json");
    recorder.save(&file).expect("save");

    // the same tokens replayed: the recorded logits, bit for bit
    let replayer = Rc::new(RouteReplayer::from_file(&file).expect("read"));
    let mut model = load(&path, &LoadOptions::default()).expect("load").model;
    model.add_route_hook(replayer.clone());
    let used = Rc::new(RouteRecorder::new());
    model.add_route_hook(used.clone());
    assert_eq!(
        forced_logits(&model, tokens, PREFILL).expect("replay"),
        recorded
    );

    // other tokens at the same positions: the record's experts, not the router's choice
    let other: Vec<u32> = sequence[sequence.len() - TOKENS..]
        .iter()
        .rev()
        .copied()
        .collect();
    let used = Rc::new(RouteRecorder::new());
    let mut model = load(&path, &LoadOptions::default()).expect("load").model;
    model.add_route_hook(replayer.clone());
    model.add_route_hook(used.clone());
    forced_logits(&model, &other, PREFILL).expect("replay other tokens");
    assert_eq!(used.routes(), recorder.routes());
    let mut free = load(&path, &LoadOptions::default()).expect("load").model;
    let chosen = Rc::new(RouteRecorder::new());
    free.add_route_hook(chosen.clone());
    forced_logits(&free, &other, PREFILL).expect("free run");
    assert_ne!(
        chosen.routes(),
        recorder.routes(),
        "the router alone picks others here"
    );

    // a replay past the recorded positions is refused, naming the position
    let longer: Vec<u32> = sequence[..TOKENS + 1].to_vec();
    let mut model = load(&path, &LoadOptions::default()).expect("load").model;
    model.add_route_hook(replayer);
    let err = forced_logits(&model, &longer, PREFILL)
        .expect_err("a position without a route")
        .to_string();
    assert!(
        err.contains("no recorded route") && err.contains(&format!("position {TOKENS}")),
        "{err}"
    );

    // a record naming an expert the model does not have (another model's) is refused
    let text = std::fs::read_to_string(&file).expect("read");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("json");
    json["routes"][3]["experts"][1] = serde_json::json!(9);
    let bad = dir.join("other-model.json");
    std::fs::write(&bad, json.to_string()).expect("write");
    let mut model = load(&path, &LoadOptions::default()).expect("load").model;
    model.add_route_hook(Rc::new(RouteReplayer::from_file(&bad).expect("read")));
    let err = forced_logits(&model, tokens, PREFILL)
        .expect_err("expert 9 of 4")
        .to_string();
    assert!(err.contains("expert 9 recorded, the layer has 4"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn expert_mass_keeps_the_first_experts_and_the_probe_changes_nothing() {
    for (arch, codec) in [
        ("qwen3moe", "Q8_0"),
        ("gpt-oss", "MXFP4_MOE"),
        ("qwen35moe", "Q8_0"),
        ("hy_v4", "Q4_K_M"),
        ("deepseek4", "MXFP4_MOE"),
        ("kimi-k3", "MXFP4_MOE"),
        ("glm5-next", "MXFP4_MOE"),
        ("qwen4exp", "Q8_0"),
    ] {
        let (path, sequence) = fixture(arch, codec);
        let tokens = &sequence[..TOKENS];
        let plain_model = load(&path, &LoadOptions::default()).expect("load").model;
        let plain = forced_logits(&plain_model, tokens, PREFILL).expect("plain");

        // P = 1 keeps everything
        let mut model = load(&path, &LoadOptions::default()).expect("load").model;
        model.add_route_hook(Rc::new(ExpertMass::new(1.0).expect("mass")));
        assert_eq!(forced_logits(&model, tokens, PREFILL).expect("P=1"), plain);

        // a tiny P keeps the first expert only: the other slot repeats it
        let mut model = load(&path, &LoadOptions::default()).expect("load").model;
        let layers = model.add_route_hook(Rc::new(ExpertMass::new(0.01).expect("mass")));
        let used = Rc::new(RouteRecorder::new());
        model.add_route_hook(used.clone());
        let truncated = forced_logits(&model, tokens, PREFILL).expect("P=0.01");
        assert!(
            used.routes().values().all(|e| e.iter().all(|&x| x == e[0])),
            "{arch}"
        );
        assert_ne!(
            truncated, plain,
            "{arch}: dropping experts changes the logits"
        );

        // the probe is lossless and counts every token of every MoE layer
        let mut model = load(&path, &LoadOptions::default()).expect("load").model;
        let probe = Rc::new(ExpertProbe::new());
        model.add_route_hook(probe.clone());
        assert_eq!(
            forced_logits(&model, tokens, PREFILL).expect("probe"),
            plain,
            "{arch}"
        );
        let [prefill, decode] = probe.phases();
        assert_eq!(prefill.rows, (PREFILL * layers) as u64, "{arch}");
        assert_eq!(decode.rows, ((TOKENS - PREFILL) * layers) as u64, "{arch}");
        for phase in [prefill, decode] {
            assert!(
                phase.needed.windows(2).all(|w| w[0] <= w[1]),
                "{arch}: {phase:?}"
            );
            assert!(phase.needed[6] <= phase.picked && phase.needed[0] >= phase.rows);
            assert!(
                phase.dropped.windows(2).all(|w| w[0] >= w[1]),
                "{arch}: {phase:?}"
            );
        }
        println!("{arch}: {probe}");
    }
}
