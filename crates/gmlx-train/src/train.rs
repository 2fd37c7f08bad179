//! The training loop.
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gmlx_mlx::mlx_rs::error::Exception;
use gmlx_mlx::mlx_rs::transforms::{eval, value_and_grad_with_argnums};
use gmlx_mlx::{memory, Array};
use gmlx_models::adapter::Adapter;
use gmlx_models::{Model, Tokenizer};

use crate::config::TrainConfig;
use crate::data::{Dataset, Encoder, Example};
use crate::error::{Error, Result};
use crate::lora::LoraSet;
use crate::optim::{AdamW, Schedule};
use crate::step::{self, Batch, ForwardOptions};

/// One progress report.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub step: usize,
    pub iters: usize,
    /// Mean train loss over the steps since the last report.
    pub train_loss: f32,
    /// Validation loss, when computed at this step.
    pub val_loss: Option<f32>,
    pub learning_rate: f32,
    /// Tokens fed per second since the last report.
    pub tokens_per_sec: f64,
    /// Peak MLX memory since training began.
    pub peak_bytes: usize,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {}/{}  train loss {:.4}",
            self.step, self.iters, self.train_loss
        )?;
        if let Some(v) = self.val_loss {
            write!(f, "  val loss {v:.4}")?;
        }
        write!(
            f,
            "  lr {:.2e}  {:.1} tok/s  peak {:.1} MiB",
            self.learning_rate,
            self.tokens_per_sec,
            mib(self.peak_bytes)
        )
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// What a finished run did.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub steps: usize,
    pub adapted_layers: usize,
    pub trainable_params: usize,
    pub train_rows: usize,
    /// Loss of the first step (before any update).
    pub first_train_loss: f32,
    /// Mean loss of the last report interval.
    pub last_train_loss: f32,
    pub val_loss_before: Option<f32>,
    pub val_loss_after: Option<f32>,
    pub tokens: usize,
    pub seconds: f64,
    pub tokens_per_sec: f64,
    pub peak_bytes: usize,
    pub grad_checkpoint: bool,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trained {} steps on {} rows: {} layers adapted, {} trainable parameters; train loss {:.4} -> {:.4}",
            self.steps,
            self.train_rows,
            self.adapted_layers,
            self.trainable_params,
            self.first_train_loss,
            self.last_train_loss
        )?;
        if let (Some(b), Some(a)) = (self.val_loss_before, self.val_loss_after) {
            write!(f, ", val loss {b:.4} -> {a:.4}")?;
        }
        write!(
            f,
            "; {} tokens in {:.1} s ({:.1} tok/s); peak memory {:.1} MiB{}",
            self.tokens,
            self.seconds,
            self.tokens_per_sec,
            mib(self.peak_bytes),
            if self.grad_checkpoint {
                " (gradient checkpointing)"
            } else {
                ""
            }
        )
    }
}

/// A finished run: the adapter (also installed on the model) and its summary.
#[derive(Debug)]
pub struct Trained {
    pub adapter: Adapter,
    pub summary: Summary,
}

/// Rows in a seeded random order, reshuffled at each pass.
struct Order {
    indices: Vec<usize>,
    at: usize,
    rng: u64,
}

impl Order {
    fn new(n: usize, seed: u64) -> Order {
        let mut o = Order {
            indices: (0..n).collect(),
            at: n,
            rng: seed ^ 0x2545_F491_4F6C_DD1D,
        };
        o.shuffle();
        o.at = 0;
        o
    }

    fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn shuffle(&mut self) {
        for i in (1..self.indices.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            self.indices.swap(i, j);
        }
    }

    fn take(&mut self, k: usize) -> Vec<usize> {
        (0..k)
            .map(|_| {
                if self.at == self.indices.len() {
                    self.shuffle();
                    self.at = 0;
                }
                self.at += 1;
                self.indices[self.at - 1]
            })
            .collect()
    }
}

fn scalar(a: &Array) -> Result<f32> {
    a.eval()?;
    Ok(a.item_exact::<f32>())
}

