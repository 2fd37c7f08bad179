//! GGUF for gmlx: read (v2, v3, split models, memory-mapped), validate, dequantize every ggml
//! codec, repack exact codecs into MLX's affine layout, write, and summarise (`gmlx inspect`).
//!
//! ```
//! use gmlx_gguf::{names::{Kv, Tensor}, GgmlType, GgufFile, GgufWriter};
//!
//! # fn main() -> gmlx_gguf::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("gmlx-gguf-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).ok();
//! # let path = dir.join("tiny.gguf");
//! // Write a tiny model: metadata and one f32 tensor of shape [2, 4] (4 = row length).
//! let mut w = GgufWriter::new();
//! w.add_kv("general.architecture", "llama")?;
//! w.add_kv("llama.block_count", 1u32)?;
//! let data: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
//! w.add_tensor(&Tensor::AttnQ.weight(0), GgmlType::F32, &[4, 2], data)?;
//! w.write_to_path(&path)?;
//!
//! // Read it back: header validated, tensor bytes memory-mapped.
//! let file = GgufFile::open(&path)?;
//! assert_eq!(file.get_u32(&Kv::BlockCount)?, 1); // "{arch}.block_count" -> "llama.block_count"
//! assert_eq!(file.get_u32("llama.block_count")?, 1);
//! let info = file.tensor("blk.0.attn_q.weight")?;
//! assert_eq!((info.ggml_type, info.dims.as_slice()), (GgmlType::F32, &[4u64, 2][..]));
//! assert_eq!(file.dequantize(&info.name)?[5], 5.0);
//! println!("{}", gmlx_gguf::inspect::report(&file, &Default::default()));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(())
//! # }
//! ```

pub mod codec;
pub mod error;
mod file;
pub mod ggml_type;
pub mod inspect;
pub mod metadata;
pub mod names;
pub mod reader;
pub mod repack;
pub mod split;
pub mod table;
pub mod value;
pub mod writer;

pub use codec::{dequantize, dequantize_into};
pub use error::{Error, Result};
pub use file::{opened_in_this_process, opened_on_this_thread, GgufFile};
pub use ggml_type::GgmlType;
pub use metadata::{MetaKey, Metadata};
pub use reader::{parse_header, Header, Limits, TensorInfo};
pub use repack::{repack_affine, repack_mxfp4, AffineLayout, AffineWeights, Mxfp4Weights};
pub use table::MappedRows;
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
