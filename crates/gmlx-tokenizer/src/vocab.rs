//! The vocabulary: token texts, llama.cpp-style token attributes, special token ids
//! and the end-of-generation set.

use std::collections::HashMap;

use crate::spec::{TokenType, TokenizerSpec};
use crate::TokenId;

/// Token attribute flags (llama.cpp's `llama_token_attr`, the subset used here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Attr(u16);

impl Attr {
    pub const UNDEFINED: Attr = Attr(0);
    pub const UNKNOWN: Attr = Attr(1 << 0);
    pub const UNUSED: Attr = Attr(1 << 1);
    pub const NORMAL: Attr = Attr(1 << 2);
    pub const CONTROL: Attr = Attr(1 << 3);
    pub const USER_DEFINED: Attr = Attr(1 << 4);
    pub const BYTE: Attr = Attr(1 << 5);
    pub const LSTRIP: Attr = Attr(1 << 7);
    pub const RSTRIP: Attr = Attr(1 << 8);

    pub fn has(self, other: Attr) -> bool {
        self.0 & other.0 != 0
    }

    pub fn set(&mut self, other: Attr, on: bool) {
        if on {
            self.0 |= other.0;
        } else {
            self.0 &= !other.0;
        }
    }

    fn from_type(t: TokenType) -> Attr {
        match t {
            TokenType::Normal => Attr::NORMAL,
            TokenType::Unknown => Attr::UNKNOWN,
            TokenType::Control => Attr::CONTROL,
            TokenType::UserDefined => Attr::USER_DEFINED,
            TokenType::Unused => Attr::UNUSED,
            TokenType::Byte => Attr::BYTE,
            TokenType::Undefined => Attr::UNDEFINED,
        }
    }

    /// Control and unknown tokens: rendered in text only when asked, matched in text
    /// only when special parsing is on.
    pub fn is_special(self) -> bool {
        self.has(Attr(Attr::CONTROL.0 | Attr::UNKNOWN.0))
    }
}

/// Texts of tokens that end generation (llama.cpp's list, matched on the token text).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Texts that identify the end-of-turn token when the metadata names none.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// gpt-oss's channel markers, always rendered (llama.cpp makes them user-defined).
const ALWAYS_RENDERED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// The special tokens of a vocabulary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<TokenId>,
    /// End of sequence.
    pub eos: Option<TokenId>,
    /// End of turn (from the metadata or recognised by its text).
    pub eot: Option<TokenId>,
    /// End of message (`<|eom_id|>`).
    pub eom: Option<TokenId>,
    /// Unknown.
    pub unk: Option<TokenId>,
    /// Padding.
    pub pad: Option<TokenId>,
    /// Every token that ends generation, ascending.
    pub eog: Vec<TokenId>,
}

#[derive(Debug)]
pub(crate) struct Vocab {
    pub texts: Vec<String>,
    pub attrs: Vec<Attr>,
    pub scores: Vec<f32>,
    pub ids: HashMap<String, TokenId>,
    pub special: SpecialTokens,
}

/// Which default special ids a tokenizer model has before the metadata overrides them.
pub(crate) struct Defaults {
    pub bos: Option<TokenId>,
    pub eos: Option<TokenId>,
    pub unk: Option<TokenId>,
}

