//! Tool calling: `tools` and `tool_choice` checked, rendered in the model's own format (its
//! chat template's, or instructions added to the system prompt when the template has none),
//! calls parsed out of the output, and `required` / named calls forced by a grammar.
mod forced;
mod format;
mod parse;

pub use forced::Forced;
pub use format::ToolFormat;
pub use parse::{CallSplitter, ParsedCall};

use serde_json::Value;

use crate::error::{Error, Result};

/// One function a request offers.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    /// The JSON Schema of its arguments (`{"type": "object"}` when the request gave none).
    pub parameters: Value,
    /// The tool as the request gave it (`{"type": "function", "function": {...}}`), for the
    /// template.
    pub wire: Value,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// The tools of a request that offers any (and does not turn them off).
#[derive(Debug, Clone)]
pub struct Tools {
    pub list: Vec<Tool>,
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): more than one call per reply.
    pub parallel: bool,
    pub format: ToolFormat,
}

fn bad(param: &str, reason: &str) -> Error {
    Error::BadParam {
        param: param.to_owned(),
        reason: reason.to_owned(),
    }
}

/// OpenAI's rule for function names: 1-64 of `a-z A-Z 0-9 _ -`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn tool(i: usize, wire: &Value) -> Result<Tool> {
    let at = |field: &str| format!("tools[{i}]{field}");
    if wire.get("type").and_then(Value::as_str) != Some("function") {
        return Err(bad(&at(".type"), "must be `function`"));
    }
    let function = wire
        .get("function")
        .filter(|f| f.is_object())
        .ok_or_else(|| bad(&at(".function"), "must be an object"))?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(&at(".function.name"), "must be a string"))?;
    if !valid_name(name) {
        return Err(bad(
            &at(".function.name"),
            "must be 1-64 letters, digits, `_` or `-`",
        ));
    }
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => serde_json::json!({"type": "object", "properties": {}}),
        Some(p) if p.is_object() => p.clone(),
        Some(_) => return Err(bad(&at(".function.parameters"), "must be an object")),
    };
    Ok(Tool {
        name: name.to_owned(),
        parameters,
        wire: wire.clone(),
    })
}

fn choice(wire: Option<&Value>, names: &[&str]) -> Result<ToolChoice> {
    let choice = match wire {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => {
                return Err(bad(
                    "tool_choice",
                    "must be `none`, `auto`, `required` or a function",
                ))
            }
        },
        Some(v) => {
            if v.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad("tool_choice.type", "must be `function`"));
            }
            let name = v
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tool_choice.function.name", "must be a string"))?;
            ToolChoice::Named(name.to_owned())
        }
    };
    match &choice {
        ToolChoice::Required if names.is_empty() => {
            Err(bad("tool_choice", "`required` needs `tools`"))
        }
        ToolChoice::Named(n) if !names.contains(&n.as_str()) => Err(bad(
            "tool_choice.function.name",
            &format!("`{n}` is not among `tools`"),
        )),
        _ => Ok(choice),
    }
}

impl Tools {
    /// The request's tools; `None` when it offers none or sets `tool_choice: none`.
    pub fn from_wire(
        tools: Option<&Value>,
        tool_choice: Option<&Value>,
        parallel: Option<bool>,
        format: ToolFormat,
    ) -> Result<Option<Tools>> {
        let list = match tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, t)| tool(i, t))
                .collect::<Result<Vec<_>>>()?,
            Some(_) => return Err(bad("tools", "must be a list")),
        };
        let names: Vec<&str> = list.iter().map(|t| t.name.as_str()).collect();
        if let Some((i, n)) = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
        {
            return Err(bad(
                &format!("tools[{i}].function.name"),
                &format!("`{n}` is offered twice"),
            ));
        }
        let choice = choice(tool_choice, &names)?;
        if list.is_empty() || choice == ToolChoice::None {
            return Ok(None);
        }
        Ok(Some(Tools {
            list,
            choice,
            parallel: parallel.unwrap_or(true),
            format,
        }))
    }

    /// The tools the template's `tools` argument gets (none when the format injects them).
    pub fn for_template(&self) -> Option<Vec<Value>> {
        (self.format != ToolFormat::Injected)
            .then(|| self.list.iter().map(|t| t.wire.clone()).collect())
    }

    /// Whether the reply must be a call.
    pub fn forced(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_))
    }
}

/// Adds the injected format's instructions to the system message (one is added first when
/// the conversation has none).
pub fn offer_in_system_prompt(messages: &mut Vec<Value>, tools: &Tools) {
    let text = format::instructions(&tools.list);
    match messages.first_mut() {
        Some(m) if m["role"] == "system" => {
            let old = m["content"].as_str().unwrap_or_default();
            m["content"] = format!("{old}\n\n{text}").trim_start().into();
        }
        _ => messages.insert(0, serde_json::json!({"role": "system", "content": text})),
    }
}

/// Checks the `tool_calls` of history message `i`, turning each JSON-text `arguments` into
/// the object templates iterate; returns each call in the Hermes format.
pub fn normalize_history_calls(i: usize, calls: &mut Value) -> Result<Vec<String>> {
    let at = |j: usize, field: &str| format!("messages[{i}].tool_calls[{j}]{field}");
    let Some(list) = calls.as_array_mut() else {
        return Err(bad(&format!("messages[{i}].tool_calls"), "must be a list"));
    };
    let mut rendered = Vec::with_capacity(list.len());
    for (j, call) in list.iter_mut().enumerate() {
        let Some(function) = call.get_mut("function").and_then(Value::as_object_mut) else {
            return Err(bad(&at(j, ".function"), "must be an object"));
        };
        let name = match function.get("name") {
            Some(Value::String(n)) => n.clone(),
            _ => return Err(bad(&at(j, ".function.name"), "must be a string")),
        };
        let arguments = match function.get("arguments") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| bad(&at(j, ".function.arguments"), "must be a JSON object"))?,
            Some(v) if v.is_object() => v.clone(),
            Some(_) => return Err(bad(&at(j, ".function.arguments"), "must be a JSON object")),
        };
        rendered.push(format::hermes_call(&name, &arguments));
        function.insert("arguments".to_owned(), arguments);
    }
    Ok(rendered)
}
