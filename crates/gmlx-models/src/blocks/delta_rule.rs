//! The gated delta rule: a linear-attention state `S [k_dim, v_dim]` per head, decayed by
//! `exp(g)` and corrected towards each new key/value pair with strength `beta`:
//!
//! ```text
//! S = diag(exp(g_t)) · S
//! S = S + k_t ⊗ beta_t · (v_t − S^T k_t)
//! o_t = S^T q_t
//! ```
//!
//! The decay `g_t` is one value per head (gated DeltaNet) or one per key channel (KDA, Kimi
//! delta attention). Two evaluations of the same recurrence, both in float32: one token at a
//! time (decoding), and the chunked WY form (prefill) over 64-token chunks, or 16-token chunks
//! for a per-channel decay (whose pairwise decays within a chunk are kept per channel), with
//! the within-chunk inverse computed by forward substitution on the device.
use gmlx_mlx::{ops, Array, Dtype};

use crate::error::Result;

/// Tokens per chunk of the chunked form (llama.cpp and the reference kernels use 64).
pub const CHUNK: i32 = 64;

/// Tokens per chunk with a per-channel decay (llama.cpp's KDA chunk): the decays between two
/// tokens of a chunk, `exp(G_i − G_j)`, are kept per channel, `chunk² · k_dim` per head.
pub const KDA_CHUNK: i32 = 16;

/// Whether a scan of many tokens runs in the chunked form: always, except in a forward pass
/// that training differentiates with `GMLX_TRAIN_GDN_CHUNK=0` (the per-token loop, which keeps
/// every token's state on the gradient tape: for comparisons).
pub fn chunked_here() -> bool {
    !(gmlx_mlx::quant::training() && std::env::var("GMLX_TRAIN_GDN_CHUNK").is_ok_and(|v| v == "0"))
}

/// The scan a mixer runs: one token at a time for a single token (or when [`chunked_here`]
/// says so), else chunked, checkpointed when training differentiates the pass.
pub fn scan(input: &ScanInput, state: &Array) -> Result<(Array, Array)> {
    if input.q.shape()[2] == 1 || !chunked_here() {
        recurrent(input, state)
    } else if gmlx_mlx::quant::training() {
        chunked_checkpointed(input, state)
    } else {
        chunked(input, state)
    }
}

/// [`chunked`] inside MLX's checkpoint transform: a differentiated pass keeps only the scan's
/// inputs, and the backward pass runs the scan again to rebuild its chunk states, so nothing
/// per chunk or per token stays on the gradient tape.
pub fn chunked_checkpointed(input: &ScanInput, state: &Array) -> Result<(Array, Array)> {
    let scan = gmlx_mlx::checkpoint::Checkpointed::new(|xs: &[Array]| {
        let (out, state) = chunked(&ScanInput::from_arrays(xs), &xs[5])
            .map_err(|e| gmlx_mlx::mlx_rs::error::Exception::custom(e.to_string()))?;
        Ok(vec![out, state])
    })?;
    let mut inputs = input.arrays();
    inputs.push(state.clone());
    let mut outs = scan.apply(&inputs)?.into_iter();
    match (outs.next(), outs.next()) {
        (Some(out), Some(state)) => Ok((out, state)),
        _ => Err(gmlx_mlx::Error::Ffi {
            call: "mlx_closure_apply",
            code: 0,
        }
        .into()),
    }
}

/// The inputs of one scan, already mapped to the value heads: `q`, `k [batch, heads, tokens,
/// k_dim]` (L2-normed; `q` not yet scaled), `v [batch, heads, tokens, v_dim]`, the log decay
/// `g`, `[batch, heads, tokens]` (per head) or `[batch, heads, tokens, k_dim]` (per key
/// channel), and the write strength `beta [batch, heads, tokens]`. All float32.
pub struct ScanInput {
    pub q: Array,
    pub k: Array,
    pub v: Array,
    pub g: Array,
    pub beta: Array,
}

