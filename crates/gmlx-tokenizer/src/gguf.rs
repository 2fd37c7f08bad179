//! Building a [`TokenizerSpec`] from GGUF metadata (`tokenizer.*`, `general.name`).

use std::path::Path;

use gmlx_gguf::names::Kv;
use gmlx_gguf::value::{Array, Value};
use gmlx_gguf::{GgufFile, Metadata};

use crate::error::{Error, Result};
use crate::spec::TokenizerSpec;
use crate::tokenizer::Tokenizer;
use crate::TokenId;

/// The list of named chat template variants (not in gmlx-gguf's key table yet).
const CHAT_TEMPLATES_KEY: &str = "tokenizer.chat_templates";

impl TokenizerSpec {
    /// Reads the tokenizer keys of a GGUF's metadata.
    pub fn from_metadata(meta: &Metadata) -> Result<TokenizerSpec> {
        let model = meta.get_str(&Kv::TokenizerModel)?.to_owned();
        let tokens = meta.get_str_array(&Kv::TokenizerTokens)?.to_vec();
        let token_types = if meta.contains(&Kv::TokenizerTokenType) {
            meta.get_i32_array(&Kv::TokenizerTokenType)?
        } else {
            Vec::new()
        };
        let scores = match meta.get(Kv::TokenizerScores.template()) {
            None => Vec::new(),
            Some(Value::Array(Array::F32(s))) => s.clone(),
            Some(Value::Array(Array::I32(s))) => s.iter().map(|&v| v as f32).collect(),
            Some(other) => {
                return Err(Error::InvalidMetadata {
                    key: Kv::TokenizerScores.template().to_owned(),
                    reason: format!(
                        "expected an array of f32 or i32, found {}",
                        other.type_description()
                    ),
                })
            }
        };
        let merges = if meta.contains(&Kv::TokenizerMerges) {
            meta.get_str_array(&Kv::TokenizerMerges)?.to_vec()
        } else {
            Vec::new()
        };
        let id = |key: Kv| -> Result<Option<TokenId>> { Ok(meta.opt_u32(&key)?) };
        let mut chat_templates = Vec::new();
        if meta.contains(CHAT_TEMPLATES_KEY) {
            for name in meta.get_str_array(CHAT_TEMPLATES_KEY)? {
                let key = format!("tokenizer.chat_template.{name}");
                if let Some(source) = meta.opt_str(&key)? {
                    chat_templates.push((name.clone(), source.to_owned()));
                }
            }
        }
        Ok(TokenizerSpec {
            model,
            pre: meta.opt_str(&Kv::TokenizerPre)?.map(str::to_owned),
            tokens,
            token_types,
            scores,
            merges,
            bos_id: id(Kv::TokenizerBosId)?,
            eos_id: id(Kv::TokenizerEosId)?,
            eot_id: id(Kv::TokenizerEotId)?,
            eom_id: id(Kv::TokenizerEomId)?,
            unk_id: id(Kv::TokenizerUnkId)?,
            pad_id: id(Kv::TokenizerPadId)?,
            add_bos: meta.opt_bool(&Kv::TokenizerAddBos)?,
            add_eos: meta.opt_bool(&Kv::TokenizerAddEos)?,
            add_space_prefix: meta.opt_bool(&Kv::TokenizerAddSpacePrefix)?,
            model_name: meta.opt_str(&Kv::GeneralName)?.map(str::to_owned),
            chat_template: meta.opt_str(&Kv::TokenizerChatTemplate)?.map(str::to_owned),
            chat_templates,
        })
    }
}

impl Tokenizer {
    /// The tokenizer of an open GGUF file.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer> {
        Tokenizer::from_spec(&TokenizerSpec::from_metadata(file.metadata())?)
    }

    /// Opens a GGUF file (metadata only is read) and builds its tokenizer.
    pub fn from_gguf_path(path: impl AsRef<Path>) -> Result<Tokenizer> {
        Tokenizer::from_gguf(&GgufFile::open(path)?)
    }
}
