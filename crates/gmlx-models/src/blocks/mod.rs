//! The shared math architectures are assembled from.
pub mod attention;
pub mod compressed;
pub mod context;
pub mod decoder;
pub mod delta_net;
pub mod delta_rule;
pub mod host;
pub mod hyper;
pub mod latent;
pub mod linear;
pub mod mask;
pub mod mixer;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod rope;
pub mod visit;
