//! The shared math architectures are assembled from.
pub mod attention;
pub mod decoder;
pub mod mlp;
pub mod norm;
pub mod rope;
