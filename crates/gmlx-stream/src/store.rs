//! The streamed store of one MoE layer: three stacks of slots (gate, up, down) that the
//! layer's products gather from, an [`Arena`] deciding which expert sits in which slot, and
//! the model's shared feeders and reader.
//!
//! At decode, the experts a step needs that are not in a slot are read (bypassing the page
//! cache where the file system allows it) and bound into the slots the arena frees; the
//! products then gather straight from the slots. A prefill, or a step that needs more
//! experts than there are slots, reads its experts through the page cache into stacks made
//! for that step only.
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gmlx_gguf::{GgmlType, GgufFile, TensorInfo};
use gmlx_mlx::quant::HostMatrix;
use gmlx_mlx::{Array, Dtype, QuantWeight};
use gmlx_models::blocks::moe::{gather_selected, ExpertProj, ExpertStore, Selection};
use gmlx_models::blocks::visit::WeightVisitor;

use crate::arena::Arena;
use crate::error::{Error, Result};
use crate::feeder::{Feeders, Task};
use crate::reader::ExpertReader;
use crate::stats::StreamStats;

/// Where one expert matrix of a stack lies in the files.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub name: String,
    codec: GgmlType,
    shard: usize,
    /// Offset of expert 0's first byte in its file.
    offset: u64,
    pub expert_bytes: u64,
    /// One expert's dims, ggml order (`[cols, rows]`).
    dims: [u64; 2],
}

impl Source {
    pub fn new(file: &GgufFile, info: &TensorInfo) -> Result<Source> {
        let (shard, _, offset) = file
            .tensor_location(info)
            .ok_or_else(|| Error::NoLocation {
                tensor: info.name.clone(),
            })?;
        let experts = info.dims.get(2).copied().unwrap_or(1).max(1);
        Ok(Source {
            name: info.name.clone(),
            codec: info.ggml_type,
            shard,
            offset,
            expert_bytes: info.n_bytes / experts,
            dims: [info.dims[0], info.dims[1]],
        })
    }

    /// `(rows, cols)` of one expert matrix.
    pub fn shape(&self) -> (i32, i32) {
        (self.dims[1] as i32, self.dims[0] as i32)
    }

    pub fn empty_stack(&self, slots: usize, dtype: Dtype) -> Result<QuantWeight> {
        Ok(QuantWeight::empty_stack(
            self.name.clone(),
            self.codec,
            slots as i32,
            self.shape(),
            dtype,
        )?)
    }

    /// A feeder task reading and decoding `expert`.
    fn task(&self, reader: &Arc<dyn ExpertReader>, expert: u32, direct: bool) -> Task<HostMatrix> {
        let (reader, source) = (Arc::clone(reader), self.clone());
        Box::new(move || {
            let mut buf = vec![0u8; source.expert_bytes as usize];
            let at = source.offset + u64::from(expert) * source.expert_bytes;
            let read = if direct {
                reader.read_direct(source.shard, at, &mut buf)
            } else {
                reader.read_cached(source.shard, at, &mut buf)
            };
            read.map_err(|e| Error::Read {
                tensor: source.name.clone(),
                expert,
                source: e,
            })?;
            HostMatrix::decode(source.codec, &buf, &source.dims).map_err(|e| Error::Decode {
                tensor: source.name.clone(),
                expert,
                source: e,
            })
        })
    }
}

/// What every layer's store shares: the reader, the feeders, the read deadline, the counters.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub reader: Arc<dyn ExpertReader>,
    pub feeders: Arc<Feeders<HostMatrix>>,
    pub timeout: Duration,
    pub flush_every_step: bool,
    pub stats: Arc<Mutex<StreamStats>>,
}

/// One MoE layer's experts, streamed.
#[derive(Debug)]
pub struct StreamedStore {
    layer: usize,
    sources: [Source; 3],
    /// gate, up, down: `[slots, rows, cols]` each.
    slots: RefCell<[QuantWeight; 3]>,
    arena: RefCell<Arena>,
    dtype: Dtype,
    shared: Shared,
}

impl StreamedStore {
    pub(crate) fn new(
        layer: usize,
        sources: [Source; 3],
        experts: usize,
        slots: usize,
        dtype: Dtype,
        shared: Shared,
    ) -> Result<StreamedStore> {
        let stacks = [
            sources[0].empty_stack(slots, dtype)?,
            sources[1].empty_stack(slots, dtype)?,
            sources[2].empty_stack(slots, dtype)?,
        ];
        Ok(StreamedStore {
            layer,
            sources,
            slots: RefCell::new(stacks),
            arena: RefCell::new(Arena::new(slots, experts)),
            dtype,
            shared,
        })
    }

