//! Datasets: `train.jsonl` (and optionally `valid.jsonl`) in a folder, one JSON object a line.
//!
//! A row is `{"text": ...}` (trained on every token), `{"messages": [{"role", "content"},
//! ...]}` (rendered with the model's chat template), or `{"prompt": ..., "completion": ...}`
//! (a user turn and an assistant turn through the chat template; plain concatenation when the
//! model has none). With `mask_prompt`, only completions and assistant turns are trained on.
use std::path::{Path, PathBuf};

use gmlx_tokenizer::{ChatRequest, Clock, TokenId, Tokenizer};
use serde_json::Value;

use crate::error::{Error, Result};

/// One row of a data file.
#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    Text(String),
    Chat(Vec<Value>),
    Completion { prompt: String, completion: String },
}

/// The rows of a data folder, read and checked before any model loads.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub train: Vec<Row>,
    pub valid: Vec<Row>,
    pub train_path: PathBuf,
}

/// A tokenized row: `ids`, and for each position whether its token is a training target.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub ids: Vec<TokenId>,
    pub target: Vec<bool>,
    /// Distillation: for target positions, a teacher's distribution over this vocabulary
    /// (`(token, probability)`, probabilities summing to 1) that the position learns instead
    /// of its token; empty, or `None` at a position, to learn the token (cross-entropy).
    pub soft: Vec<Option<Vec<(TokenId, f32)>>>,
}

impl Example {
    /// Positions that count in the loss (a token predicted from at least one before it).
    pub fn n_targets(&self) -> usize {
        self.target.iter().skip(1).filter(|t| **t).count()
    }
}

/// Reads `dir/train.jsonl` and, when present, `dir/valid.jsonl`.
pub fn read_dir(dir: &Path) -> Result<Dataset> {
    let (train, valid, train_path) = read_folder(dir, parse_row)?;
    Ok(Dataset {
        train,
        valid,
        train_path,
    })
}

/// Reads one JSONL file; blank lines are skipped; a bad row names its file and line.
pub fn read_file(path: &Path) -> Result<Vec<Row>> {
    read_jsonl(path, parse_row)
}

/// A data folder's `train.jsonl` (required) and `valid.jsonl` (when present), each line read by
/// `parse`; with the train file's path.
pub(crate) fn read_folder<T>(
    dir: &Path,
    parse: fn(&str) -> std::result::Result<T, String>,
) -> Result<(Vec<T>, Vec<T>, PathBuf)> {
    if !dir.is_dir() {
        return Err(Error::MissingDataDir {
            path: dir.to_owned(),
        });
    }
    let train_path = dir.join("train.jsonl");
    if !train_path.is_file() {
        return Err(Error::MissingTrainFile { path: train_path });
    }
    let train = read_jsonl(&train_path, parse)?;
    let valid_path = dir.join("valid.jsonl");
    let valid = if valid_path.is_file() {
        read_jsonl(&valid_path, parse)?
    } else {
        Vec::new()
    };
    Ok((train, valid, train_path))
}

/// One JSONL file, each non-blank line read by `parse`; a bad row names its file and line, and
/// a file without rows is an error.
pub(crate) fn read_jsonl<T>(
    path: &Path,
    parse: fn(&str) -> std::result::Result<T, String>,
) -> Result<Vec<T>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        rows.push(parse(line).map_err(|reason| Error::BadRow {
            path: path.to_owned(),
            line: i + 1,
            reason,
        })?);
    }
    if rows.is_empty() {
        return Err(Error::EmptyData {
            path: path.to_owned(),
        });
    }
    Ok(rows)
}

fn parse_row(line: &str) -> std::result::Result<Row, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err("expected a JSON object".into());
    };
    let string = |key: &str| -> std::result::Result<String, String> {
        match obj.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("\"{key}\" must be a string")),
            None => Err(format!("missing \"{key}\"")),
        }
    };
    if obj.contains_key("messages") {
        let Some(Value::Array(messages)) = obj.get("messages") else {
            return Err("\"messages\" must be an array".into());
        };
        if messages.is_empty() {
            return Err("\"messages\" is empty".into());
        }
        for (i, m) in messages.iter().enumerate() {
            let ok = matches!(m.get("role"), Some(Value::String(_)))
                && matches!(m.get("content"), Some(Value::String(_)));
            if !ok {
                return Err(format!(
                    "message {i} needs a string \"role\" and a string \"content\""
                ));
            }
        }
        return Ok(Row::Chat(messages.clone()));
    }
    if obj.contains_key("prompt") || obj.contains_key("completion") {
        return Ok(Row::Completion {
            prompt: string("prompt")?,
            completion: string("completion")?,
        });
    }
    if obj.contains_key("text") {
        return Ok(Row::Text(string("text")?));
    }
    Err("expected \"text\", \"messages\", or \"prompt\" and \"completion\"".into())
}

/// Turns rows into token ids and target masks.
pub struct Encoder<'t> {
    tokenizer: &'t Tokenizer,
    template: Option<gmlx_tokenizer::ChatTemplate>,
    mask_prompt: bool,
    max_len: usize,
}

