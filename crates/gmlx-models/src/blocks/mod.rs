//! The shared math architectures are assembled from.
pub mod attention;
pub mod decoder;
pub mod linear;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod rope;