impl ScanInput {
    /// From `[q, k, v, g, beta, ..]` (a transform's argument list).
    pub fn from_arrays(xs: &[Array]) -> ScanInput {
        ScanInput {
            q: xs[0].clone(),
            k: xs[1].clone(),
            v: xs[2].clone(),
            g: xs[3].clone(),
            beta: xs[4].clone(),
        }
    }

    /// Whether the decay is per key channel (KDA) rather than per head.
    pub fn per_channel(&self) -> bool {
        self.g.ndim() == 4
    }

    /// `[q, k, v, g, beta]`.
    pub fn arrays(&self) -> Vec<Array> {
        vec![
            self.q.clone(),
            self.k.clone(),
            self.v.clone(),
            self.g.clone(),
            self.beta.clone(),
        ]
    }
}

/// `x[..., i, :]` kept as a length-1 axis.
fn at(x: &Array, axis: i32, i: i32) -> Result<Array> {
    let shape = x.shape();
    let axis = if axis < 0 {
        shape.len() as i32 + axis
    } else {
        axis
    } as usize;
    let mut start = vec![0; shape.len()];
    let mut stop = shape.to_vec();
    start[axis] = i;
    stop[axis] = i + 1;
    Ok(gmlx_mlx::slicing::slice(x, &start, &stop)?)
}

fn scale_q(q: &Array) -> Result<Array> {
    let k_dim = q.shape()[3];
    Ok(q.multiply(Array::from_f32(1.0 / (k_dim as f32).sqrt()))?)
}

/// One token at a time from `state [batch, heads, k_dim, v_dim]`: the outputs `[batch, heads,
/// tokens, v_dim]` and the final state.
pub fn recurrent(input: &ScanInput, state: &Array) -> Result<(Array, Array)> {
    let q = scale_q(&input.q)?;
    let tokens = q.shape()[2];
    let mut s = state.clone();
    let mut outs = Vec::with_capacity(tokens as usize);
    for t in 0..tokens {
        let q_t = at(&q, 2, t)?; // [b, h, 1, k]
        let k_t = at(&input.k, 2, t)?;
        let v_t = at(&input.v, 2, t)?; // [b, h, 1, v]
        let g_t = if input.per_channel() {
            at(&input.g, 2, t)?.transpose_axes(&[0, 1, 3, 2])? // [b, h, k, 1]
        } else {
            at(&input.g, 2, t)?.expand_dims(-1)? // [b, h, 1, 1]
        };
        let beta_t = at(&input.beta, 2, t)?.expand_dims(-1)?;
        s = s.multiply(g_t.exp()?)?;
        let remembered = k_t.matmul(&s)?; // [b, h, 1, v]
        let delta = v_t.subtract(&remembered)?.multiply(&beta_t)?;
        s = s.add(k_t.transpose_axes(&[0, 1, 3, 2])?.matmul(&delta)?)?;
        outs.push(q_t.matmul(&s)?);
    }
    let out = if outs.len() == 1 {
        outs.remove(0)
    } else {
        ops::concatenate(&outs, 2)?
    };
    Ok((out, s))
}

/// Pads axis 2 (tokens) of `x` with zeros up to `len`.
fn pad_tokens(x: &Array, len: i32) -> Result<Array> {
    let shape = x.shape();
    if shape[2] == len {
        return Ok(x.clone());
    }
    let mut pad_shape = shape.to_vec();
    pad_shape[2] = len - shape[2];
    let zeros = ops::zeros_dtype(&pad_shape, Dtype::Float32)?;
    Ok(ops::concatenate(&[x.clone(), zeros], 2)?)
}

/// `[chunk, chunk]` float masks: lower triangle with the diagonal, and without it.
fn triangles(chunk: i32) -> Result<(Array, Array)> {
    let ones = ops::ones::<f32>(&[chunk, chunk])?;
    Ok((ops::tril(&ones, 0)?, ops::tril(&ones, -1)?))
}

