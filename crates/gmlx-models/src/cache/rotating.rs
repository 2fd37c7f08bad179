//! The cache of a sliding-window attention layer: the last `window` keys and values in a ring
//! buffer, so its memory is bounded by the window however long the sequence grows.
use gmlx_mlx::slicing::{slice, slice_update};
use gmlx_mlx::{ops, Array};

use super::{Attended, KeyMask};
use crate::blocks::mask;
use crate::error::Result;

/// Position `p` lives in slot `p % window`.
#[derive(Debug, Clone)]
pub struct RotatingKv {
    window: i32,
    keys: Option<Array>,
    values: Option<Array>,
    /// Positions held: `min(tokens seen, window)`.
    held: i32,
}

impl RotatingKv {
    pub fn new(window: i32) -> RotatingKv {
        RotatingKv {
            window: window.max(1),
            keys: None,
            values: None,
            held: 0,
        }
    }

    pub fn window(&self) -> i32 {
        self.window
    }

    /// Bytes of the ring buffers.
    pub fn nbytes(&self) -> usize {
        super::buffer_bytes(&self.keys, &self.values)
    }

    /// Appends the `n` tokens starting at `position`. One token attends to the whole ring
    /// (every slot is within its window, and attention does not depend on key order); a chunk
    /// attends to the held keys that any of its queries can still see, put back in position
    /// order, followed by its own, under a windowed causal mask.
    pub fn attend(&mut self, k: &Array, v: &Array, position: i32) -> Result<Attended> {
        let n = k.shape()[2];
        let w = self.window;
        let reach = self.held.min(position).min(w - 1);
        let (keys, values, mask) = if n == 1 {
            self.store(k, v, position)?;
            let keys = self.filled(self.keys.as_ref())?;
            let values = self.filled(self.values.as_ref())?;
            (keys, values, KeyMask::All)
        } else {
            let order: Vec<i32> = (position - reach..position).map(|p| p % w).collect();
            let joined = |ring: Option<&Array>, new: &Array| -> Result<Array> {
                match ring {
                    Some(ring) if reach > 0 => {
                        let idx = Array::from_slice(&order, &[reach]);
                        Ok(ops::concatenate(
                            &[ring.take_axis(&idx, 2)?, new.clone()],
                            2,
                        )?)
                    }
                    _ => Ok(new.clone()),
                }
            };
            let keys = joined(self.keys.as_ref(), k)?;
            let values = joined(self.values.as_ref(), v)?;
            let mask = mask::causal(position, n, position - reach, reach + n, Some(w))?;
            self.store(k, v, position)?;
            (keys, values, KeyMask::Array(mask))
        };
        Ok(Attended { keys, values, mask })
    }

    /// The held slots (all of them once the ring is full; slots `0..held` are positions
    /// `0..held` before that).
    fn filled(&self, ring: Option<&Array>) -> Result<Array> {
        let ring = ring.expect("stored before reading");
        let s = ring.shape();
        Ok(slice(ring, &[0, 0, 0, 0], &[s[0], s[1], self.held, s[3]])?)
    }

    /// Writes the last `min(n, window)` of the new tokens into their slots.
    fn store(&mut self, k: &Array, v: &Array, position: i32) -> Result<()> {
        let n = k.shape()[2];
        let w = self.window;
        let kept = n.min(w);
        let first = position + n - kept;
        let start = first % w;
        let run = kept.min(w - start);
        // (slot range, range within the new tokens): one run, or two when it wraps
        let mut runs = vec![(start, n - kept, run)];
        if run < kept {
            runs.push((0, n - kept + run, kept - run));
        }
        for (ring, new) in [(&mut self.keys, k), (&mut self.values, v)] {
            let s = new.shape().to_vec();
            let mut buf = match ring.take() {
                Some(b) => b,
                None => ops::zeros_dtype(&[s[0], s[1], w, s[3]], new.dtype())?,
            };
            for &(slot, from, len) in &runs {
                let part = slice(new, &[0, 0, from, 0], &[s[0], s[1], from + len, s[3]])?;
                buf = slice_update(
                    &buf,
                    &part,
                    &[0, 0, slot, 0],
                    &[s[0], s[1], slot + len, s[3]],
                )?;
            }
            *ring = Some(buf);
        }
        self.held = (position + n).min(w);
        Ok(())
    }
}
