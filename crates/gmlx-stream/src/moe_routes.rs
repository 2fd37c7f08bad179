//! `gmlx_stream::moe_routes`: record a forward's expert choice per MoE layer and position, and
//! replay it in a later forward over the same positions. Replayed steps use the recorded
//! experts with the weights their router gives them now, so a replay of the same tokens gives
//! the recorded logits; a position with no recorded route is refused.
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gmlx_mlx::Array;
use gmlx_models::blocks::moe::{RouteAt, RouteHook, Router, Routing};
use serde::{Deserialize, Serialize};

/// The file's format name.
const FORMAT: &str = "gmlx-moe-routes";

/// Why routes could not be recorded, read or replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RoutesError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a routes file: {source}", path.display())]
    Format {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: format {found:?}, version {version} (expected {FORMAT:?} version 1)", path.display())]
    Version {
        path: PathBuf,
        found: String,
        version: u32,
    },
    /// A replay reached a position the record does not have.
    #[error("no recorded route for layer {layer} at position {position} (the record covers positions {first}..={last})")]
    NoRoute {
        layer: usize,
        position: i32,
        first: i32,
        last: i32,
    },
    /// The record names an expert the layer does not have (a record of another model).
    #[error(
        "layer {layer} position {position}: expert {expert} recorded, the layer has {experts}"
    )]
    NoExpert {
        layer: usize,
        position: i32,
        expert: u32,
        experts: i32,
    },
    /// The record chose another number of experts per token than this router.
    #[error(
        "layer {layer} position {position}: {recorded} recorded experts, the router picks {top_k}"
    )]
    TopK {
        layer: usize,
        position: i32,
        recorded: usize,
        top_k: i32,
    },
    #[error("recording routes needs one sequence per forward, not {rows}")]
    Batch { rows: usize },
    #[error(transparent)]
    Mlx(#[from] gmlx_mlx::Error),
}

/// One route: layer, position, experts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub layer: usize,
    pub position: i32,
    pub experts: Vec<u32>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RoutesFile {
    format: String,
    version: u32,
    routes: Vec<Route>,
}

/// Routes by (layer, position).
pub type Routes = BTreeMap<(usize, i32), Vec<u32>>;

fn boxed(layer: usize, e: RoutesError) -> gmlx_models::Error {
    gmlx_models::Error::Routing {
        layer,
        source: Box::new(e),
    }
}

/// Records every MoE layer's expert choice (as finally used) per position.
#[derive(Debug, Default)]
pub struct RouteRecorder {
    routes: RefCell<Routes>,
}

impl RouteRecorder {
    pub fn new() -> RouteRecorder {
        RouteRecorder::default()
    }

    pub fn routes(&self) -> Routes {
        self.routes.borrow().clone()
    }

    /// Writes the record as JSON.
    pub fn save(&self, path: &Path) -> Result<(), RoutesError> {
        let file = RoutesFile {
            format: FORMAT.to_owned(),
            version: 1,
            routes: self
                .routes
                .borrow()
                .iter()
                .map(|(&(layer, position), experts)| Route {
                    layer,
                    position,
                    experts: experts.clone(),
                })
                .collect(),
        };
        let text = serde_json::to_string(&file).map_err(|source| RoutesError::Format {
            path: path.to_owned(),
            source,
        })?;
        std::fs::write(path, text).map_err(|source| RoutesError::Io {
            path: path.to_owned(),
            source,
        })
    }

    fn record(&self, at: &RouteAt<'_>, routing: &Routing) -> Result<(), RoutesError> {
        if at.positions.len() != 1 {
            return Err(RoutesError::Batch {
                rows: at.positions.len(),
            });
        }
        let ids = crate::host_ids(&routing.indices)?;
        let k = routing.indices.shape()[1].max(1) as usize;
        let mut routes = self.routes.borrow_mut();
        for (row, experts) in ids.chunks(k).enumerate() {
            routes.insert((at.layer, at.position(row)), experts.to_vec());
        }
        Ok(())
    }
}

impl RouteHook for RouteRecorder {
    fn route(
        &self,
        at: &RouteAt<'_>,
        _router: &Router,
        routing: Routing,
    ) -> gmlx_models::Result<Routing> {
        self.record(at, &routing).map_err(|e| boxed(at.layer, e))?;
        Ok(routing)
    }
}

/// Replaces every MoE layer's expert choice by a record's.
#[derive(Debug)]
pub struct RouteReplayer {
    routes: Routes,
}

impl RouteReplayer {
    pub fn new(routes: Routes) -> RouteReplayer {
        RouteReplayer { routes }
    }

    /// Reads a record written by [`RouteRecorder::save`].
    pub fn from_file(path: &Path) -> Result<RouteReplayer, RoutesError> {
        let text = std::fs::read_to_string(path).map_err(|source| RoutesError::Io {
            path: path.to_owned(),
            source,
        })?;
        let file: RoutesFile =
            serde_json::from_str(&text).map_err(|source| RoutesError::Format {
                path: path.to_owned(),
                source,
            })?;
        if file.format != FORMAT || file.version != 1 {
            return Err(RoutesError::Version {
                path: path.to_owned(),
                found: file.format,
                version: file.version,
            });
        }
        Ok(RouteReplayer::new(
            file.routes
                .into_iter()
                .map(|r| ((r.layer, r.position), r.experts))
                .collect(),
        ))
    }

    /// The recorded experts of every row (ids below `experts`).
    fn recorded(
        &self,
        at: &RouteAt<'_>,
        rows: usize,
        k: i32,
        experts: i32,
    ) -> Result<Vec<u32>, RoutesError> {
        let count = experts;
        let span = || {
            let mut positions = self
                .routes
                .keys()
                .filter(|(l, _)| *l == at.layer)
                .map(|&(_, p)| p);
            let first = positions.next().unwrap_or(0);
            (first, positions.next_back().unwrap_or(first))
        };
        let mut ids = Vec::with_capacity(rows * k as usize);
        for row in 0..rows {
            let position = at.position(row);
            let Some(experts) = self.routes.get(&(at.layer, position)) else {
                let (first, last) = span();
                return Err(RoutesError::NoRoute {
                    layer: at.layer,
                    position,
                    first,
                    last,
                });
            };
            if experts.len() != k as usize {
                return Err(RoutesError::TopK {
                    layer: at.layer,
                    position,
                    recorded: experts.len(),
                    top_k: k,
                });
            }
            if let Some(&bad) = experts.iter().find(|&&e| e as i64 >= i64::from(count)) {
                return Err(RoutesError::NoExpert {
                    layer: at.layer,
                    position,
                    expert: bad,
                    experts: count,
                });
            }
            ids.extend_from_slice(experts);
        }
        Ok(ids)
    }
}

impl RouteHook for RouteReplayer {
    fn route(
        &self,
        at: &RouteAt<'_>,
        router: &Router,
        routing: Routing,
    ) -> gmlx_models::Result<Routing> {
        let shape = routing.indices.shape().to_vec();
        let ids = self
            .recorded(at, shape[0] as usize, shape[1], routing.scores.shape()[1])
            .map_err(|e| boxed(at.layer, e))?;
        let indices = Array::from_slice(&ids, &shape);
        let weights = router.weigh(&routing.scores, &indices)?;
        Ok(Routing {
            scores: routing.scores,
            indices,
            weights,
        })
    }
}
