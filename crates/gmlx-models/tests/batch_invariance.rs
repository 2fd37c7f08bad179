//! Batch-invariant mode on the models' own weights: with `GMLX_BATCH_INVARIANT` on, one
//! sequence's router scores and expert choices, and its gated-DeltaNet decay and strength
//! gates, are bitwise the same computed one row at a time, alone, and inside products of 7,
//! 64 and 512 rows (a prefill chunk of another size, a decode batch). Its own test binary:
//! the mode is process-wide.
mod common;

use gmlx_mlx::{ops, slicing, Array};
use gmlx_models::blocks::decoder::Ffn;
use gmlx_models::blocks::delta_net::DeltaGates;
use gmlx_models::blocks::linear::Linear;
use gmlx_models::blocks::mixer::Mixer;
use gmlx_models::{invariance, load, LoadOptions};

/// Rows of the sequence under test.
const ROWS: i32 = 5;

fn values(a: &Array) -> Vec<u32> {
    let a = a.as_dtype(gmlx_mlx::Dtype::Float32).expect("f32");
    a.eval().expect("eval");
    a.as_slice::<f32>().iter().map(|v| v.to_bits()).collect()
}

/// `x`'s rows of `f` over `x` placed after `before` rows of `filler`, with more of `filler`
/// after it up to `total` rows.
fn rows_inside(
    f: &dyn Fn(&Array) -> Array,
    x: &Array,
    filler: &Array,
    before: i32,
    total: i32,
) -> Array {
    let width = x.shape()[1];
    let head = slicing::slice(filler, &[0, 0], &[before, width]).expect("slice");
    let tail = slicing::slice(filler, &[before, 0], &[total - ROWS, width]).expect("slice");
    let all = ops::concatenate(&[head, x.clone(), tail], 0).expect("concat");
    let y = f(&all);
    let cols = y.shape()[1];
    slicing::slice(&y, &[before, 0], &[before + ROWS, cols]).expect("slice")
}

/// `f` on the sequence one row at a time, alone, and inside 7, 64 and 512 rows (at the start,
/// in the middle, at the end): all bitwise equal. Returns how many products were compared.
fn check(what: &str, f: &dyn Fn(&Array) -> Array, x: &Array, filler: &Array) -> usize {
    let width = x.shape()[1];
    let one_by_one: Vec<Array> = (0..ROWS)
        .map(|r| f(&slicing::slice(x, &[r, 0], &[r + 1, width]).expect("row")))
        .collect();
    let reference = values(&ops::concatenate(&one_by_one, 0).expect("concat"));
    let mut compared = 0;
    for total in [ROWS, 7, 64, 512] {
        for before in [0, (total - ROWS) / 2, total - ROWS] {
            let got = values(&rows_inside(f, x, filler, before, total));
            assert!(
                got == reference,
                "{what}: the sequence's rows differ inside a product of {total} rows after \
                 {before} others"
            );
            compared += 1;
        }
    }
    compared
}

/// Hidden rows of real activations: the embeddings of `tokens` through `norm`.
fn rows_of(
    model: &gmlx_models::Model,
    tokens: &[u32],
    norm: &Option<gmlx_models::blocks::norm::RmsNorm>,
) -> Array {
    let ids = Array::from_slice(tokens, &[1, tokens.len() as i32]);
    let h = model.decoder().embed(&ids).expect("embed");
    let h = norm
        .as_ref()
        .expect("these fixtures' blocks have norms")
        .forward(&h)
        .expect("norm");
    let width = h.shape()[2];
    h.reshape(&[tokens.len() as i32, width]).expect("reshape")
}

#[test]
fn router_scores_and_decay_gates_do_not_depend_on_the_other_rows() {
    invariance::set(true);
    for (arch, codec) in [("qwen35moe", "Q4_K_M"), ("qwen3next", "Q8_0")] {
        let (path, sequence) = common::fixture(arch, codec);
        let loaded = load(&path, &LoadOptions::default()).expect("load");
        let model = &loaded.model;
        let ours = &sequence[..ROWS as usize];
        // other requests' rows: the rest of the golden sequence, cycled to 512 rows
        let others: Vec<u32> = sequence[ROWS as usize..]
            .iter()
            .cycle()
            .take(512)
            .copied()
            .collect();
        let (mut routers, mut gates) = (0, 0);
        for (l, layer) in model.layers().iter().enumerate() {
            if let Ffn::Moe(moe) = &layer.ffn {
                let x = rows_of(model, ours, &layer.ffn_norm);
                let filler = rows_of(model, &others, &layer.ffn_norm);
                let logits = |x: &Array| moe.router.ffn_gate_inp.forward_gate(x).expect("router");
                routers += check(&format!("{arch} layer {l} router"), &logits, &x, &filler);
                let weights = |x: &Array| moe.router.route(x).expect("route").1;
                check(
                    &format!("{arch} layer {l} routing weights"),
                    &weights,
                    &x,
                    &filler,
                );
                let choice = |x: &Array| moe.router.route(x).expect("route").0;
                check(
                    &format!("{arch} layer {l} expert choice"),
                    &choice,
                    &x,
                    &filler,
                );
            }
            if let Mixer::GatedDeltaNet(net) = &layer.mixer {
                let x = rows_of(model, ours, &layer.attn_norm);
                let filler = rows_of(model, &others, &layer.attn_norm);
                let linears: Vec<&Linear> = match &net.gates {
                    DeltaGates::Split {
                        ssm_beta,
                        ssm_alpha,
                    } => vec![ssm_beta, ssm_alpha],
                    DeltaGates::Fused { ssm_ba } => vec![ssm_ba],
                };
                for linear in linears {
                    let gate = |x: &Array| linear.forward_gate(x).expect("gate");
                    gates += check(&format!("{arch} {}", linear.name()), &gate, &x, &filler);
                }
            }
        }
        assert!(routers > 0, "{arch}: no router was checked");
        assert!(gates > 0, "{arch}: no decay gate was checked");
    }
}
