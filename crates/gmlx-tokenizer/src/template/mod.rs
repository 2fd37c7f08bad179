//! Chat templates: the GGUF's `tokenizer.chat_template` rendered with minijinja the way
//! Hugging Face transformers renders it with Python jinja2.
//!
//! HF's conventions, reproduced here:
//! - `trim_blocks` and `lstrip_blocks` on, a single trailing newline of the source dropped;
//! - `raise_exception(message)` aborts rendering ([`Error::TemplateException`]);
//! - `strftime_now(format)` formats the current time (UTC here; pin it with [`Clock::Fixed`]);
//! - `tojson` is Python's `json.dumps(x, ensure_ascii=False, indent=..., separators=...,
//!   sort_keys=...)`: `", "`/`": "` separators, no HTML escaping, insertion order kept;
//! - loop controls (`break`, `continue`), `namespace`, Python string and dict methods
//!   (`strip`, `split`, `startswith`, `items`, `get`, ...), and the `{% generation %}`
//!   block, whose body renders unchanged;
//! - values print with Python's `str()`: `None`, `True`, `{'a': 1}`;
//! - the context is `messages`, `tools`, `documents`, `add_generation_prompt`,
//!   `bos_token`, `eos_token`, plus any keyword arguments (`enable_thinking`, ...).

mod pyfmt;
mod strftime;

use std::cell::RefCell;
use std::sync::Arc;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, ErrorKind};

pub use self::strftime::DateTime;
use crate::error::{Error, Result};

/// Where `strftime_now` takes "now" from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The system clock, in UTC.
    #[default]
    SystemUtc,
    /// A fixed moment (for reproducible renders and tests).
    Fixed(DateTime),
}

impl Clock {
    fn now(&self) -> DateTime {
        match self {
            Clock::SystemUtc => DateTime::now_utc(),
            Clock::Fixed(t) => *t,
        }
    }
}

/// One render of a chat template: the conversation and the switches HF passes.
///
/// `messages`, `tools` and `documents` are JSON values in the OpenAI/HF shape
/// (`{"role": ..., "content": ..., "tool_calls": [...]}`); object key order is kept.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<serde_json::Value>,
    /// Tool (function) definitions; `None` renders as `tools = none`, like HF.
    pub tools: Option<Vec<serde_json::Value>>,
    /// RAG documents; `None` renders as `documents = none`.
    pub documents: Option<serde_json::Value>,
    /// Whether to open an assistant turn at the end.
    pub add_generation_prompt: bool,
    /// Extra template variables, e.g. `enable_thinking: false` or `reasoning_effort`.
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

impl ChatRequest {
    /// A request for `messages` with the generation prompt on.
    pub fn new(messages: Vec<serde_json::Value>) -> ChatRequest {
        ChatRequest {
            messages,
            add_generation_prompt: true,
            ..ChatRequest::default()
        }
    }
}

/// A compiled chat template.
#[derive(Debug)]
pub struct ChatTemplate {
    name: String,
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

const TEMPLATE_NAME: &str = "chat_template";

thread_local! {
    /// The message of the last `raise_exception` call on this thread.
    static RAISED: RefCell<Option<String>> = const { RefCell::new(None) };
}

impl ChatTemplate {
    /// Compiles `source`. `name` identifies the template in errors (`default`,
    /// `tool_use`, ...); `bos_token`/`eos_token` are the strings the template sees.
    pub fn new(
        name: &str,
        source: &str,
        bos_token: &str,
        eos_token: &str,
        clock: Clock,
    ) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state, value| {
            let text = pyfmt::py_str(value)?;
            out.write_str(&text)
                .map_err(|e| minijinja::Error::new(ErrorKind::WriteFailure, e.to_string()))
        });
        env.add_filter("tojson", tojson);
        env.add_filter(
            "string",
            |v: Value| -> std::result::Result<String, minijinja::Error> { pyfmt::py_str(&v) },
        );
        env.add_function("raise_exception", raise_exception);
        env.add_test("iterable", is_iterable);
        let clock = Arc::new(clock);
        env.add_function("strftime_now", move |fmt: String| {
            clock.now().strftime(&fmt)
        });
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_blocks(source))
            .map_err(|e| Error::TemplateSyntax {
                name: name.to_owned(),
                reason: describe(&e),
            })?;
        Ok(ChatTemplate {
            name: name.to_owned(),
            env,
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
        })
    }

    /// The template's name (`default`, `tool_use`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renders the conversation to the prompt text.
    pub fn render(&self, request: &ChatRequest) -> Result<String> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| self.render_error(e))?;
        let mut ctx: Vec<(String, Value)> = vec![
            ("messages".into(), Value::from_serialize(&request.messages)),
            (
                "tools".into(),
                request
                    .tools
                    .as_ref()
                    .map_or(Value::from(()), Value::from_serialize),
            ),
            (
                "documents".into(),
                request
                    .documents
                    .as_ref()
                    .map_or(Value::from(()), Value::from_serialize),
            ),
            (
                "add_generation_prompt".into(),
                Value::from(request.add_generation_prompt),
            ),
            ("bos_token".into(), Value::from(self.bos_token.clone())),
            ("eos_token".into(), Value::from(self.eos_token.clone())),
        ];
        for (k, v) in &request.kwargs {
            let value = Value::from_serialize(v);
            match ctx.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = value,
                None => ctx.push((k.clone(), value)),
            }
        }
        let ctx: Value = ctx.into_iter().collect();
        RAISED.with(|r| r.borrow_mut().take());
        template.render(ctx).map_err(|e| self.render_error(e))
    }

    fn render_error(&self, e: minijinja::Error) -> Error {
        if let Some(message) = RAISED.with(|r| r.borrow_mut().take()) {
            return Error::TemplateException { message };
        }
        Error::TemplateRender {
            name: self.name.clone(),
            reason: describe(&e),
        }
    }
}

