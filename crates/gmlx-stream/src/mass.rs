//! Expert mass: `ExpertMass` keeps each token's experts in descending weight until their
//! weights reach a fraction `P` of the total (always the first), and rescales the kept ones to
//! the original total; a dropped expert's slot repeats the first expert with weight 0, so it
//! costs no read. `ExpertProbe` changes nothing: for a grid of `P`, it counts the experts a
//! token would need and the mass it would drop, prefill and decode apart.
use std::cell::RefCell;
use std::fmt;

use gmlx_mlx::{Array, Dtype};
use gmlx_models::blocks::moe::{RouteAt, RouteHook, Router, Routing};

/// The `P`s the probe reports.
pub const PROBE_GRID: [f32; 7] = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];

/// Host copies of a routing's indices and weights.
fn host(routing: &Routing) -> gmlx_models::Result<(Vec<u32>, Vec<f32>, usize)> {
    let k = routing.indices.shape()[1].max(1) as usize;
    let ids = routing
        .indices
        .contiguous()
        .map_err(gmlx_mlx::Error::from)?;
    let w = routing
        .weights
        .as_dtype(Dtype::Float32)
        .and_then(|w| w.contiguous())
        .map_err(gmlx_mlx::Error::from)?;
    gmlx_mlx::mlx_rs::transforms::eval([&ids, &w]).map_err(gmlx_mlx::Error::from)?;
    Ok((
        ids.as_slice::<u32>().to_vec(),
        w.as_slice::<f32>().to_vec(),
        k,
    ))
}

/// Positions of `weights` in descending order (ties: the earlier first).
fn descending(weights: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
    order
}

/// How many of the descending `weights` reach `p` of their total (at least one), and their sum.
fn needed(weights: &[f32], order: &[usize], p: f32) -> (usize, f32) {
    let total: f32 = weights.iter().sum();
    let mut kept = 0.0;
    for (n, &i) in order.iter().enumerate() {
        kept += weights[i];
        if kept >= p * total {
            return (n + 1, kept);
        }
    }
    (order.len(), kept)
}

/// Keeps the experts of each token that carry a fraction `p` of its routing weight.
#[derive(Debug, Clone, Copy)]
pub struct ExpertMass {
    p: f32,
}

/// `P` outside (0, 1].
#[derive(Debug, thiserror::Error)]
#[error("expert mass {0} is not in (0, 1]")]
pub struct BadMass(pub f32);

impl ExpertMass {
    pub fn new(p: f32) -> Result<ExpertMass, BadMass> {
        if p > 0.0 && p <= 1.0 {
            Ok(ExpertMass { p })
        } else {
            Err(BadMass(p))
        }
    }
}

impl RouteHook for ExpertMass {
    fn route(
        &self,
        _at: &RouteAt<'_>,
        _router: &Router,
        routing: Routing,
    ) -> gmlx_models::Result<Routing> {
        if self.p >= 1.0 {
            return Ok(routing);
        }
        let (mut ids, mut weights, k) = host(&routing)?;
        for (row_ids, row_w) in ids.chunks_mut(k).zip(weights.chunks_mut(k)) {
            let order = descending(row_w);
            let total: f32 = row_w.iter().sum();
            let (keep, kept) = needed(row_w, &order, self.p);
            let first = row_ids[order[0]];
            let scale = if kept > 0.0 { total / kept } else { 1.0 };
            for (rank, &i) in order.iter().enumerate() {
                if rank < keep {
                    row_w[i] *= scale;
                } else {
                    row_w[i] = 0.0;
                    row_ids[i] = first;
                }
            }
        }
        let shape = routing.indices.shape().to_vec();
        let dtype = routing.weights.dtype();
        Ok(Routing {
            scores: routing.scores,
            indices: Array::from_slice(&ids, &shape),
            weights: Array::from_slice(&weights, &shape)
                .as_dtype(dtype)
                .map_err(gmlx_mlx::Error::from)?,
        })
    }
}

/// Sums over the tokens of one phase.
#[derive(Debug, Clone, Copy, Default)]
pub struct PhaseProbe {
    /// Token-layer pairs seen.
    pub rows: u64,
    /// Experts the router picked, summed.
    pub picked: u64,
    /// Per `P` of [`PROBE_GRID`]: experts needed, summed.
    pub needed: [u64; 7],
    /// Per `P`: the fraction of weight dropped, summed.
    pub dropped: [f64; 7],
}

/// Counts, without changing anything, what [`ExpertMass`] would keep at each `P`.
#[derive(Debug, Default)]
pub struct ExpertProbe {
    /// Prefill, decode.
    phases: RefCell<[PhaseProbe; 2]>,
}

impl ExpertProbe {
    pub fn new() -> ExpertProbe {
        ExpertProbe::default()
    }

    /// `[prefill, decode]`.
    pub fn phases(&self) -> [PhaseProbe; 2] {
        *self.phases.borrow()
    }
}

impl RouteHook for ExpertProbe {
    fn route(
        &self,
        at: &RouteAt<'_>,
        _router: &Router,
        routing: Routing,
    ) -> gmlx_models::Result<Routing> {
        let (_, weights, k) = host(&routing)?;
        let mut phases = self.phases.borrow_mut();
        let phase = &mut phases[usize::from(!at.prefill())];
        for row in weights.chunks(k) {
            let order = descending(row);
            let total: f32 = row.iter().sum();
            phase.rows += 1;
            phase.picked += k as u64;
            for (g, &p) in PROBE_GRID.iter().enumerate() {
                let (n, kept) = needed(row, &order, p);
                phase.needed[g] += n as u64;
                if total > 0.0 {
                    phase.dropped[g] += f64::from(1.0 - kept / total).max(0.0);
                }
            }
        }
        Ok(routing)
    }
}

impl fmt::Display for ExpertProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "expert probe: experts needed per token and weight dropped, by mass P"
        )?;
        for (name, phase) in ["prefill", "decode"].iter().zip(self.phases()) {
            if phase.rows == 0 {
                writeln!(f, "{name:>8}: no tokens")?;
                continue;
            }
            let n = phase.rows as f64;
            write!(f, "{name:>8}: {:.2} picked;", phase.picked as f64 / n)?;
            for (g, p) in PROBE_GRID.iter().enumerate() {
                write!(
                    f,
                    " P={p}: {:.2} ({:.1}%)",
                    phase.needed[g] as f64 / n,
                    100.0 * phase.dropped[g] / n
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_experts_up_to_the_mass_are_kept() {
        let w = [0.1, 0.5, 0.15, 0.25];
        let order = descending(&w);
        assert_eq!(order, vec![1, 3, 2, 0]);
        assert_eq!(needed(&w, &order, 0.5), (1, 0.5));
        assert_eq!(needed(&w, &order, 0.7).0, 2);
        assert_eq!(needed(&w, &order, 0.76).0, 3);
        assert_eq!(needed(&w, &order, 1.0).0, 4);
        assert_eq!(needed(&w, &order, 0.01).0, 1, "always the first");
        assert!(ExpertMass::new(0.0).is_err() && ExpertMass::new(1.5).is_err());
        assert!(ExpertMass::new(1.0).is_ok());
    }
}
