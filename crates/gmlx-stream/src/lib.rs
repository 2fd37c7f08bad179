//! gmlx-stream: MoE models larger than memory. Every-token weights (attention, norms,
//! routers, shared experts, the output head) stay resident; routed experts are read from the
//! GGUF when the router picks them, into a bounded arena of slots per layer, by feeder
//! threads. The model's forward code is the resident one: it reaches the experts through
//! `gmlx_models`' `ExpertStore`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use gmlx_models::{load, LoadOptions};
//! use gmlx_stream::{StreamOptions, StreamedExperts};
//!
//! let experts = Arc::new(StreamedExperts::new(StreamOptions {
//!     arena_bytes: 512 << 20, // over all MoE layers
//!     ..StreamOptions::default()
//! }));
//! let options = LoadOptions {
//!     experts: Some(experts.clone()),
//!     ..LoadOptions::default()
//! };
//! let loaded = load("qwen3moe.gguf", &options)?;
//! // ... generate ...
//! if let Some(report) = experts.report() {
//!     println!("{report}"); // slots, hit rate, evictions, bytes read
//! }
//! # Ok::<(), gmlx_models::Error>(())
//! ```
pub mod arena;
mod error;
pub mod feeder;
pub mod mass;
pub mod moe_routes;
pub mod reader;
mod stats;
mod store;

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gmlx_gguf::GgufFile;
use gmlx_mlx::Dtype;
use gmlx_models::blocks::moe::{ExpertPlacement, ExpertStore, ExpertTensors};

pub use error::{Error, Result};
pub use mass::{ExpertMass, ExpertProbe};
pub use moe_routes::{RouteRecorder, RouteReplayer};
pub use reader::{ExpertReader, FileReader};
pub use stats::{StreamReport, StreamStats};
pub use store::StreamedStore;

use store::{Shared, Source};

/// Expert ids (`[n, k]`, any integer dtype) on the host, row-major.
pub(crate) fn host_ids(indices: &gmlx_mlx::Array) -> gmlx_mlx::Result<Vec<u32>> {
    let ids = indices.as_dtype(Dtype::Uint32)?.contiguous()?;
    ids.eval()?;
    Ok(ids.as_slice::<u32>().to_vec())
}

/// How routed experts are streamed.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Bytes of slots over all MoE layers (each layer gets the same number of slots, at
    /// least one, at most its expert count).
    pub arena_bytes: u64,
    /// A read not back after this long fails the step that needs it.
    pub read_timeout: Duration,
    /// Feeder threads.
    pub feeders: usize,
    /// Slots per layer, in place of what `arena_bytes` gives.
    pub slots: Option<usize>,
    /// Verification: empty every slot before each decode step, so that every step reads all
    /// of its experts again (results must not depend on what the arena held).
    pub flush_every_step: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            arena_bytes: 1 << 30,
            read_timeout: Duration::from_secs(30),
            feeders: 4,
            slots: None,
            flush_every_step: false,
        }
    }
}

/// The placement that streams a model's routed experts: one per loaded model (a second model
/// is refused).
#[derive(Debug)]
pub struct StreamedExperts {
    options: StreamOptions,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// A reader given by the caller (tests inject faults through one).
    reader: Option<Arc<dyn ExpertReader>>,
    shared: Option<Shared>,
    /// The model this placement streams.
    model: Option<std::path::PathBuf>,
    slots: usize,
    experts: usize,
    arena_bytes: u64,
}

impl StreamedExperts {
    pub fn new(options: StreamOptions) -> StreamedExperts {
        StreamedExperts {
            options,
            state: Mutex::new(State::default()),
        }
    }

