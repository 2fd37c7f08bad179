//! Calls read out of generated text, per format. Text that is not a well-formed call stays
//! content; a stream holds text back from the first sign of a call to the end.
use serde_json::Value;

use super::{Tool, ToolFormat};

/// A call read from the output.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: Value,
}

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// The texts from which a format's output may be a call.
fn markers(format: ToolFormat) -> &'static [&'static str] {
    match format {
        ToolFormat::Hermes | ToolFormat::QwenXml | ToolFormat::Injected => &[CALL_OPEN],
        ToolFormat::Harmony => &["<|start|>", "<|channel|>", "to=functions."],
    }
}

/// `{"name": ..., "arguments": {...}}` (arguments may also come as a JSON string, or as
/// `parameters`).
fn json_call(body: &str) -> Option<ParsedCall> {
    let v: Value = serde_json::from_str(body.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_owned();
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        None => Value::Object(Default::default()),
        Some(Value::String(s)) => serde_json::from_str(s).ok()?,
        Some(a) => a.clone(),
    };
    arguments
        .is_object()
        .then_some(ParsedCall { name, arguments })
}

/// One line-trimmed parameter value: by its schema's type, a string stays text (unquoted
/// when it is a JSON string), anything else is read as JSON.
fn xml_value(raw: &str, schema: Option<&Value>) -> Value {
    let raw = raw.strip_prefix('\n').unwrap_or(raw);
    let raw = raw.strip_suffix('\n').unwrap_or(raw);
    let is_string = schema
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t == "string");
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::String(s)) => Value::String(s),
        Ok(v) if !is_string => v,
        _ => Value::String(raw.to_owned()),
    }
}

/// `<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>`.
fn xml_call(body: &str, tools: &[Tool]) -> Option<ParsedCall> {
    let rest = body.trim_start().strip_prefix("<function=")?;
    let end = rest.find('>')?;
    let name = rest[..end].trim().to_owned();
    let schema = tools
        .iter()
        .find(|t| t.name == name)
        .and_then(|t| t.parameters.get("properties"));
    let mut rest = &rest[end + 1..];
    let mut arguments = serde_json::Map::new();
    while let Some(at) = rest.find("<parameter=") {
        let after = &rest[at + "<parameter=".len()..];
        let close = after.find('>')?;
        let key = after[..close].trim().to_owned();
        let value = &after[close + 1..];
        let stop = value.find("</parameter>")?;
        let v = xml_value(&value[..stop], schema.and_then(|s| s.get(&key)));
        arguments.insert(key, v);
        rest = &value[stop + "</parameter>".len()..];
    }
    let tail = rest.trim();
    (tail.is_empty() || tail.starts_with("</function>")).then_some(ParsedCall {
        name,
        arguments: Value::Object(arguments),
    })
}

/// The `<tool_call>` blocks of `text` (an unclosed last one runs to the end).
fn tagged_calls(
    text: &str,
    read: impl Fn(&str) -> Option<ParsedCall>,
) -> (String, Vec<ParsedCall>) {
    let (mut content, mut calls) = (String::new(), Vec::new());
    let mut rest = text;
    while let Some(at) = rest.find(CALL_OPEN) {
        content.push_str(&rest[..at]);
        let body_at = at + CALL_OPEN.len();
        let (body, next) = match rest[body_at..].find(CALL_CLOSE) {
            Some(e) => (&rest[body_at..body_at + e], body_at + e + CALL_CLOSE.len()),
            None => (&rest[body_at..], rest.len()),
        };
        match read(body) {
            Some(call) => calls.push(call),
            None => content.push_str(&rest[at..next]),
        }
        rest = &rest[next..];
    }
    content.push_str(rest);
    (content, calls)
}

/// Harmony messages addressed `to=functions.NAME`, their `<|message|>` body JSON arguments.
fn harmony_calls(text: &str) -> (String, Vec<ParsedCall>) {
    const TO: &str = "to=functions.";
    let (mut content, mut calls) = (String::new(), Vec::new());
    let mut rest = text;
    while let Some(at) = rest.find(TO) {
        // the call's header starts after the message before it
        let header = rest[..at]
            .rfind("<|end|>")
            .map_or(0, |e| e + "<|end|>".len());
        let after = &rest[at + TO.len()..];
        let name_len = after
            .find(|c: char| c.is_whitespace() || c == '<')
            .unwrap_or(after.len());
        let name = &after[..name_len];
        let Some(open) = after.find("<|message|>") else {
            break;
        };
        let body = &after[open + "<|message|>".len()..];
        let (body_len, skip) = ["<|call|>", "<|end|>", "<|start|>"]
            .iter()
            .filter_map(|m| body.find(m).map(|i| (i, m.len())))
            .min()
            .unwrap_or((body.len(), 0));
        let end = at + TO.len() + open + "<|message|>".len() + body_len + skip;
        match serde_json::from_str::<Value>(body[..body_len].trim()) {
            Ok(arguments) if arguments.is_object() && !name.is_empty() => {
                content.push_str(&rest[..header]);
                calls.push(ParsedCall {
                    name: name.to_owned(),
                    arguments,
                });
            }
            _ => content.push_str(&rest[..end]),
        }
        rest = &rest[end..];
    }
    content.push_str(rest);
    (content, calls)
}