/// Mean validation loss over the first `batches` batches (weighted by target count).
fn validate(
    model: &Model,
    set: &LoraSet,
    examples: &[Example],
    prefixes: &Prefixes,
    batch_size: usize,
    batches: usize,
) -> Result<Option<f32>> {
    if examples.is_empty() || batches == 0 {
        return Ok(None);
    }
    let options = ForwardOptions {
        checkpoint: false,
        dropout: None,
    };
    let (mut sum, mut count) = (0.0f64, 0usize);
    let indices: Vec<usize> = (0..examples.len()).collect();
    for chunk in indices.chunks(batch_size).take(batches) {
        let batch = prefixes.batch(examples, chunk)?;
        let l = scalar(&step::loss(model, set, &set.params, &batch, options)?)?;
        sum += l as f64 * batch.n_targets as f64;
        count += batch.n_targets;
    }
    Ok((count > 0).then(|| (sum / count as f64) as f32))
}

/// Hidden states entering the lowest adapted block, computed once per example: the blocks
/// below it are frozen and carry no adapter, so their output never changes during training.
struct Prefixes {
    start: usize,
    rows: Vec<Array>,
}

/// Cache prefixes only while they take less than this.
const PREFIX_CACHE_BYTES: usize = 512 << 20;

impl Prefixes {
    fn new(model: &Model, set: &LoraSet, examples: &[Example]) -> Result<Prefixes> {
        let start = set.targets.iter().map(|t| t.layer).min().unwrap_or(0);
        let hidden = model.config().hidden as usize;
        let bytes: usize = examples
            .iter()
            .map(|e| (e.ids.len() - 1) * hidden * 4)
            .sum();
        if start == 0
            || bytes > PREFIX_CACHE_BYTES
            || !model.config().blocks_pass_only_hidden_states()
        {
            return Ok(Prefixes {
                start: 0,
                rows: Vec::new(),
            });
        }
        let rows = examples
            .iter()
            .map(|e| step::frozen_prefix(model, &e.ids[..e.ids.len() - 1], start))
            .collect::<Result<_>>()?;
        Ok(Prefixes { start, rows })
    }

    fn batch(&self, examples: &[Example], picked: &[usize]) -> Result<Batch> {
        let refs: Vec<&Example> = picked.iter().map(|&i| &examples[i]).collect();
        let batch = Batch::new(&refs);
        if self.rows.is_empty() {
            return Ok(batch);
        }
        let rows: Vec<&Array> = picked.iter().map(|&i| &self.rows[i]).collect();
        batch.with_prefix(self.start, &rows)
    }
}

/// The gradients of the mean loss of `batch` with respect to the LoRA parameters only.
pub fn loss_and_grads(
    model: &Model,
    set: &LoraSet,
    batch: &Batch,
    options: ForwardOptions,
) -> Result<(Array, Vec<Array>)> {
    let argnums: Vec<i32> = (0..set.params.len() as i32).collect();
    let f = |params: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
        let l = step::loss(model, set, params, batch, options)
            .map_err(|e| Exception::custom(e.to_string()))?;
        Ok(vec![l])
    };
    let mut vg = value_and_grad_with_argnums(f, &argnums[..]);
    // the base stays quantized in the differentiated graph (no float copy kept for backward)
    let _training = gmlx_mlx::quant::training_products();
    let (mut values, grads) = vg(&set.params)?;
    Ok((values.remove(0), grads))
}

/// Trains LoRA adapters on `model` (whose base stays quantized and frozen). Progress goes to
/// `report` every `report_every` steps; `stop` is checked between steps. On success the
/// adapter is installed on `model` and returned; on failure or interruption nothing is.
pub fn train(
    model: &mut Model,
    tokenizer: &Tokenizer,
    data: &Dataset,
    config: &TrainConfig,
    report: &mut dyn FnMut(&Progress),
    stop: &AtomicBool,
) -> Result<Trained> {
    let encoder = Encoder::new(tokenizer, config.mask_prompt, config.max_seq_length)?;
    let train_set = encoder.encode_all(&data.train)?;
    if train_set.is_empty() {
        return Err(Error::EmptyData {
            path: data.train_path.clone(),
        });
    }
    let valid_set = encoder.encode_all(&data.valid)?;
    train_examples(model, &train_set, &valid_set, config, report, stop)
}

