//! One file per `general.architecture`: its tensor table, its config synthesis, its build.
pub mod llama;
