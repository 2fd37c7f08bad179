//! Gradient correctness on the default model (SmolLM2-135M-Instruct Q4_1, a real quantized
//! file): the LoRA gradients MLX computes through `quantized_matmul` equal those through a
//! dense matmul of the dequantized weights, only the LoRA arrays get gradients, and gradient
//! checkpointing does not change them.
use gmlx_mlx::{Array, QuantWeight, Storage};
use gmlx_models::{load, LoadOptions, Model};
use gmlx_train::data::Example;
use gmlx_train::lora::LoraSet;
use gmlx_train::step::{Batch, ForwardOptions};
use gmlx_train::{loss_and_grads, LoraConfig};

fn model() -> Model {
    let path = gmlx_models::default_model::fetch().expect("the default model");
    load(&path, &LoadOptions::default()).expect("load").model
}

/// Two rows of different lengths (so padding and weights matter).
fn batch() -> Batch {
    let a = Example {
        ids: vec![504, 3575, 282, 4649, 314, 7042, 30, 198, 504],
        target: vec![true; 9],
        soft: Vec::new(),
    };
    let b = Example {
        ids: vec![1, 2, 3, 4, 5, 6],
        target: vec![false, false, true, true, true, true],
        soft: Vec::new(),
    };
    Batch::new(&[&a, &b])
}

/// A LoRA set with non-zero `b`, so every parameter has a non-trivial gradient.
fn lora_set(model: &Model) -> LoraSet {
    let config = LoraConfig {
        rank: 4,
        num_layers: Some(2),
        dropout: 0.0,
        ..LoraConfig::default()
    };
    let mut set = LoraSet::new(model, &config, 7).expect("lora set");
    for (i, p) in set.params.iter_mut().enumerate() {
        if i % 2 == 1 {
            let key = gmlx_mlx::mlx_rs::random::key(100 + i as u64).expect("key");
            *p = gmlx_mlx::mlx_rs::random::normal::<f32>(p.shape(), 0.0, 0.02, &key)
                .expect("normal");
        }
    }
    set
}

fn host(a: &Array) -> Vec<f32> {
    let c = a.contiguous().expect("contiguous");
    c.eval().expect("eval");
    c.as_slice::<f32>().to_vec()
}

fn max_rel_diff(a: &[Array], b: &[Array]) -> f32 {
    let mut worst = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (&host(x), &host(y));
        let scale = y.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
        let d = x
            .iter()
            .zip(y)
            .fold(0.0f32, |m, (p, q)| m.max((p - q).abs()));
        worst = worst.max(d / scale);
    }
    worst
}

fn grads(model: &Model, set: &LoraSet, checkpoint: bool) -> (f32, Vec<Array>) {
    let options = ForwardOptions {
        checkpoint,
        dropout: None,
    };
    let (loss, g) = loss_and_grads(model, set, &batch(), options).expect("grads");
    loss.eval().expect("eval");
    (loss.item_exact::<f32>(), g)
}

#[test]
fn lora_gradients_through_quantized_matmul_match_the_dense_dequantized_reference() {
    let mut model = model();
    let set = lora_set(&model);
    let adapted: Vec<usize> = set.targets.iter().map(|t| t.layer).collect();
    let (loss_q, grads_q) = grads(&model, &set, false);

    // Exactly one gradient per LoRA array: the base is not an input of the transform.
    assert_eq!(grads_q.len(), set.params.len());
    for (g, p) in grads_q.iter().zip(&set.params) {
        assert_eq!(g.shape(), p.shape());
    }

    // The reference: the same model with every adapted block's weights dequantized to dense.
    let mut quantized = 0;
    for &li in &adapted {
        for lin in model.layers_mut()[li].linears_mut() {
            if matches!(lin.weight.storage(), Storage::Affine { .. }) {
                quantized += 1;
            }
            let dense = lin.weight.dequantized().expect("dequantize");
            lin.weight = QuantWeight::dense(lin.weight.name().to_owned(), dense);
        }
    }
    assert!(
        quantized > 0,
        "the adapted layers must be quantized for this test to mean anything"
    );
    let (loss_d, grads_d) = grads(&model, &set, false);

    let rel = max_rel_diff(&grads_q, &grads_d);
    eprintln!("loss quantized {loss_q} dense {loss_d}; max relative gradient difference {rel:e}");
    assert!(
        (loss_q - loss_d).abs() < 1e-4 * loss_d.abs().max(1.0),
        "{loss_q} vs {loss_d}"
    );
    assert!(rel < 1e-3, "gradients differ by {rel:e}");
    assert!(grads_q.iter().all(|g| host(g).iter().any(|v| *v != 0.0)));
}