/// A one-line description of a minijinja error, with its line.
fn describe(e: &minijinja::Error) -> String {
    match e.line() {
        Some(line) => format!("{e} (line {line})"),
        None => e.to_string(),
    }
}

fn raise_exception(message: Value) -> std::result::Result<Value, minijinja::Error> {
    let text = pyfmt::py_str(&message)?;
    RAISED.with(|r| *r.borrow_mut() = Some(text.clone()));
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, text))
}

/// Python's notion: strings, lists and dicts iterate; `None` does not.
fn is_iterable(value: Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Iterable
            | ValueKind::Bytes
    )
}

/// HF's `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: Value, args: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let ensure_ascii: Option<bool> = args.get("ensure_ascii")?;
    let indent: Option<Value> = args.get("indent")?;
    let separators: Option<Value> = args.get("separators")?;
    let sort_keys: Option<bool> = args.get("sort_keys")?;
    args.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.kind() {
            ValueKind::String => Some(v.as_str().unwrap_or_default().to_owned()),
            ValueKind::Number => {
                let n = v.as_i64().unwrap_or(0).max(0) as usize;
                Some(" ".repeat(n))
            }
            other => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: indent must be an int or str, not {other}"),
                ))
            }
        },
    };
    let separators = match separators {
        Some(v) if !v.is_none() => {
            let items: Vec<Value> = v.try_iter()?.collect();
            match items.as_slice() {
                [a, b] => Some((pyfmt::py_str(a)?, pyfmt::py_str(b)?)),
                _ => {
                    return Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair",
                    ))
                }
            }
        }
        _ => None,
    };
    let opts = pyfmt::JsonOptions::new(
        ensure_ascii.unwrap_or(false),
        indent,
        separators,
        sort_keys.unwrap_or(false),
    );
    pyfmt::json_dumps(&value, &opts).map(Value::from)
}

/// Turns HF's `{% generation %}` / `{% endgeneration %}` into `{% if true %}` /
/// `{% endif %}`, keeping any whitespace-control dashes, so the body renders unchanged.
fn rewrite_generation_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lead} if true {trail}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lead} endif {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, req: &ChatRequest) -> Result<String> {
        ChatTemplate::new("t", src, "<s>", "</s>", Clock::default())?.render(req)
    }

    #[test]
    fn python_value_printing() {
        let req = ChatRequest::default();
        assert_eq!(
            render("{{ none }} {{ true }} {{ {'a': [1, none]} }}", &req)
                .ok()
                .as_deref(),
            Some("None True {'a': [1, None]}")
        );
    }

    #[test]
    fn raise_exception_is_reported() {
        let req = ChatRequest::default();
        match render("{{ raise_exception('no system role') }}", &req) {
            Err(Error::TemplateException { message }) => assert_eq!(message, "no system role"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn generation_block_renders_body() {
        let req = ChatRequest::default();
        assert_eq!(
            render("a{%- generation %} b {% endgeneration -%} c", &req)
                .ok()
                .as_deref(),
            Some("a b c")
        );
    }

    #[test]
    fn strftime_now_uses_clock() {
        let t = ChatTemplate::new(
            "t",
            "{{ strftime_now('%d %b %Y') }}",
            "",
            "",
            Clock::Fixed(DateTime {
                year: 2024,
                month: 7,
                day: 26,
                hour: 0,
                minute: 0,
                second: 0,
            }),
        )
        .and_then(|t| t.render(&ChatRequest::default()));
        assert_eq!(t.ok().as_deref(), Some("26 Jul 2024"));
    }
}