/// The content and calls of a whole output.
pub fn parse(format: ToolFormat, text: &str, tools: &[Tool]) -> (String, Vec<ParsedCall>) {
    match format {
        ToolFormat::Hermes | ToolFormat::Injected => tagged_calls(text, json_call),
        ToolFormat::QwenXml => tagged_calls(text, |b| xml_call(b, tools)),
        ToolFormat::Harmony => harmony_calls(text),
    }
}

/// Releases streamed text as content until something may begin a call, then holds the rest
/// for [`CallSplitter::finish`].
#[derive(Debug)]
pub struct CallSplitter {
    format: ToolFormat,
    held: String,
    holding: bool,
}

impl CallSplitter {
    /// `prefix`: the forced opening the prompt ended with, where the output continues a call.
    pub fn new(format: ToolFormat, prefix: Option<&str>) -> CallSplitter {
        CallSplitter {
            format,
            held: prefix.unwrap_or_default().to_owned(),
            holding: prefix.is_some(),
        }
    }

    /// The content `text` releases.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        if self.holding {
            return String::new();
        }
        let markers = markers(self.format);
        if let Some(at) = markers.iter().filter_map(|m| self.held.find(m)).min() {
            self.holding = true;
            return self.held.drain(..at).collect();
        }
        // keep a suffix that may begin a marker
        let keep = markers
            .iter()
            .flat_map(|m| (1..m.len()).filter(|&k| self.held.ends_with(&m[..k])))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        self.held.drain(..cut).collect()
    }

    /// The content still held and every call, at the end of the output; only the first call
    /// when `parallel` is off.
    pub fn finish(&mut self, tools: &[Tool], parallel: bool) -> (String, Vec<ParsedCall>) {
        let held = std::mem::take(&mut self.held);
        let (content, mut calls) = parse(self.format, &held, tools);
        if !parallel {
            calls.truncate(1);
        }
        (content, calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<Tool> {
        let wire = json!({"type": "function", "function": {"name": "get_weather"}});
        vec![Tool {
            name: "get_weather".into(),
            parameters: json!({"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"}}}),
            wire,
        }]
    }

    fn streamed(format: ToolFormat, pieces: &[&str]) -> (String, Vec<ParsedCall>) {
        let mut s = CallSplitter::new(format, None);
        let mut content: String = pieces.iter().map(|p| s.push(p)).collect();
        let (rest, calls) = s.finish(&tools(), true);
        content += &rest;
        (content, calls)
    }

    fn call(city: &str) -> ParsedCall {
        ParsedCall {
            name: "get_weather".into(),
            arguments: json!({"city": city, "days": 2}),
        }
    }

    #[test]
    fn hermes_calls_are_read_across_pieces_and_bad_ones_stay_content() {
        let (content, calls) = streamed(
            ToolFormat::Hermes,
            &[
                "Let me check.<tool",
                "_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", ",
                "\"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", ",
                "\"arguments\": \"{\\\"city\\\": \\\"Rome\\\", \\\"days\\\": 2}\"}",
            ],
        );
        assert_eq!(content.trim(), "Let me check.");
        assert_eq!(calls, vec![call("Paris"), call("Rome")]);
        let (content, calls) = streamed(ToolFormat::Hermes, &["<tool_call>not json</tool_call>"]);
        assert_eq!(
            (content.as_str(), calls.len()),
            ("<tool_call>not json</tool_call>", 0)
        );
        let (content, calls) = streamed(ToolFormat::Injected, &["a < b", " and <tool"]);
        assert_eq!((content.as_str(), calls.len()), ("a < b and <tool", 0));
    }

    #[test]
    fn qwen_xml_values_follow_the_parameter_types() {
        let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n\
                    <parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
        let (content, calls) = streamed(ToolFormat::QwenXml, &[text]);
        assert_eq!((content.as_str(), calls), ("", vec![call("Paris")]));
        // a forced call's string values come JSON-quoted
        let forced = "get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n\
                      <parameter=days>\n2\n</parameter>\n</function>";
        let mut s = CallSplitter::new(ToolFormat::QwenXml, Some("<tool_call>\n<function="));
        assert_eq!(s.push(forced), "");
        assert_eq!(
            s.finish(&tools(), true),
            (String::new(), vec![call("Paris")])
        );
    }

    #[test]
    fn harmony_calls_leave_the_other_messages() {
        let text = "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant\
                    <|channel|>commentary to=functions.get_weather <|constrain|>json\
                    <|message|>{\"city\": \"Paris\", \"days\": 2}";
        let (content, calls) = streamed(ToolFormat::Harmony, &[text]);
        assert_eq!(
            content,
            "<|channel|>analysis<|message|>Need weather.<|end|>"
        );
        assert_eq!(calls, vec![call("Paris")]);
        let (content, calls) = streamed(ToolFormat::Harmony, &["plain answer"]);
        assert_eq!((content.as_str(), calls.len()), ("plain answer", 0));
    }
}
