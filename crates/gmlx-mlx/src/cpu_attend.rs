//! One query head's softmax attention over the keys and values a sequence holds, on the host:
//! the inner loop of a CPU decode step's attention (`gmlx_models::blocks::host::attend_one`).
//! With AVX-512 and heads of 64 or 128 values, the query and the output stay in registers and
//! each key's dot product and each value's accumulation are 4 or 8 16-lane multiply-adds;
//! elsewhere portable 8-lane code. Either way a head's arithmetic depends only on its own
//! query, keys and values.

/// The keys and values a sequence holds: token-major, `width` values per token (every
/// key/value head of the token, one after another).
pub struct Held<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub width: usize,
}

impl Held<'_> {
    /// Tokens held (whole ones in both keys and values).
    fn tokens(&self) -> usize {
        self.keys.len().min(self.values.len()) / self.width.max(1)
    }

    /// Where token `j`'s key/value head `kv` of `d` values starts.
    fn start(&self, j: usize, kv: usize, d: usize) -> usize {
        j * self.width + kv * d
    }
}

/// Query head `q` (its `d` values) over key/value head `kv` of `held` (`d` values from
/// `kv * d` in each token), scaled by `scale`: the softmax of the scores times the values, into
/// `o` (`d` values, overwritten).
///
/// # Panics
/// Where `o` is shorter than `q`, or head `kv` lies outside a token's `width` values.
pub fn head(q: &[f32], held: &Held<'_>, kv: usize, scale: f32, o: &mut [f32]) {
    let d = q.len();
    let o = &mut o[..d];
    assert!(
        (kv + 1) * d <= held.width,
        "head {kv} of {d} outside {}",
        held.width
    );
    #[cfg(target_arch = "x86_64")]
    if matches!(d, 64 | 128) && std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the processor has AVX-512F; `d` is 16 times the vectors asked for, and every
        // token's head lies within its `width` values (checked above; the token count comes
        // from the slices' lengths).
        return unsafe {
            if d == 64 {
                head_avx512::<4>(q, held, kv, scale, o)
            } else {
                head_avx512::<8>(q, held, kv, scale, o)
            }
        };
    }
    head_portable(q, held, kv, scale, o);
}

fn head_portable(q: &[f32], held: &Held<'_>, kv: usize, scale: f32, o: &mut [f32]) {
    let d = q.len();
    let at = |j: usize| held.start(j, kv, d)..held.start(j, kv, d) + d;
    let mut scores: Vec<f32> = (0..held.tokens())
        .map(|j| dot(q, &held.keys[at(j)]) * scale)
        .collect();
    let sum = softmax_numerators(&mut scores);
    o.fill(0.0);
    for (j, p) in scores.iter().enumerate() {
        for (o, v) in o.iter_mut().zip(&held.values[at(j)]) {
            *o += p * v;
        }
    }
    for o in o.iter_mut() {
        *o /= sum;
    }
}

/// # Safety
/// AVX-512F; `q.len()` (= `o.len()`) is `16 * N`; `(kv + 1) * q.len() <= held.width`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn head_avx512<const N: usize>(
    q: &[f32],
    held: &Held<'_>,
    kv: usize,
    scale: f32,
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    use std::array::from_fn;
    let d = 16 * N;
    let tokens = held.tokens();
    let (kp, vp) = (held.keys.as_ptr(), held.values.as_ptr());
    // SAFETY (all loads): `q` holds `d` values; token `j`'s head (`d` values from
    // `j * width + kv * d`) is within `keys` and `values`.
    let qv: [__m512; N] = from_fn(|c| unsafe { _mm512_loadu_ps(q.as_ptr().add(16 * c)) });
    let mut scores = Vec::with_capacity(tokens);
    for j in 0..tokens {
        let k = held.start(j, kv, d);
        let mut acc = _mm512_setzero_ps();
        for (c, qc) in qv.iter().enumerate() {
            acc = _mm512_fmadd_ps(*qc, unsafe { _mm512_loadu_ps(kp.add(k + 16 * c)) }, acc);
        }
        scores.push(_mm512_reduce_add_ps(acc) * scale);
    }
    let sum = softmax_numerators(&mut scores);
    let mut acc = [_mm512_setzero_ps(); N];
    for (j, p) in scores.iter().enumerate() {
        let v = held.start(j, kv, d);
        let p = _mm512_set1_ps(*p);
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm512_fmadd_ps(p, unsafe { _mm512_loadu_ps(vp.add(v + 16 * c)) }, *a);
        }
    }
    let sum = _mm512_set1_ps(sum);
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: `o` holds `d` values.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr().add(16 * c), _mm512_div_ps(*a, sum)) };
    }
}

/// Turns scores into `exp(score - max)` and returns their sum.
fn softmax_numerators(scores: &mut [f32]) -> f32 {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    sum
}

/// `sum(a * b)` in eight lanes (as a vector unit sums).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}