impl<'t> Encoder<'t> {
    pub fn new(tokenizer: &'t Tokenizer, mask_prompt: bool, max_len: usize) -> Result<Self> {
        let template = if tokenizer.chat_template_source("default").is_some() {
            Some(tokenizer.chat_template("default", Clock::SystemUtc)?)
        } else {
            None
        };
        Ok(Encoder {
            tokenizer,
            template,
            mask_prompt,
            max_len,
        })
    }

    fn render(&self, messages: &[Value], open_turn: bool) -> Result<Option<String>> {
        let Some(t) = &self.template else {
            return Ok(None);
        };
        let request = ChatRequest {
            messages: messages.to_vec(),
            add_generation_prompt: open_turn,
            ..ChatRequest::default()
        };
        Ok(Some(t.render(&request)?))
    }

    fn chat_ids(&self, text: &str) -> Result<Vec<TokenId>> {
        // The template writes special tokens as text; they must become single tokens.
        Ok(self.tokenizer.encode(text, true, true)?)
    }

    /// Encodes one row; `None` for a row too short to train on (under two tokens).
    pub fn encode(&self, row: &Row) -> Result<Option<Example>> {
        let (mut ids, mut target) = match row {
            Row::Text(text) => {
                let mut ids = self.tokenizer.encode(text, true, false)?;
                if let Some(eos) = self.tokenizer.eos_id() {
                    if ids.last() != Some(&eos) {
                        ids.push(eos);
                    }
                }
                let target = vec![true; ids.len()];
                (ids, target)
            }
            Row::Completion { prompt, completion } => {
                let messages = vec![
                    serde_json::json!({"role": "user", "content": prompt}),
                    serde_json::json!({"role": "assistant", "content": completion}),
                ];
                if self.template.is_some() {
                    self.chat(&messages)?
                } else {
                    let head = self.tokenizer.encode(prompt, true, false)?;
                    let mut ids = head.clone();
                    ids.extend(self.tokenizer.encode(completion, false, false)?);
                    if let Some(eos) = self.tokenizer.eos_id() {
                        ids.push(eos);
                    }
                    let mut target = vec![true; ids.len()];
                    if self.mask_prompt {
                        target[..head.len()].iter_mut().for_each(|t| *t = false);
                    }
                    (ids, target)
                }
            }
            Row::Chat(messages) => {
                if self.template.is_none() {
                    return Err(Error::BadConfig {
                        name: "data",
                        reason: "\"messages\" rows need a model with a chat template".into(),
                    });
                }
                self.chat(messages)?
            }
        };
        ids.truncate(self.max_len);
        target.truncate(self.max_len);
        if ids.len() < 2 {
            return Ok(None);
        }
        Ok(Some(Example {
            ids,
            target,
            soft: Vec::new(),
        }))
    }

    /// A rendered conversation; with `mask_prompt`, only the assistant turns are targets:
    /// turn `i` spans the tokens between the conversation up to `i` with an open assistant
    /// turn and the conversation through `i`.
    fn chat(&self, messages: &[Value]) -> Result<(Vec<TokenId>, Vec<bool>)> {
        let full = self.render(messages, false)?.unwrap_or_default();
        let ids = self.chat_ids(&full)?;
        if !self.mask_prompt {
            let target = vec![true; ids.len()];
            return Ok((ids, target));
        }
        let mut target = vec![false; ids.len()];
        for (i, m) in messages.iter().enumerate() {
            if m.get("role").and_then(Value::as_str) != Some("assistant") {
                continue;
            }
            let before = self.render(&messages[..i], true)?.unwrap_or_default();
            let through = self.render(&messages[..=i], false)?.unwrap_or_default();
            let start = self.chat_ids(&before)?.len().min(ids.len());
            let end = self.chat_ids(&through)?.len().min(ids.len());
            target[start..end.max(start)]
                .iter_mut()
                .for_each(|t| *t = true);
        }
        Ok((ids, target))
    }

    /// Encodes every row, dropping those too short to train on.
    pub fn encode_all(&self, rows: &[Row]) -> Result<Vec<Example>> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if let Some(e) = self.encode(row)? {
                if e.n_targets() > 0 {
                    out.push(e);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_each_kind_parse_and_bad_ones_name_the_line() {
        assert_eq!(parse_row(r#"{"text":"hi"}"#), Ok(Row::Text("hi".into())));
        assert!(matches!(
            parse_row(r#"{"prompt":"a","completion":"b"}"#),
            Ok(Row::Completion { .. })
        ));
        assert!(matches!(
            parse_row(r#"{"messages":[{"role":"user","content":"x"}]}"#),
            Ok(Row::Chat(_))
        ));
        assert!(parse_row(r#"{"prompt":"a"}"#).is_err());
        assert!(parse_row(r#"{"messages":[{"role":"user"}]}"#).is_err());
        assert!(parse_row(r#"{"other":1}"#).is_err());
        assert!(parse_row("[1]").is_err());
        assert!(parse_row("{").is_err());

        let dir = std::env::temp_dir().join(format!("gmlx-train-data-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("train.jsonl"), "{\"text\":\"a\"}\n\n{\"txt\":1}\n").expect("w");
        let err = read_dir(&dir).expect_err("refused").to_string();
        assert!(
            err.ends_with(
                "train.jsonl:3: expected \"text\", \"messages\", or \"prompt\" and \"completion\""
            ),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}
