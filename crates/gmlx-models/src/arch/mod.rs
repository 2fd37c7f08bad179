//! One file per `general.architecture`: its tensor table, its config synthesis, its build.
pub mod gpt_oss;
pub mod hy_v4;
pub mod llama;
pub mod qwen3;
pub mod qwen35;
pub mod qwen35moe;
pub mod qwen3moe;
pub mod qwen3next;
