//! Batch-invariant mode (`GMLX_BATCH_INVARIANT=1`): the products that decide discrete choices
//! or compound over a sequence (MoE routers, the gated-DeltaNet decay and strength gates) give
//! every row bitwise the same result whatever else shares the product: a prefill chunk of
//! another size, other sequences in a decode batch. Matrix kernels pick their blocking and
//! reduction order by the number of rows; these few products are instead computed as one
//! one-row product per row (`Linear::forward_row_invariant`).
use std::sync::atomic::{AtomicU8, Ordering};

const UNSET: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(UNSET);

/// Whether batch-invariant mode is on: [`set`] if called, else `GMLX_BATCH_INVARIANT=1`.
pub fn enabled() -> bool {
    match MODE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = std::env::var("GMLX_BATCH_INVARIANT").is_ok_and(|v| v == "1");
            MODE.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// Turns batch-invariant mode on or off for the process (overrides the environment).
pub fn set(on: bool) {
    MODE.store(if on { ON } else { OFF }, Ordering::Relaxed);
}
