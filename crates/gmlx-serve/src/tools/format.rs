//! The tool-call formats of chat templates, recognised from the template's source, and the
//! instructions added to the system prompt of a template that renders no tools.
use serde_json::Value;

use super::Tool;

/// How a model writes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (Qwen3, Qwen2.5,
    /// Hermes).
    Hermes,
    /// `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n
    /// </tool_call>` (Qwen3.5, Qwen3-Coder).
    QwenXml,
    /// gpt-oss's harmony: `<|channel|>commentary to=functions.NAME <|constrain|>json
    /// <|message|>{...}<|call|>`.
    Harmony,
    /// The template renders no tools (SmolLM2) or in a format not listed here: the tools and
    /// the Hermes format are described in the system prompt, and calls read as Hermes.
    Injected,
}

impl ToolFormat {
    pub fn detect(template: Option<&str>) -> ToolFormat {
        let Some(t) = template else {
            return ToolFormat::Injected;
        };
        if t.contains("<tool_call>") && t.contains("<function=") {
            ToolFormat::QwenXml
        } else if t.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if t.contains("<|channel|>") && t.contains("functions.") {
            ToolFormat::Harmony
        } else {
            ToolFormat::Injected
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::QwenXml => "qwen-xml",
            ToolFormat::Harmony => "harmony",
            ToolFormat::Injected => "injected",
        }
    }
}

/// The system-prompt text that offers `tools` in the Hermes format.
pub(super) fn instructions(tools: &[Tool]) -> String {
    let mut text = String::from(
        "# Tools\n\nYou can call these functions (JSON Schema signatures inside <tools>):\n<tools>",
    );
    for t in tools {
        text.push('\n');
        text.push_str(&t.wire.get("function").unwrap_or(&t.wire).to_string());
    }
    text.push_str(
        "\n</tools>\n\nTo call one, reply with a JSON object of its name and arguments between \
         <tool_call> tags:\n<tool_call>\n{\"name\": \"function name\", \"arguments\": {...}}\n\
         </tool_call>",
    );
    text
}

/// A call in the Hermes format, as an injected-format history shows it.
pub(super) fn hermes_call(name: &str, arguments: &Value) -> String {
    let call = serde_json::json!({"name": name, "arguments": arguments});
    format!("<tool_call>\n{call}\n</tool_call>")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(name: &str) -> String {
        let root = std::env::var("GMLX_LLAMA_CPP")
            .expect("GMLX_LLAMA_CPP (llama.cpp's sources): run through `cargo xtask test`");
        std::fs::read_to_string(format!("{root}/models/templates/{name}"))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn the_shipped_templates_are_recognised() {
        let cases = [
            ("Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes),
            ("Qwen3.5-4B.jinja", ToolFormat::QwenXml),
            ("Qwen3-Coder.jinja", ToolFormat::QwenXml),
            ("openai-gpt-oss-120b.jinja", ToolFormat::Harmony),
            ("Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::Hermes),
            (
                "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
                ToolFormat::Hermes,
            ),
            (
                "meta-llama-Llama-3.1-8B-Instruct.jinja",
                ToolFormat::Injected,
            ),
        ];
        for (name, format) in cases {
            let t = template(name);
            assert_eq!(ToolFormat::detect(Some(&t)), format, "{name}");
        }
        assert_eq!(ToolFormat::detect(None), ToolFormat::Injected);
    }
}