impl Vocab {
    pub(crate) fn new(spec: &TokenizerSpec, defaults: Defaults) -> Vocab {
        let n = spec.tokens.len();
        let texts: Vec<String> = spec
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if t.is_empty() {
                    format!("[EMPTY_{i}]")
                } else {
                    t.clone()
                }
            })
            .collect();
        let mut attrs: Vec<Attr> = (0..n)
            .map(|i| match spec.token_types.get(i) {
                Some(t) => Attr::from_type(TokenType::from_gguf(*t)),
                None => Attr::NORMAL,
            })
            .collect();
        let scores: Vec<f32> = (0..n)
            .map(|i| spec.scores.get(i).copied().unwrap_or(0.0))
            .collect();
        let mut ids = HashMap::with_capacity(n);
        for (i, t) in texts.iter().enumerate() {
            ids.insert(t.clone(), i as TokenId);
        }

        let in_range = |id: Option<TokenId>| id.filter(|&i| (i as usize) < n);
        let pick = |key: Option<TokenId>, default: Option<TokenId>| {
            in_range(key).or_else(|| in_range(default))
        };
        let mut special = SpecialTokens {
            bos: pick(spec.bos_id, defaults.bos),
            eos: pick(spec.eos_id, defaults.eos),
            eot: in_range(spec.eot_id),
            eom: in_range(spec.eom_id),
            unk: pick(spec.unk_id, defaults.unk),
            pad: in_range(spec.pad_id),
            eog: Vec::new(),
        };

        // Recognise EOT/EOM by text and make such tokens control tokens, as llama.cpp does.
        let mut sorted: Vec<(&String, TokenId)> = ids.iter().map(|(t, i)| (t, *i)).collect();
        sorted.sort();
        for (text, id) in &sorted {
            if special.eot.is_none() && EOT_TEXTS.contains(&text.as_str()) {
                special.eot = Some(*id);
                attrs[*id as usize].set(Attr::CONTROL, true);
            }
            if special.eom.is_none() && text.as_str() == "<|eom_id|>" {
                special.eom = Some(*id);
                attrs[*id as usize].set(Attr::CONTROL, true);
            }
        }
        let mut eog: Vec<TokenId> = Vec::new();
        for (text, id) in &sorted {
            if EOG_TEXTS.contains(&text.as_str()) {
                eog.push(*id);
                attrs[*id as usize].set(Attr::CONTROL, true);
            }
        }
        for (text, id) in &sorted {
            if ALWAYS_RENDERED.contains(&text.as_str()) {
                attrs[*id as usize] = Attr::USER_DEFINED;
            }
        }
        eog.extend(
            [special.eos, special.eot, special.eom]
                .into_iter()
                .flatten(),
        );
        eog.sort_unstable();
        eog.dedup();
        let text_of = |id: TokenId| texts[id as usize].as_str();
        let find = |eog: &[TokenId], t: &str| eog.iter().position(|&i| text_of(i) == t);
        // o200k_harmony / solar-open: `<|end|>` ends a message, not the generation.
        let has = |eog: &[TokenId], t: &str| find(eog, t).is_some();
        if (has(&eog, "<|return|>") && has(&eog, "<|call|>")
            || has(&eog, "<|calls|>") && has(&eog, "<|flush|>"))
            && has(&eog, "<|end|>")
        {
            if let Some(pos) = find(&eog, "<|end|>") {
                attrs[eog[pos] as usize] = Attr::USER_DEFINED;
                eog.remove(pos);
            }
        }
        // Gemma 4: `</s>` is an ordinary token there.
        if has(&eog, "<|tool_response>") {
            if let Some(pos) = find(&eog, "</s>") {
                attrs[eog[pos] as usize] = Attr::NORMAL;
                eog.remove(pos);
            }
        }
        special.eog = eog;

        // Phi-3: text after a special token loses its leading whitespace.
        let name = spec.model_name.as_deref().unwrap_or("").to_lowercase();
        if name.contains("phi-3") || name.contains("phi3") {
            for a in attrs.iter_mut() {
                if a.has(Attr::CONTROL) || a.has(Attr::USER_DEFINED) || a.has(Attr::UNKNOWN) {
                    a.set(Attr::RSTRIP, true);
                }
            }
            for (text, on) in [
                ("</s>", true),
                ("<unk>", false),
                ("<s>", false),
                ("<|endoftext|>", false),
            ] {
                if let Some(&id) = ids.get(text) {
                    attrs[id as usize].set(Attr::RSTRIP, on);
                }
            }
        }

        Vocab {
            texts,
            attrs,
            scores,
            ids,
            special,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }
}