/// [`train`] on rows already tokenized (`train_set` not empty), which may carry a teacher's
/// distributions ([`Example::soft`]): the loop `gmlx train` and `gmlx distill` share.
pub fn train_examples(
    model: &mut Model,
    train_set: &[Example],
    valid_set: &[Example],
    config: &TrainConfig,
    report: &mut dyn FnMut(&Progress),
    stop: &AtomicBool,
) -> Result<Trained> {
    let mut set = LoraSet::new(model, &config.lora, config.seed)?;
    let mut opt = AdamW::new(&set.params, config.weight_decay)?;
    let schedule = Schedule {
        peak: config.learning_rate,
        warmup: config.warmup_steps(),
        total: config.iters,
    };
    let mut order = Order::new(train_set.len(), config.seed);
    memory::reset_peak()?;
    let train_prefixes = Prefixes::new(model, &set, train_set)?;
    let valid_prefixes = Prefixes::new(model, &set, valid_set)?;
    let val = |set: &LoraSet| {
        validate(
            model,
            set,
            valid_set,
            &valid_prefixes,
            config.batch_size,
            config.val_batches,
        )
    };

    let val_loss_before = val(&set)?;
    let start = Instant::now();
    let (mut tokens, mut window_tokens, mut window_start) = (0usize, 0usize, Instant::now());
    let (mut window_loss, mut window_steps) = (0.0f64, 0usize);
    let (mut first_train_loss, mut last_train_loss) = (f32::NAN, f32::NAN);
    let mut val_loss_after = None;
    for step in 1..=config.iters {
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Interrupted { step });
        }
        let mut grads: Option<Vec<Array>> = None;
        let mut step_loss = 0.0f32;
        for micro in 0..config.grad_accum {
            let picked = order.take(config.batch_size);
            let batch = train_prefixes.batch(train_set, &picked)?;
            let options = ForwardOptions {
                checkpoint: config.grad_checkpoint,
                dropout: Some((
                    config.lora.dropout,
                    config.seed ^ ((step * config.grad_accum + micro) as u64).wrapping_mul(31),
                )),
            };
            let (l, g) = loss_and_grads(model, &set, &batch, options)?;
            eval(g.iter().chain([&l]))?;
            step_loss += scalar(&l)? / config.grad_accum as f32;
            grads = Some(match grads {
                None => g,
                Some(acc) => acc
                    .iter()
                    .zip(&g)
                    .map(|(a, b)| a.add(b))
                    .collect::<std::result::Result<_, _>>()?,
            });
            tokens += batch.n_tokens;
            window_tokens += batch.n_tokens;
        }
        if !step_loss.is_finite() {
            return Err(Error::Diverged {
                step,
                loss: step_loss,
            });
        }
        let mut grads = grads.unwrap_or_default();
        if config.grad_accum > 1 {
            let k = Array::from_f32(1.0 / config.grad_accum as f32);
            grads = grads
                .iter()
                .map(|g| g.multiply(&k))
                .collect::<std::result::Result<_, _>>()?;
        }
        let lr = schedule.at(step);
        opt.update(&mut set.params, &grads, lr)?;
        eval(set.params.iter().chain(opt.state()))?;
        if step == 1 {
            first_train_loss = step_loss;
        }
        window_loss += step_loss as f64;
        window_steps += 1;

        let last = step == config.iters;
        let validate_now = last || (config.val_every > 0 && step % config.val_every == 0);
        if step % config.report_every == 0 || last || validate_now {
            let val_loss = if validate_now { val(&set)? } else { None };
            if last {
                val_loss_after = val_loss;
            }
            let train_loss = (window_loss / window_steps as f64) as f32;
            last_train_loss = train_loss;
            report(&Progress {
                step,
                iters: config.iters,
                train_loss,
                val_loss,
                learning_rate: lr,
                tokens_per_sec: window_tokens as f64
                    / window_start.elapsed().as_secs_f64().max(1e-9),
                peak_bytes: memory::stats()?.peak_bytes,
            });
            window_loss = 0.0;
            window_steps = 0;
            window_tokens = 0;
            window_start = Instant::now();
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let peak_bytes = memory::stats()?.peak_bytes;
    let adapter = set.to_adapter(&model.config().arch)?;
    set.install(model);
    let mut layers: Vec<usize> = set.targets.iter().map(|t| t.layer).collect();
    layers.dedup();
    Ok(Trained {
        adapter,
        summary: Summary {
            steps: config.iters,
            adapted_layers: layers.len(),
            trainable_params: set.n_params(),
            train_rows: train_set.len(),
            first_train_loss,
            last_train_loss,
            val_loss_before,
            val_loss_after,
            tokens,
            seconds,
            tokens_per_sec: tokens as f64 / seconds.max(1e-9),
            peak_bytes,
            grad_checkpoint: config.grad_checkpoint,
        },
    })
}