    /// Reads through `reader` instead of opening the model's files.
    pub fn with_reader(options: StreamOptions, reader: Arc<dyn ExpertReader>) -> StreamedExperts {
        let s = StreamedExperts::new(options);
        s.lock().reader = Some(reader);
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the streamed model did so far (`None` before it loaded).
    pub fn report(&self) -> Option<StreamReport> {
        let state = self.lock();
        let shared = state.shared.as_ref()?;
        let stats = stats::lock(&shared.stats).clone();
        Some(StreamReport {
            stats,
            feeders: shared.feeders.stats(),
            slots: state.slots,
            experts: state.experts,
            arena_bytes: state.arena_bytes,
            direct_reads: shared.reader.bypasses_cache(),
        })
    }

    /// The reader, feeders and slot count, made at the first layer.
    fn shared(&self, file: &GgufFile, experts: usize, dtype: Dtype) -> Result<(Shared, usize)> {
        let mut state = self.lock();
        let path = file
            .paths()
            .first()
            .map(|p| p.to_path_buf())
            .unwrap_or_default();
        if let Some(shared) = &state.shared {
            if state.model.as_ref() != Some(&path) {
                return Err(Error::OtherModel {
                    streams: state.model.clone().unwrap_or_default(),
                    asked: path,
                });
            }
            return Ok((shared.clone(), state.slots));
        }
        let reader = match &state.reader {
            Some(r) => Arc::clone(r),
            None => {
                let paths = file.paths();
                let reader = FileReader::open(&paths)
                    .map_err(|(path, source)| Error::Open { path, source })?;
                Arc::new(reader) as Arc<dyn ExpertReader>
            }
        };
        // one slot in every MoE layer: the layers' codecs may differ (Q4_K_M files keep some
        // down projections in Q6_K, held dense)
        let mut per_slot = 0u64;
        let mut moe_layers = 0;
        for info in file.tensors() {
            let name = &info.name;
            if [".ffn_gate_exps.", ".ffn_up_exps.", ".ffn_down_exps."]
                .iter()
                .any(|p| name.contains(p))
            {
                per_slot += Source::new(file, info)?.empty_stack(1, dtype)?.nbytes() as u64;
                moe_layers += u64::from(name.contains(".ffn_gate_exps."));
            }
        }
        let by_bytes = self.options.arena_bytes / per_slot.max(1);
        let slots =
            (self.options.slots.map_or(by_bytes, |s| s as u64)).clamp(1, experts as u64) as usize;
        let shared = Shared {
            reader,
            feeders: Arc::new(feeder::Feeders::new(self.options.feeders)?),
            timeout: self.options.read_timeout,
            flush_every_step: self.options.flush_every_step,
            stats: Arc::new(Mutex::new(StreamStats::default())),
        };
        state.shared = Some(shared.clone());
        state.model = Some(path);
        state.slots = slots;
        state.experts = experts;
        state.arena_bytes = slots as u64 * per_slot;
        tracing::info!(
            "streaming experts: {slots} of {experts} per layer in the arena ({} MoE layers)",
            moe_layers
        );
        Ok((shared, slots))
    }

    fn make_store(
        &self,
        file: &GgufFile,
        tensors: ExpertTensors<'_>,
        dtype: Dtype,
    ) -> Result<StreamedStore> {
        let sources = [
            Source::new(file, tensors.gate)?,
            Source::new(file, tensors.up)?,
            Source::new(file, tensors.down)?,
        ];
        let experts = tensors.gate.dims.get(2).copied().unwrap_or(1) as usize;
        let (shared, slots) = self.shared(file, experts, dtype)?;
        StreamedStore::new(tensors.layer, sources, experts, slots, dtype, shared)
    }
}

impl ExpertPlacement for StreamedExperts {
    fn store(
        &self,
        file: &GgufFile,
        tensors: ExpertTensors<'_>,
        dtype: Dtype,
    ) -> gmlx_models::Result<Rc<dyn ExpertStore>> {
        match self.make_store(file, tensors, dtype) {
            Ok(store) => Ok(Rc::new(store)),
            Err(e) => Err(gmlx_models::Error::Experts {
                layer: tensors.layer,
                source: Box::new(e),
            }),
        }
    }
}
