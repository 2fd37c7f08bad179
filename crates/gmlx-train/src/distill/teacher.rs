//! The teacher's pass: for each question, the teacher reads the document and the question and
//! answers greedily; its answer is then scored once more, teacher-forced, to keep its `top_k`
//! most likely tokens and their probabilities at every answer position. Each answer is
//! appended to a JSONL cache as soon as it exists, keyed by what produced it, so an interrupted
//! run resumes where it stopped and a second run asks nothing again.
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gmlx_mlx::Array;
use gmlx_models::{GenerateOptions, Generation, Logits, Model, Tokenizer};
use gmlx_tokenizer::{ChatRequest, Clock, TokenId};
use serde_json::{json, Value};

use super::data::Document;
use crate::error::{Error, Result};

/// How the teacher answers.
#[derive(Debug, Clone, PartialEq)]
pub struct TeacherSettings {
    /// Names the teacher model in the cache keys (the CLI uses its file name and size), so
    /// another teacher with the same vocabulary asks again.
    pub identity: String,
    /// Candidates kept per answer position (16).
    pub top_k: usize,
    /// Longest answer, in teacher tokens (64).
    pub max_answer_tokens: usize,
    /// Extra questions the teacher writes about each document (0).
    pub extra_questions: usize,
    /// Seeds the sampling of the teacher's own questions.
    pub seed: u64,
}

impl Default for TeacherSettings {
    fn default() -> Self {
        TeacherSettings {
            identity: String::new(),
            top_k: 16,
            max_answer_tokens: 64,
            extra_questions: 0,
            seed: 0,
        }
    }
}

/// One answer of the teacher, in its own vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub question: String,
    /// Its tokens, the end-of-turn token included when it stopped on one.
    pub ids: Vec<TokenId>,
    /// The text of `ids` (special tokens left out).
    pub text: String,
    /// At each answer position, the `top_k` tokens the teacher predicted there with their
    /// probabilities (renormalised over the `top_k`).
    pub top: Vec<Vec<(TokenId, f32)>>,
}

/// What the teacher's pass measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TeacherStats {
    pub answers: usize,
    /// Answers read from the cache instead of computed.
    pub cached: usize,
    /// Tokens the teacher generated and scored in this run.
    pub tokens: usize,
    pub seconds: f64,
}

impl TeacherStats {
    pub fn tokens_per_sec(&self) -> f64 {
        self.tokens as f64 / self.seconds.max(1e-9)
    }
}

/// The prompt of a user turn through the tokenizer's chat template (open assistant turn), or
/// the plain text followed by "\nAnswer:" without one.
pub fn user_prompt(tokenizer: &Tokenizer, text: &str) -> Result<Vec<TokenId>> {
    if tokenizer.chat_template_source("default").is_some() {
        let template = tokenizer.chat_template("default", Clock::SystemUtc)?;
        let rendered = template.render(&ChatRequest {
            messages: vec![json!({"role": "user", "content": text})],
            add_generation_prompt: true,
            ..ChatRequest::default()
        })?;
        return Ok(tokenizer.encode(&rendered, true, true)?);
    }
    Ok(tokenizer.encode(&format!("{text}\nAnswer:"), true, false)?)
}

/// What the teacher reads to answer `question` about `document`.
pub fn teacher_text(document: &str, question: &str) -> String {
    format!("Document: {document}\n\nAnswer the question using the document.\nQuestion: {question}")
}

/// Stable 64-bit FNV-1a of the parts, as the cache key.
fn key(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The answers already in the cache file, by key.
struct Cache {
    path: PathBuf,
    done: HashMap<String, Value>,
}

impl Cache {
    fn open(path: &Path) -> Result<Cache> {
        let mut done = HashMap::new();
        if path.is_file() {
            let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                path: path.to_owned(),
                source,
            })?;
            // a line cut short by an interruption is dropped and recomputed
            for v in text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            {
                if let Some(k) = v.get("key").and_then(Value::as_str) {
                    done.insert(k.to_owned(), v);
                }
            }
        }
        Ok(Cache {
            path: path.to_owned(),
            done,
        })
    }

    fn append(&mut self, key: &str, value: Value) -> Result<()> {
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        let mut line = value.to_string();
        line.push('\n');
        f.write_all(line.as_bytes()).map_err(io)?;
        self.done.insert(key.to_owned(), value);
        Ok(())
    }
}

fn answer_to_json(key: &str, a: &Answer) -> Value {
    json!({
        "key": key,
        "question": a.question,
        "ids": a.ids,
        "text": a.text,
        "top": a.top.iter().map(|row| row.iter().map(|&(id, p)| json!([id, p])).collect::<Vec<_>>()).collect::<Vec<_>>(),
    })
}