/// `(I + L)^-1` for the strictly lower `l [..., chunk, chunk]`, row by row (forward
/// substitution; MLX's triangular solve runs on the CPU only).
fn unit_lower_inverse(l: &Array) -> Result<Array> {
    let chunk = l.shape()[l.ndim() - 1];
    let mut m = l.negative()?;
    let rows = ops::eye::<f32>(chunk, None, None)?;
    for i in 1..chunk {
        // row i of the inverse's strictly lower part: -l_i + (-l_i) · m, with rows < i final
        let row = at(&m, -2, i)?; // [..., 1, chunk]
        let update = row.matmul(&m)?;
        let pick = at(&rows, 1, i)?; // [chunk, 1]: one at row i
        m = m.add(pick.multiply(&update)?)?;
    }
    Ok(m.add(&rows)?)
}

/// What the chunked form needs of each chunk before the sequential pass, all `[b, h, n, ..]`.
struct ChunkTerms {
    /// `[c, c]`: `k_beta_i · k_j` decayed from `j` to `i`, strictly below the diagonal.
    l: Array,
    /// `[c, c]`: `q_i · k_j` decayed from `j` to `i`, on and below the diagonal.
    qk: Array,
    /// `[c, k]` (or `[c, 1]` per head): the decay from the chunk's start to each token.
    to_here: Array,
    /// `[c, k]` (or `[c, 1]`): the decay from each token to the chunk's end.
    to_end: Array,
    /// `[1, k]` (or `[1, 1]`): the decay over the whole chunk.
    whole: Array,
}

/// The terms with one decay per head: `g [b, h, n, c]`.
fn per_head_terms(
    q: &Array,
    k: &Array,
    k_beta: &Array,
    g: &Array,
    chunk: i32,
) -> Result<ChunkTerms> {
    let (lower, strict) = triangles(chunk)?;
    let cum = ops::cumsum(g, -1, None, None)?; // G_i: decay from the chunk's start to i
    let last = at(&cum, -1, chunk - 1)?; // [b, h, n, 1]
                                         // exp(G_i - G_j) for j <= i, 0 above the diagonal
    let diff = cum.expand_dims(-1)?.subtract(cum.expand_dims(-2)?)?;
    let decay = diff.multiply(&lower)?.exp()?.multiply(&lower)?;
    let k_t = k.transpose_axes(&[0, 1, 2, 4, 3])?;
    Ok(ChunkTerms {
        l: k_beta.matmul(&k_t)?.multiply(&decay)?.multiply(&strict)?,
        qk: q.matmul(&k_t)?.multiply(&decay)?,
        to_here: cum.exp()?.expand_dims(-1)?,
        to_end: last.subtract(&cum)?.exp()?.expand_dims(-1)?,
        whole: last.exp()?.expand_dims(-1)?,
    })
}

/// The terms with one decay per key channel: `g [b, h, n, c, k]`. The pairwise decays stay
/// per channel (`[c, c, k]`), so no factor `exp(-G)` can overflow however strong the decay.
fn per_channel_terms(
    q: &Array,
    k: &Array,
    k_beta: &Array,
    g: &Array,
    chunk: i32,
) -> Result<ChunkTerms> {
    let (lower, strict) = triangles(chunk)?;
    let cum = ops::cumsum(g, -2, None, None)?; // [b, h, n, c, k]
    let last = at(&cum, -2, chunk - 1)?; // [b, h, n, 1, k]
    let lower_k = lower.expand_dims(-1)?; // [c, c, 1]
    let diff = cum.expand_dims(-2)?.subtract(cum.expand_dims(-3)?)?; // [.., i, j, k]
    let decay = diff.multiply(&lower_k)?.exp()?.multiply(&lower_k)?;
    let k_j = k.expand_dims(-3)?; // [.., 1, j, k]
    let pairs = |x: &Array| -> Result<Array> {
        Ok(x.expand_dims(-2)?
            .multiply(&k_j)?
            .multiply(&decay)?
            .sum_axis(-1, false)?)
    };
    Ok(ChunkTerms {
        l: pairs(k_beta)?.multiply(&strict)?,
        qk: pairs(q)?,
        to_here: cum.exp()?,
        to_end: last.subtract(&cum)?.exp()?,
        whole: last.exp()?,
    })
}

