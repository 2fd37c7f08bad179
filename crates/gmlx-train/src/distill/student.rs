//! The student's rows: the question alone through the student's chat template, then the
//! teacher's answer as targets. With the same vocabulary (equal `vocab_map_hash`) the answer is
//! the teacher's own tokens and every position learns the teacher's distribution. Across
//! tokenizers the answer text is re-tokenized for the student and matched to the teacher's
//! tokens by bytes ([`gmlx_tokenizer::align_by_bytes`]); a matched position learns the
//! teacher's candidates carried over to the student tokens spelling the same bytes
//! ([`gmlx_tokenizer::same_bytes_map`]), renormalised; the rest, and the end-of-turn token,
//! learn the answer's token (cross-entropy).
use gmlx_models::Tokenizer;
use gmlx_tokenizer::{align_by_bytes, same_bytes_map, TokenId, Tokens};

use super::teacher::{user_prompt, Answer};
use crate::data::Example;
use crate::error::Result;

/// A position's teacher candidates (student ids, probabilities), or none to learn the token.
type SoftTarget = Option<Vec<(TokenId, f32)>>;

/// How many answer positions learned a teacher distribution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlignStats {
    pub positions: usize,
    pub aligned: usize,
    pub same_vocabulary: bool,
}

impl AlignStats {
    pub fn fraction(&self) -> f64 {
        self.aligned as f64 / self.positions.max(1) as f64
    }
}

/// The student's training rows for the teacher's `answers`, cut to `max_len` tokens.
pub fn examples(
    student: &Tokenizer,
    teacher: &Tokenizer,
    answers: &[Answer],
    max_len: usize,
) -> Result<(Vec<Example>, AlignStats)> {
    let same = student.vocab_map_hash() == teacher.vocab_map_hash();
    let bridge = (!same).then(|| same_bytes_map(teacher.token_bytes(), student.token_bytes()));
    let (ws_t, ws_s) = (
        teacher.whitespace_start_mask(),
        student.whitespace_start_mask(),
    );
    let mut stats = AlignStats {
        same_vocabulary: same,
        ..AlignStats::default()
    };
    let mut out = Vec::with_capacity(answers.len());
    for a in answers {
        let prompt = user_prompt(student, &a.question)?;
        let (answer, soft): (Vec<TokenId>, Vec<SoftTarget>) = match &bridge {
            None => (a.ids.clone(), a.top.iter().cloned().map(Some).collect()),
            Some(bridge) => {
                let ends = a.ids.last().is_some_and(|&t| teacher.is_eog(t));
                let t_ids = &a.ids[..a.ids.len() - usize::from(ends)];
                let mut s_ids = student.encode(&a.text, false, false)?;
                let matched = align_by_bytes(
                    Tokens {
                        ids: t_ids,
                        token_bytes: teacher.token_bytes(),
                        whitespace_start: &ws_t,
                    },
                    Tokens {
                        ids: &s_ids,
                        token_bytes: student.token_bytes(),
                        whitespace_start: &ws_s,
                    },
                );
                let mut soft: Vec<_> = matched
                    .iter()
                    .map(|m| m.and_then(|i| carry_over(&a.top[i], bridge)))
                    .collect();
                if let Some(eos) = student.eos_id() {
                    s_ids.push(eos);
                    soft.push(None);
                }
                (s_ids, soft)
            }
        };
        stats.positions += answer.len();
        stats.aligned += soft.iter().filter(|s| s.is_some()).count();
        let mut ids = prompt.clone();
        ids.extend(&answer);
        let mut target = vec![false; prompt.len()];
        target.extend(std::iter::repeat_n(true, answer.len()));
        let mut soft_all = vec![None; prompt.len()];
        soft_all.extend(soft);
        ids.truncate(max_len);
        target.truncate(max_len);
        soft_all.truncate(max_len);
        if ids.len() >= 2 {
            out.push(Example {
                ids,
                target,
                soft: soft_all,
            });
        }
    }
    Ok((out, stats))
}

/// Teacher candidates as student tokens with the same bytes, renormalised; `None` when none
/// carries over.
fn carry_over(top: &[(TokenId, f32)], bridge: &[Option<u32>]) -> Option<Vec<(TokenId, f32)>> {
    let mut kept: Vec<(TokenId, f32)> = Vec::new();
    for &(t, p) in top {
        if let Some(s) = bridge.get(t as usize).copied().flatten() {
            match kept.iter_mut().find(|(id, _)| *id == s) {
                Some(k) => k.1 += p,
                None => kept.push((s, p)),
            }
        }
    }
    let mass: f32 = kept.iter().map(|k| k.1).sum();
    (mass > 0.0).then(|| kept.into_iter().map(|(s, p)| (s, p / mass)).collect())
}
