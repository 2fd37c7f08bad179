//! Attention masks, built on the device from two position ranges.
use gmlx_mlx::{Array, Dtype};

use crate::error::Result;

/// `[queries, keys]` visibility: the query at position `query_start + i` sees the key at
/// position `key_start + j` when the key is not after it and, with a `window`, when it is one
/// of the last `window` positions (the query's own included).
pub fn causal(
    query_start: i32,
    queries: i32,
    key_start: i32,
    keys: i32,
    window: Option<i32>,
) -> Result<Array> {
    let q = Array::arange::<_, i32>(query_start, query_start + queries, None)?
        .reshape(&[queries, 1])?;
    let k = Array::arange::<_, i32>(key_start, key_start + keys, None)?.reshape(&[1, keys])?;
    let mut visible = k.le(&q)?;
    if let Some(w) = window {
        let recent = q.subtract(&k)?.lt(Array::from_int(w))?;
        visible = visible.logical_and(&recent)?;
    }
    debug_assert_eq!(visible.dtype(), Dtype::Bool);
    Ok(visible)
}
