//! `tool_choice: required` or a named function: the call's fixed opening goes at the end of
//! the prompt, and a grammar holds the rest to one call of an offered function whose
//! arguments match its schema.
use gmlx_models::constrain::{Grammar, NodeId, Schema};
use gmlx_tokenizer::{TokenType, Tokenizer};
use serde_json::Value;

use super::{bad, Tool, ToolChoice, ToolFormat, Tools};
use crate::error::Result;

/// A forced call: `prefix` ends the prompt (and begins the text the call is read from), and
/// the output follows `schema`.
#[derive(Debug)]
pub struct Forced {
    pub prefix: String,
    pub schema: Schema,
}

/// A format's marker: its control token where the vocabulary has one, else its text.
fn marker(g: &mut Grammar, tokenizer: &Tokenizer, text: &str) -> NodeId {
    match tokenizer.token_id(text) {
        Some(id)
            if !matches!(
                tokenizer.token_type(id),
                Ok(TokenType::Normal | TokenType::Byte)
            ) =>
        {
            g.token(id)
        }
        _ => g.text(text),
    }
}

/// `schema` with the `$defs` of the tool's parameters beside it, so its refs resolve.
fn with_defs(schema: &Value, parameters: &Value) -> Value {
    let mut s = schema.clone();
    for key in ["$defs", "definitions"] {
        if let (Some(defs), Some(obj)) = (parameters.get(key), s.as_object_mut()) {
            obj.entry(key).or_insert_with(|| defs.clone());
        }
    }
    s
}

/// Qwen3.5's `<parameter=P>\nVALUE\n</parameter>\n` lines (each value one JSON value of its
/// schema, properties in declared order, the required ones always), then `</function>`.
fn xml_parameters(g: &mut Grammar, tool: &Tool, at: &str) -> Result<NodeId> {
    let props: Vec<(String, Value)> = tool
        .parameters
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let required: Vec<&str> = tool
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let n = props.len();
    let end = g.text("</function>");
    // next[k]: what may come once the properties before k are settled
    let mut next = vec![end; n + 1];
    let mut after: Vec<NodeId> = vec![end; n];
    for k in (0..n).rev() {
        let (name, schema) = &props[k];
        let value = g
            .json(&with_defs(schema, &tool.parameters))
            .map_err(|e| bad(&format!("{at}.properties.{name}"), &e.to_string()))?;
        let close = g.text("\n</parameter>\n");
        after[k] = g.seq(vec![value, close, next[k + 1]]);
        let mut options = Vec::new();
        let mut all_optional = true;
        for j in k..n {
            options.push((format!("<parameter={}>\n", props[j].0), Some(after[j])));
            if required.contains(&props[j].0.as_str()) {
                all_optional = false;
                break;
            }
        }
        if all_optional {
            options.push(("</function>".to_owned(), None));
        }
        next[k] = g.choice(options).map_err(|e| bad(at, &e.to_string()))?;
    }
    Ok(next[0])
}

impl Forced {
    pub fn build(tools: &Tools, tokenizer: &Tokenizer) -> Result<Forced> {
        let chosen: Vec<(usize, &Tool)> = match &tools.choice {
            ToolChoice::Named(n) => tools
                .list
                .iter()
                .enumerate()
                .filter(|(_, t)| &t.name == n)
                .collect(),
            _ => tools.list.iter().enumerate().collect(),
        };
        // a named function, or `required` with one tool: the name is part of the opening
        let named = chosen.len() == 1;
        let at = |i: usize| format!("tools[{i}].function.parameters");
        let mut g = Grammar::new();
        let json = |g: &mut Grammar, i: usize, tool: &Tool| {
            g.json(&tool.parameters)
                .map_err(|e| bad(&at(i), &e.to_string()))
        };
        // each chosen tool: the text that names it, and what follows
        let (open, mut options): (&str, Vec<(String, NodeId)>) = match tools.format {
            ToolFormat::Hermes | ToolFormat::Injected => {
                let mut options = Vec::new();
                for &(i, tool) in &chosen {
                    let args = json(&mut g, i, tool)?;
                    let close = g.text("}");
                    let rest = g.seq(vec![args, close]);
                    options.push((format!("\"{}\", \"arguments\": ", tool.name), rest));
                }
                ("<tool_call>\n{\"name\": ", options)
            }
            ToolFormat::QwenXml => {
                let mut options = Vec::new();
                for &(i, tool) in &chosen {
                    let rest = xml_parameters(&mut g, tool, &at(i))?;
                    options.push((format!("{}>\n", tool.name), rest));
                }
                ("<tool_call>\n<function=", options)
            }
            ToolFormat::Harmony => {
                let mut options = Vec::new();
                for &(i, tool) in &chosen {
                    let constrain = marker(&mut g, tokenizer, "<|constrain|>");
                    let kind = g.text("json");
                    let message = marker(&mut g, tokenizer, "<|message|>");
                    let args = json(&mut g, i, tool)?;
                    let rest = g.seq(vec![constrain, kind, message, args]);
                    options.push((format!("{} ", tool.name), rest));
                }
                ("<|channel|>commentary to=functions.", options)
            }
        };
        let (prefix, root) = if named {
            let (head, rest) = options.swap_remove(0);
            (format!("{open}{head}"), rest)
        } else {
            let options = options.into_iter().map(|(t, n)| (t, Some(n))).collect();
            let root = g
                .choice(options)
                .map_err(|e| bad("tools", &e.to_string()))?;
            (open.to_owned(), root)
        };
        let schema = g.build(root).map_err(|e| bad("tools", &e.to_string()))?;
        Ok(Forced { prefix, schema })
    }
}
