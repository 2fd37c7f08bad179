//! Distillation data: `train.jsonl` (and optionally `valid.jsonl`) in a folder, one document
//! with its questions a line: `{"document": "...", "questions": ["...", ...]}` (`questions`
//! may be empty when the teacher writes them, `--teacher-questions`).
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::Result;

/// One document and the questions asked about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub text: String,
    pub questions: Vec<String>,
}

/// The documents of a data folder, read and checked before any model loads.
#[derive(Debug, Clone)]
pub struct Documents {
    pub train: Vec<Document>,
    pub valid: Vec<Document>,
    pub train_path: PathBuf,
}

/// Reads `dir/train.jsonl` and, when present, `dir/valid.jsonl`.
pub fn read_dir(dir: &Path) -> Result<Documents> {
    let (train, valid, train_path) = crate::data::read_folder(dir, parse)?;
    Ok(Documents {
        train,
        valid,
        train_path,
    })
}

fn parse(line: &str) -> std::result::Result<Document, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let text = match value.get("document") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return Err("\"document\" is empty".into()),
        Some(_) => return Err("\"document\" must be a string".into()),
        None => return Err("missing \"document\"".into()),
    };
    let questions = match value.get("questions") {
        None => Vec::new(),
        Some(Value::Array(qs)) => qs
            .iter()
            .enumerate()
            .map(|(i, q)| match q {
                Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
                _ => Err(format!("question {i} must be a non-empty string")),
            })
            .collect::<std::result::Result<_, _>>()?,
        Some(_) => return Err("\"questions\" must be an array of strings".into()),
    };
    Ok(Document { text, questions })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_name_what_is_wrong() {
        let doc = parse(r#"{"document": "A fact.", "questions": ["What?"]}"#).expect("row");
        assert_eq!(doc.questions, ["What?"]);
        assert!(parse(r#"{"document": "A fact."}"#)
            .expect("row")
            .questions
            .is_empty());
        for (row, says) in [
            (r#"{"questions": []}"#, "missing \"document\""),
            (r#"{"document": " "}"#, "empty"),
            (r#"{"document": "x", "questions": "q"}"#, "array"),
            (r#"{"document": "x", "questions": [""]}"#, "question 0"),
            ("not json", "not valid JSON"),
        ] {
            let e = parse(row).expect_err(row);
            assert!(e.contains(says), "{row}: {e}");
        }
    }
}