/// The chunked form: equal to [`recurrent`] up to rounding, in `ceil(tokens / chunk)`
/// sequential steps. Padding tokens carry zero keys, values and strength and no decay, so they
/// leave the state as it is.
pub fn chunked(input: &ScanInput, state: &Array) -> Result<(Array, Array)> {
    let shape = input.q.shape();
    let (batch, heads, tokens, k_dim) = (shape[0], shape[1], shape[2], shape[3]);
    let v_dim = input.v.shape()[3];
    let per_channel = input.per_channel();
    let chunk = if per_channel { KDA_CHUNK } else { CHUNK };
    let chunks = (tokens + chunk - 1) / chunk;
    let padded = chunks * chunk;
    let split = |x: &Array, last: i32| -> Result<Array> {
        Ok(pad_tokens(x, padded)?.reshape(&[batch, heads, chunks, chunk, last])?)
    };
    let q = split(&scale_q(&input.q)?, k_dim)?;
    let k = split(&input.k, k_dim)?;
    let v = split(&input.v, v_dim)?;
    let beta = split(&input.beta.expand_dims(-1)?, 1)?; // [b, h, n, c, 1]
    let k_beta = k.multiply(&beta)?;
    let t = if per_channel {
        per_channel_terms(&q, &k, &k_beta, &split(&input.g, k_dim)?, chunk)?
    } else {
        let g = split(&input.g.expand_dims(-1)?, 1)?.squeeze_axes(&[-1])?; // [b, h, n, c]
        per_head_terms(&q, &k, &k_beta, &g, chunk)?
    };
    let inverse = unit_lower_inverse(&t.l)?;
    let u = inverse.matmul(&v.multiply(&beta)?)?; // [b, h, n, c, v]
    let w = inverse.matmul(&k_beta.multiply(&t.to_here)?)?; // [b, h, n, c, k]
    let q_decayed = q.multiply(&t.to_here)?;
    let k_to_end = k.multiply(&t.to_end)?;
    // the whole chunk's decay of the state's rows: [b, h, n, k or 1, 1]
    let chunk_decay = t.whole.transpose_axes(&[0, 1, 2, 4, 3])?;

    let mut s = state.clone();
    let mut outs = Vec::with_capacity(chunks as usize);
    for c in 0..chunks {
        let pick = |x: &Array| -> Result<Array> { Ok(at(x, 2, c)?.squeeze_axes(&[2])?) };
        let v_new = pick(&u)?.subtract(pick(&w)?.matmul(&s)?)?; // [b, h, c, v]
        let inter = pick(&q_decayed)?.matmul(&s)?;
        outs.push(inter.add(pick(&t.qk)?.matmul(&v_new)?)?);
        let write = pick(&k_to_end)?
            .transpose_axes(&[0, 1, 3, 2])?
            .matmul(&v_new)?;
        s = s.multiply(pick(&chunk_decay)?)?.add(&write)?;
    }
    let out = if outs.len() == 1 {
        outs.remove(0)
    } else {
        ops::concatenate(&outs, 2)?
    };
    let out = gmlx_mlx::slicing::slice(&out, &[0, 0, 0, 0], &[batch, heads, tokens, v_dim])?;
    Ok((out, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(seed: u64, shape: &[i32]) -> Result<Array> {
        let key = gmlx_mlx::mlx_rs::random::key(seed)?;
        Ok(gmlx_mlx::mlx_rs::random::uniform::<_, f32>(
            -1.0, 1.0, shape, &key,
        )?)
    }

    fn l2(x: Array) -> Result<Array> {
        let norm = x.square()?.sum_axis(-1, true)?.sqrt()?;
        Ok(x.divide(&norm)?)
    }

    fn input(tokens: i32, seed: u64) -> Result<ScanInput> {
        let (b, h, dk, dv) = (2, 3, 16, 8);
        Ok(ScanInput {
            q: l2(noise(seed, &[b, h, tokens, dk])?)?,
            k: l2(noise(seed + 1, &[b, h, tokens, dk])?)?,
            v: noise(seed + 2, &[b, h, tokens, dv])?,
            // decays between exp(-1) and 1, as -exp(A)·softplus(..) gives
            g: noise(seed + 3, &[b, h, tokens])?
                .subtract(Array::from_f32(1.0))?
                .multiply(Array::from_f32(0.5))?,
            beta: ops::sigmoid(&noise(seed + 4, &[b, h, tokens])?.multiply(Array::from_f32(3.0))?)?,
        })
    }

    /// A per-channel (KDA) decay as kimi-k3's lower-bound gate gives it: `-5 · sigmoid(..)`
    /// per token and key channel, so a 16-token chunk decays some channels by up to exp(-80).
    fn kda_input(tokens: i32, seed: u64) -> Result<ScanInput> {
        let per_head = input(tokens, seed)?;
        let g =
            ops::sigmoid(&noise(seed + 5, &[2, 3, tokens, 16])?.multiply(Array::from_f32(4.0))?)?
                .multiply(Array::from_f32(-5.0))?;
        Ok(ScanInput { g, ..per_head })
    }

    fn max_diff(a: &Array, b: &Array) -> Result<f32> {
        let d = a.subtract(b)?.abs()?.flatten(None, None)?;
        d.eval()?;
        Ok(d.as_slice::<f32>().iter().fold(0.0, |m, &x| m.max(x)))
    }

    #[test]
    fn chunked_equals_the_per_token_recurrence_across_chunk_boundaries() -> Result<()> {
        for tokens in [1, 63, 64, 65, 300] {
            let x = input(tokens, tokens as u64)?;
            let start = noise(99, &[2, 3, 16, 8])?.multiply(Array::from_f32(0.3))?;
            let (o_r, s_r) = recurrent(&x, &start)?;
            let (o_c, s_c) = chunked(&x, &start)?;
            assert_eq!(o_c.shape(), o_r.shape(), "{tokens} tokens");
            let (d_out, d_state) = (max_diff(&o_r, &o_c)?, max_diff(&s_r, &s_c)?);
            assert!(
                d_out < 2e-5 && d_state < 2e-5,
                "{tokens} tokens: outputs differ by {d_out}, states by {d_state}"
            );
        }
        Ok(())
    }

    #[test]
    fn the_per_channel_chunked_form_equals_the_recurrence_across_its_16_token_chunks() -> Result<()>
    {
        for tokens in [1, 15, 16, 17, 47, 300] {
            let x = kda_input(tokens, 7 + tokens as u64)?;
            assert!(x.per_channel());
            let start = noise(91, &[2, 3, 16, 8])?.multiply(Array::from_f32(0.3))?;
            let (o_r, s_r) = recurrent(&x, &start)?;
            let (o_c, s_c) = chunked(&x, &start)?;
            assert_eq!(o_c.shape(), o_r.shape(), "{tokens} tokens");
            let (d_out, d_state) = (max_diff(&o_r, &o_c)?, max_diff(&s_r, &s_c)?);
            assert!(
                d_out < 2e-5 && d_state < 2e-5,
                "{tokens} tokens: outputs differ by {d_out}, states by {d_state}"
            );
        }
        Ok(())
    }

    /// The strongest decay the lower-bound gate allows on every token of a chunk: the state's
    /// channels fall by exp(-80) over 16 tokens, and nothing overflows on the way.
    #[test]
    fn a_chunk_decaying_by_exp_minus_80_stays_finite_and_exact() -> Result<()> {
        let x = ScanInput {
            g: ops::full::<f32>(&[2, 3, 32, 16], Array::from_f32(-5.0))?,
            ..kda_input(32, 3)?
        };
        let start = noise(92, &[2, 3, 16, 8])?;
        let (o_r, s_r) = recurrent(&x, &start)?;
        let (o_c, s_c) = chunked(&x, &start)?;
        let finite = |a: &Array| -> Result<bool> {
            let f = a.flatten(None, None)?;
            f.eval()?;
            Ok(f.as_slice::<f32>().iter().all(|v| v.is_finite()))
        };
        assert!(finite(&o_c)? && finite(&s_c)?);
        assert!(max_diff(&o_r, &o_c)? < 2e-5 && max_diff(&s_r, &s_c)? < 2e-5);
        Ok(())
    }

    /// Training differentiates the chunked form: its loss and its gradients with respect to
    /// every input (queries, keys, values, decay, strength and the starting state) equal the
    /// per-token loop's to rounding, at lengths that straddle chunks, with one decay per head
    /// and one per key channel (KDA).
    #[test]
    fn the_chunked_form_has_the_per_token_gradients() -> Result<()> {
        type Make = fn(i32, u64) -> Result<ScanInput>;
        let cases: [(Make, &[i32]); 2] =
            [(input, &[1, 63, 65, 130]), (kda_input, &[1, 15, 17, 40])];
        for (make, lengths) in cases {
            gradients_match(make, lengths)?;
        }
        Ok(())
    }

    fn gradients_match(make: fn(i32, u64) -> Result<ScanInput>, lengths: &[i32]) -> Result<()> {
        use gmlx_mlx::mlx_rs::error::Exception;
        use gmlx_mlx::mlx_rs::transforms::value_and_grad_with_argnums;
        for &tokens in lengths {
            let x = make(tokens, 40 + tokens as u64)?;
            let start = noise(98, &[2, 3, 16, 8])?.multiply(Array::from_f32(0.3))?;
            let weights = noise(97, &[2, 3, tokens, 8])?;
            let state_weights = noise(96, &[2, 3, 16, 8])?;
            type Scan = fn(&ScanInput, &Array) -> Result<(Array, Array)>;
            let loss = |scan: Scan| {
                let (w, sw) = (weights.clone(), state_weights.clone());
                move |p: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
                    let (out, state) = scan(&ScanInput::from_arrays(p), &p[5])
                        .map_err(|e| Exception::custom(e.to_string()))?;
                    let l = out
                        .multiply(&w)?
                        .sum(None)?
                        .add(state.multiply(&sw)?.sum(None)?)?;
                    Ok(vec![l])
                }
            };
            let mut params = x.arrays();
            params.push(start);
            let argnums: Vec<i32> = (0..6).collect();
            let grads = |scan: Scan| value_and_grad_with_argnums(loss(scan), &argnums[..])(&params);
            let (l_loop, g_loop) = grads(recurrent)?;
            let (l_chunk, g_chunk) = grads(chunked)?;
            // the checkpointed scan recomputes the very same graph: the same gradients, bit
            // for bit, as the plain chunked scan
            let (_, g_ckpt) = grads(chunked_checkpointed)?;
            let d_loss = max_diff(&l_loop[0], &l_chunk[0])?;
            assert!(d_loss < 1e-3, "{tokens} tokens: losses differ by {d_loss}");
            for (i, (a, b)) in g_ckpt.iter().zip(&g_chunk).enumerate() {
                assert_eq!(
                    max_diff(a, b)?,
                    0.0,
                    "{tokens} tokens, input {i}: checkpointed"
                );
            }
            for (i, (a, b)) in g_loop.iter().zip(&g_chunk).enumerate() {
                let peak = a.abs()?.max(None)?;
                peak.eval()?;
                let scale = peak.as_slice::<f32>()[0].max(1.0);
                let d = max_diff(a, b)? / scale;
                assert!(
                    d < 1e-4,
                    "{tokens} tokens, input {i}: gradients differ by {d} (relative)"
                );
            }
        }
        Ok(())
    }

    /// The chunked KDA scan's gradient against central finite differences: along a random
    /// direction in each input (queries, keys, values, decay, strength, starting state), the
    /// analytic directional derivative matches `(L(x + h·d) - L(x - h·d)) / 2h` (float64
    /// would be tighter; float32 with h = 1e-2 holds to a few parts in a thousand).
    #[test]
    fn the_kda_chunked_gradients_match_finite_differences() -> Result<()> {
        use gmlx_mlx::mlx_rs::error::Exception;
        use gmlx_mlx::mlx_rs::transforms::value_and_grad_with_argnums;
        let tokens = 37;
        let x = kda_input(tokens, 5)?;
        let start = noise(95, &[2, 3, 16, 8])?.multiply(Array::from_f32(0.3))?;
        let weights = noise(94, &[2, 3, tokens, 8])?;
        let loss = |p: &[Array]| -> std::result::Result<Vec<Array>, Exception> {
            let (out, state) = chunked(&ScanInput::from_arrays(p), &p[5])
                .map_err(|e| Exception::custom(e.to_string()))?;
            Ok(vec![out
                .multiply(&weights)?
                .sum(None)?
                .add(state.square()?.sum(None)?)?])
        };
        let mut params = x.arrays();
        params.push(start);
        let argnums: Vec<i32> = (0..6).collect();
        let (_, grads) = value_and_grad_with_argnums(loss, &argnums[..])(&params)?;
        let scalar = |a: &Array| -> Result<f32> {
            a.eval()?;
            Ok(a.as_slice::<f32>()[0])
        };
        let h = 1e-2f32;
        for (i, grad) in grads.iter().enumerate() {
            let direction = noise(200 + i as u64, params[i].shape())?;
            let at = |sign: f32| -> Result<f32> {
                let mut moved = params.clone();
                moved[i] = params[i].add(direction.multiply(Array::from_f32(sign * h))?)?;
                scalar(
                    &loss(&moved)
                        .map_err(|e| crate::error::Error::from(gmlx_mlx::Error::from(e)))?[0],
                )
            };
            let numeric = (at(1.0)? - at(-1.0)?) / (2.0 * h);
            let analytic = scalar(&grad.multiply(&direction)?.sum(None)?)?;
            let rel = (numeric - analytic).abs() / analytic.abs().max(1.0);
            eprintln!("input {i}: finite difference {numeric}, gradient {analytic}");
            assert!(
                rel < 5e-3,
                "input {i}: finite difference {numeric} vs gradient {analytic} ({rel} relative)"
            );
        }
        Ok(())
    }

    #[test]
    fn a_scan_split_anywhere_continues_from_its_state() -> Result<()> {
        let whole = input(130, 7)?;
        let start = ops::zeros_dtype(&[2, 3, 16, 8], Dtype::Float32)?;
        let (o_whole, s_whole) = chunked(&whole, &start)?;
        let part = |x: &Array, from: i32, to: i32| -> Result<Array> {
            let mut stop = x.shape().to_vec();
            stop[2] = to;
            let mut begin = vec![0; stop.len()];
            begin[2] = from;
            Ok(gmlx_mlx::slicing::slice(x, &begin, &stop)?)
        };
        let span = |from, to| -> Result<ScanInput> {
            Ok(ScanInput {
                q: part(&whole.q, from, to)?,
                k: part(&whole.k, from, to)?,
                v: part(&whole.v, from, to)?,
                g: part(&whole.g, from, to)?,
                beta: part(&whole.beta, from, to)?,
            })
        };
        let (o_a, s_a) = chunked(&span(0, 70)?, &start)?;
        let (o_b, s_b) = recurrent(&span(70, 71)?, &s_a)?;
        let (o_c, s_c) = chunked(&span(71, 130)?, &s_b)?;
        let joined = ops::concatenate(&[o_a, o_b, o_c], 2)?;
        assert!(max_diff(&joined, &o_whole)? < 2e-5);
        assert!(max_diff(&s_c, &s_whole)? < 2e-5);
        Ok(())
    }
}