#[test]
fn gradient_checkpointing_gives_the_same_gradients() {
    let model = model();
    let set = lora_set(&model);
    let (loss_plain, plain) = grads(&model, &set, false);
    let (loss_ck, checked) = grads(&model, &set, true);
    let rel = max_rel_diff(&checked, &plain);
    eprintln!("loss {loss_plain} vs {loss_ck}; max relative gradient difference {rel:e}");
    assert!((loss_plain - loss_ck).abs() <= 1e-5 * loss_plain.abs().max(1.0));
    assert!(rel <= 1e-5, "checkpointed gradients differ by {rel:e}");
}

/// The op-level check, independent of which product `QuantWeight::matmul` picks on this device
/// (on the CPU it may dequantize for speed): LoRA gradients through MLX's `quantized_matmul`
/// equal those through a dense matmul of the dequantized weight.
#[test]
fn lora_gradients_through_the_quantized_matmul_op_match_dense() {
    use gmlx_mlx::mlx_rs::error::Exception;
    use gmlx_mlx::mlx_rs::{ops, random, transforms};
    let key = |k| random::key(k).expect("key");
    let w = random::normal::<f32>(&[32, 128][..], None, None, &key(1)).expect("w");
    let (wq, scales, biases) = ops::quantize(&w, 32, 4).expect("quantize");
    let dense = ops::dequantize(&wq, &scales, &biases, 32, 4).expect("dequantize");
    let x = random::normal::<f32>(&[2, 5, 128][..], None, None, &key(2)).expect("x");
    let a = random::normal::<f32>(&[4, 128][..], 0.0, 0.1, &key(3)).expect("a");
    let b = random::normal::<f32>(&[32, 4][..], 0.0, 0.1, &key(4)).expect("b");
    let loss = |base: Array, a: &Array, b: &Array, x: &Array| -> Result<Array, Exception> {
        let delta = x
            .matmul(a.t())?
            .matmul(b.t())?
            .multiply(Array::from_f32(2.0))?;
        base.add(delta)?.sin()?.sum(None)
    };
    let argnums: &[i32] = &[0, 1];
    let (xq, xd) = (x.clone(), x.clone());
    let mut quantized = transforms::value_and_grad_with_argnums(
        |p: &[Array]| -> Result<Vec<Array>, Exception> {
            let base = ops::quantized_matmul(&xq, &wq, &scales, &biases, true, 32, 4)?;
            Ok(vec![loss(base, &p[0], &p[1], &xq)?])
        },
        argnums,
    );
    let mut reference = transforms::value_and_grad_with_argnums(
        |p: &[Array]| -> Result<Vec<Array>, Exception> {
            let base = xd.matmul(dense.t())?;
            Ok(vec![loss(base, &p[0], &p[1], &xd)?])
        },
        argnums,
    );
    let (_, gq) = quantized(&[a.clone(), b.clone()]).expect("quantized grads");
    let (_, gd) = reference(&[a, b]).expect("dense grads");
    assert_eq!(gq.len(), 2, "only the LoRA arrays are differentiated");
    let rel = max_rel_diff(&gq, &gd);
    eprintln!("op-level max relative gradient difference {rel:e}");
    assert!(rel < 1e-4, "{rel:e}");
}
