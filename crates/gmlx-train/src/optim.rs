//! AdamW over a list of arrays, and the learning-rate schedule.
use gmlx_mlx::{ops, Array};

use crate::error::Result;

/// Linear warmup to the peak rate, then cosine decay to zero at the last step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    pub peak: f32,
    pub warmup: usize,
    pub total: usize,
}

impl Schedule {
    /// The rate for optimizer step `step` (1-based).
    pub fn at(&self, step: usize) -> f32 {
        if step <= self.warmup && self.warmup > 0 {
            return self.peak * step as f32 / self.warmup as f32;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f32;
        let t = (step.saturating_sub(self.warmup)) as f32 / span;
        // Cosine from the peak (just after warmup) to zero (after the last step).
        let t = (t - 1.0 / span).clamp(0.0, 1.0);
        self.peak * 0.5 * (1.0 + (std::f32::consts::PI * t).cos())
    }
}

/// AdamW (decoupled weight decay): its state exists only for the arrays it is given.
#[derive(Debug)]
pub struct AdamW {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    m: Vec<Array>,
    v: Vec<Array>,
    t: i32,
}

impl AdamW {
    pub fn new(params: &[Array], weight_decay: f32) -> Result<AdamW> {
        let zeros = |p: &Array| ops::zeros_like(p);
        Ok(AdamW {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay,
            m: params
                .iter()
                .map(zeros)
                .collect::<std::result::Result<_, _>>()?,
            v: params
                .iter()
                .map(zeros)
                .collect::<std::result::Result<_, _>>()?,
            t: 0,
        })
    }

    /// The optimizer state (for evaluation together with the parameters).
    pub fn state(&self) -> impl Iterator<Item = &Array> {
        self.m.iter().chain(&self.v)
    }

    /// One step: `p ← p·(1 − lr·wd) − lr·m̂/(√v̂ + ε)`.
    pub fn update(&mut self, params: &mut [Array], grads: &[Array], lr: f32) -> Result<()> {
        self.t += 1;
        let f = Array::from_f32;
        let c1 = 1.0 - self.beta1.powi(self.t);
        let c2 = 1.0 - self.beta2.powi(self.t);
        for ((p, g), (m, v)) in params
            .iter_mut()
            .zip(grads)
            .zip(self.m.iter_mut().zip(self.v.iter_mut()))
        {
            *m = m
                .multiply(f(self.beta1))?
                .add(g.multiply(f(1.0 - self.beta1))?)?;
            *v = v
                .multiply(f(self.beta2))?
                .add(g.square()?.multiply(f(1.0 - self.beta2))?)?;
            let m_hat = m.divide(f(c1))?;
            let v_hat = v.divide(f(c2))?;
            let step = m_hat.divide(ops::sqrt(&v_hat)?.add(f(self.eps))?)?;
            let decayed = p.multiply(f(1.0 - lr * self.weight_decay))?;
            *p = decayed.subtract(step.multiply(f(lr))?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_zero() {
        let s = Schedule {
            peak: 1.0,
            warmup: 2,
            total: 10,
        };
        assert_eq!(s.at(1), 0.5);
        assert_eq!(s.at(2), 1.0);
        assert!((s.at(3) - 1.0).abs() < 1e-6);
        assert!(s.at(6) < 1.0 && s.at(6) > s.at(9));
        assert!(s.at(10) < 0.05);
    }

    #[test]
    fn adamw_first_step_moves_by_lr_against_the_gradient() -> Result<()> {
        let mut p = vec![Array::from_slice(&[1.0f32, -2.0], &[2])];
        let g = vec![Array::from_slice(&[0.5f32, -3.0], &[2])];
        let mut opt = AdamW::new(&p, 0.0)?;
        opt.update(&mut p, &g, 0.1)?;
        let got = p[0].as_slice::<f32>().to_vec();
        assert!(
            (got[0] - 0.9).abs() < 1e-5 && (got[1] + 1.9).abs() < 1e-5,
            "{got:?}"
        );
        Ok(())
    }
}