fn answer_from_json(v: &Value) -> Option<Answer> {
    let ids = v["ids"]
        .as_array()?
        .iter()
        .map(|x| x.as_u64().map(|n| n as TokenId))
        .collect::<Option<Vec<_>>>()?;
    let top = v["top"]
        .as_array()?
        .iter()
        .map(|row| {
            row.as_array()?
                .iter()
                .map(|c| Some((c[0].as_u64()? as TokenId, c[1].as_f64()? as f32)))
                .collect::<Option<Vec<_>>>()
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Answer {
        question: v["question"].as_str()?.to_owned(),
        text: v["text"].as_str()?.to_owned(),
        ids,
        top,
    })
}

/// Greedy (or, with `temperature`, sampled) tokens after `prompt`.
fn generate(
    model: &Model,
    tokenizer: &Tokenizer,
    prompt: &[TokenId],
    max_tokens: usize,
    temperature: f32,
    seed: u64,
) -> Result<Vec<TokenId>> {
    let mut options = GenerateOptions {
        max_tokens,
        ..GenerateOptions::default()
    };
    options.sampling.temperature = temperature;
    options.sampling.seed = Some(seed);
    let mut ids = Vec::new();
    for piece in Generation::new(model, tokenizer, prompt, options)? {
        ids.push(piece?.token);
    }
    Ok(ids)
}

/// The teacher's `top_k` distribution at each position of `answer` after `prompt`.
fn score(
    model: &Model,
    prompt: &[TokenId],
    answer: &[TokenId],
    top_k: usize,
) -> Result<Vec<Vec<(TokenId, f32)>>> {
    let all: Vec<TokenId> = prompt.iter().chain(answer).copied().collect();
    let tokens = Array::from_slice(&all, &[1, all.len() as i32]);
    let mut cache = model.new_cache();
    let logits = model.forward(&tokens, &mut cache, Logits::All)?;
    let rows = gmlx_models::generate::host_logits(&logits.reshape(&[all.len() as i32, -1])?)?;
    Ok(rows[prompt.len() - 1..all.len() - 1]
        .iter()
        .map(|row| top_probabilities(row, top_k))
        .collect())
}

/// The `k` most likely tokens of a logit row, with probabilities renormalised over them.
pub fn top_probabilities(row: &[f32], k: usize) -> Vec<(TokenId, f32)> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    let k = k.clamp(1, row.len().max(1));
    order.select_nth_unstable_by(k - 1, |&a, &b| row[b].total_cmp(&row[a]));
    order.truncate(k);
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    let max = row[order[0]];
    let weights: Vec<f32> = order.iter().map(|&i| (row[i] - max).exp()).collect();
    let sum: f32 = weights.iter().sum();
    order
        .iter()
        .zip(weights)
        .map(|(&i, w)| (i as TokenId, w / sum))
        .collect()
}

/// The teacher's answers to every question of `documents` (and to the questions it writes,
/// `settings.extra_questions` per document), through the cache at `cache_path`. `report`
/// gets one line per answer computed.
pub fn answer_all(
    model: &Model,
    tokenizer: &Tokenizer,
    documents: &[Document],
    settings: &TeacherSettings,
    cache_path: &Path,
    report: &mut dyn FnMut(&str),
) -> Result<(Vec<Answer>, TeacherStats)> {
    let mut cache = Cache::open(cache_path)?;
    let vocab = tokenizer.vocab_map_hash();
    let (top_k, max_tokens) = (
        settings.top_k.to_string(),
        settings.max_answer_tokens.to_string(),
    );
    let start = Instant::now();
    let mut stats = TeacherStats::default();
    let mut answers = Vec::new();
    let total: usize = documents
        .iter()
        .map(|d| d.questions.len() + settings.extra_questions)
        .sum();
    for (d, doc) in documents.iter().enumerate() {
        let mut questions = doc.questions.clone();
        for i in 0..settings.extra_questions {
            let seed = (settings.seed ^ ((d as u64) << 20)).wrapping_add(i as u64);
            let k = key(&[
                "question",
                &settings.identity,
                &vocab,
                &doc.text,
                &seed.to_string(),
            ]);
            let q = match cache.done.get(&k).and_then(|v| v["question"].as_str()) {
                Some(q) => q.to_owned(),
                None => {
                    let prompt = user_prompt(
                        tokenizer,
                        &format!(
                            "Document: {}\n\nWrite one short question that the document answers.",
                            doc.text
                        ),
                    )?;
                    let ids = generate(model, tokenizer, &prompt, 48, 0.7, seed)?;
                    stats.tokens += ids.len();
                    let text = tokenizer.decode(&ids, true)?;
                    let q = text
                        .lines()
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .unwrap_or("")
                        .to_owned();
                    cache.append(&k, json!({"key": k, "question": q}))?;
                    q
                }
            };
            if !q.is_empty() {
                questions.push(q);
            }
        }
        for q in questions {
            let k = key(&[
                "answer",
                &settings.identity,
                &vocab,
                &top_k,
                &max_tokens,
                &doc.text,
                &q,
            ]);
            let answer = match cache.done.get(&k).and_then(answer_from_json) {
                Some(a) => {
                    stats.cached += 1;
                    a
                }
                None => {
                    let prompt = user_prompt(tokenizer, &teacher_text(&doc.text, &q))?;
                    let ids = generate(
                        model,
                        tokenizer,
                        &prompt,
                        settings.max_answer_tokens,
                        0.0,
                        0,
                    )?;
                    let top = score(model, &prompt, &ids, settings.top_k)?;
                    stats.tokens += 2 * ids.len();
                    let a = Answer {
                        question: q.clone(),
                        text: tokenizer.decode(&ids, true)?,
                        ids,
                        top,
                    };
                    cache.append(&k, answer_to_json(&k, &a))?;
                    report(&format!(
                        "teacher {}/{total}: {:?} -> {:?}",
                        answers.len() + 1,
                        a.question,
                        a.text
                    ));
                    a
                }
            };
            answers.push(answer);
        }
    }
    stats.answers = answers.len();
    stats.seconds = start.elapsed().as_secs_f64();
    Ok((answers, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_probabilities_keep_the_best_renormalised() {
        let top = top_probabilities(&[0.0, 3.0, 1.0, 3.0_f32.ln() + 1.0], 2);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 3]);
        let sum: f32 = top.iter().map(|t| t.1).sum();
        assert!((sum - 1.0).abs() < 1e-6);
        assert_eq!(key(&["a", "b"]), key(&["a", "b"]));
        assert_ne!(key(&["ab", ""]), key(&["a", "b"]));
    }
}