    /// Reads `experts`' three matrices each on the feeders: `[gate, up, down]` per expert.
    fn read(&self, experts: &[u32], direct: bool) -> Result<Vec<HostMatrix>> {
        let tasks: Vec<Task<HostMatrix>> = experts
            .iter()
            .flat_map(|&e| {
                self.sources
                    .iter()
                    .map(move |s| s.task(&self.shared.reader, e, direct))
            })
            .collect();
        let timeout_ms = self.shared.timeout.as_millis() as u64;
        let got = self
            .shared
            .feeders
            .fetch(tasks, self.shared.timeout, |i| Error::Stalled {
                tensor: self.sources[i % 3].name.clone(),
                expert: experts[i / 3],
                timeout_ms,
            });
        let bytes: u64 = self.sources.iter().map(|s| s.expert_bytes).sum();
        let mut stats = crate::stats::lock(&self.shared.stats);
        match &got {
            Ok(_) => stats.bytes_read += bytes * experts.len() as u64,
            Err(Error::Stalled { .. }) => stats.stalled_steps += 1,
            Err(_) => stats.failed_steps += 1,
        }
        got
    }

    /// The step's experts bound into slots: the indices of their slots, or `None` when they
    /// do not fit the arena.
    fn select_in_arena(&self, ids: &[u32], shape: &[i32]) -> Result<Option<Selection>> {
        if self.shared.flush_every_step {
            self.arena.borrow_mut().clear();
        }
        let Some(plan) = self.arena.borrow_mut().plan(ids) else {
            return Ok(None);
        };
        if !plan.loads.is_empty() {
            let experts: Vec<u32> = plan.loads.iter().map(|&(e, _)| e).collect();
            let matrices = self.read(&experts, true)?;
            let mut slots = self.slots.borrow_mut();
            for (&(expert, slot), three) in plan.loads.iter().zip(matrices.chunks(3)) {
                for (stack, m) in slots.iter_mut().zip(three) {
                    stack.bind_expert(slot as i32, m)?;
                }
                self.arena.borrow_mut().bind(expert, slot);
            }
        }
        let slot_of: BTreeMap<u32, usize> = plan.slots.into_iter().collect();
        let mapped: Vec<u32> = ids.iter().map(|e| slot_of[e] as u32).collect();
        self.record();
        Ok(Some(Selection {
            indices: Array::from_slice(&mapped, shape),
            stacks: None,
        }))
    }

    /// The step's experts read into stacks made for this step, in ascending expert order.
    fn select_transient(&self, ids: &[u32], shape: &[i32]) -> Result<Selection> {
        let mut distinct = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let matrices = self.read(&distinct, false)?;
        let stack = |p: usize| -> Result<QuantWeight> {
            let parts: Vec<HostMatrix> = matrices.iter().skip(p).step_by(3).cloned().collect();
            let host = HostMatrix::concat(&parts).ok_or_else(|| {
                Error::Mlx(gmlx_mlx::Error::SlotForm {
                    tensor: self.sources[p].name.clone(),
                })
            })?;
            Ok(QuantWeight::from_host(
                self.sources[p].name.clone(),
                self.sources[p].codec,
                &host,
                distinct.len() as i32,
                self.sources[p].shape(),
                self.dtype,
            )?)
        };
        let stacks = [stack(0)?, stack(1)?, stack(2)?];
        let mapped: Vec<u32> = ids
            .iter()
            .map(|e| distinct.binary_search(e).unwrap_or(0) as u32)
            .collect();
        crate::stats::lock(&self.shared.stats).transient_steps += 1;
        Ok(Selection {
            indices: Array::from_slice(&mapped, shape),
            stacks: Some(Rc::new(stacks)),
        })
    }

    fn record(&self) {
        let arena = self.arena.borrow().stats();
        crate::stats::lock(&self.shared.stats)
            .layers
            .insert(self.layer, arena);
    }

    fn select_ids(&self, indices: &Array, prefill: bool) -> Result<Selection> {
        let ids = crate::host_ids(indices)?;
        let experts = self.arena.borrow().experts();
        if let Some(&expert) = ids.iter().find(|&&e| e as usize >= experts) {
            return Err(Error::NoExpert {
                tensor: self.sources[0].name.clone(),
                expert,
                experts,
            });
        }
        let shape = indices.shape().to_vec();
        if !prefill {
            if let Some(selection) = self.select_in_arena(&ids, &shape)? {
                return Ok(selection);
            }
        }
        self.select_transient(&ids, &shape)
    }
}

impl ExpertStore for StreamedStore {
    fn select(&self, indices: &Array, prefill: bool) -> gmlx_models::Result<Selection> {
        self.select_ids(indices, prefill)
            .map_err(|e| gmlx_models::Error::Experts {
                layer: self.layer,
                source: Box::new(e),
            })
    }

    fn gather_matmul(
        &self,
        proj: ExpertProj,
        x: &Array,
        selection: &Selection,
    ) -> gmlx_models::Result<Array> {
        gather_selected(&self.slots.borrow()[proj as usize], proj, x, selection)
    }

    /// Nothing: the slots change between steps, so they are not weights a visitor could keep
    /// (their bytes are in [`crate::StreamReport`]).
    fn visit<'m>(&'m self, _v: &mut dyn WeightVisitor<'m>) {}
}
