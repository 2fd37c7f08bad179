//! Wire requests → `ValidRequest`: model and profile resolved, template applied, sampling
//! checked, limits applied. Nothing past this point re-checks a request.
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use gmlx_models::constrain::{Constraint, Schema, VocabTrie};

use gmlx_models::SamplingParams;
use gmlx_tokenizer::{ChatRequest, ChatTemplate, Clock, TokenId, Tokenizer};

use crate::api::types::{ChatCompletionRequest, CommonParams, CompletionRequest, Prompt, Stop};
use crate::config::{ModelEntry, Profile, ServeConfig};
use crate::engine::{Engine, ValidRequest};
use crate::error::{Error, Result};
use crate::tools::{Forced, ToolFormat, Tools};

/// A loaded model as the HTTP side sees it: tokenizer and template, never MLX.
pub struct ModelInfo {
    pub entry: ModelEntry,
    pub tokenizer: Arc<Tokenizer>,
    pub template: Option<ChatTemplate>,
    /// The template marks reasoning with `<think>`.
    pub thinking_tags: bool,
    /// How the template writes tool calls.
    pub tool_format: ToolFormat,
    pub engine: Engine,
    /// The vocabulary as a byte trie, built by the first constrained request.
    trie: OnceLock<Arc<VocabTrie>>,
}

impl ModelInfo {
    /// The chat template of a model whose engine is running, beside the tokenizer of its load.
    pub fn new(entry: ModelEntry, engine: Engine, tokenizer: Arc<Tokenizer>) -> Result<ModelInfo> {
        let source =
            match &entry.chat_template {
                Some(file) => Some(std::fs::read_to_string(file).map_err(|source| {
                    Error::ChatTemplateRead {
                        id: entry.id.clone(),
                        file: file.clone(),
                        source,
                    }
                })?),
                None => tokenizer.chat_template_source("default").map(str::to_owned),
            };
        let text = |id: Option<TokenId>| {
            id.and_then(|i| tokenizer.token_text(i).ok())
                .unwrap_or("")
                .to_owned()
        };
        let template = match &source {
            Some(s) => Some(
                ChatTemplate::new(
                    "default",
                    s,
                    &text(tokenizer.bos_id()),
                    &text(tokenizer.eos_id()),
                    Clock::SystemUtc,
                )
                .map_err(|source| Error::ChatTemplate {
                    id: entry.id.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        let thinking_tags = source.as_deref().is_some_and(|s| s.contains("<think>"));
        let tool_format = ToolFormat::detect(source.as_deref());
        Ok(ModelInfo {
            entry,
            tokenizer,
            template,
            thinking_tags,
            tool_format,
            engine,
            trie: OnceLock::new(),
        })
    }

    fn constraint(&self, schema: Schema) -> Constraint {
        Constraint {
            schema: Arc::new(schema),
            trie: self.trie(),
        }
    }

    fn trie(&self) -> Arc<VocabTrie> {
        Arc::clone(
            self.trie
                .get_or_init(|| Arc::new(VocabTrie::new(&self.tokenizer))),
        )
    }
}

/// `response_format`: nothing for `text`, else the schema the reply must match.
fn response_format(
    info: &ModelInfo,
    format: Option<&serde_json::Value>,
) -> Result<Option<Constraint>> {
    let Some(format) = format else {
        return Ok(None);
    };
    let schema = match format.get("type").and_then(|t| t.as_str()) {
        Some("text") => return Ok(None),
        Some("json_object") => Schema::any_object(),
        Some("json_schema") => {
            let schema = format
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .ok_or_else(|| bad("response_format.json_schema.schema", "is required"))?;
            Schema::compile(schema)
                .map_err(|e| bad("response_format.json_schema.schema", &e.to_string()))?
        }
        _ => {
            return Err(bad(
                "response_format.type",
                "must be `text`, `json_object` or `json_schema`",
            ))
        }
    };
    Ok(Some(info.constraint(schema)))
}

/// What the handler needs besides the engine request.
pub struct Valid {
    pub request: ValidRequest,
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    /// `Some(inside)`: split `<think>` text into `reasoning_content`; `inside` when the
    /// prompt already opened the block.
    pub reasoning: Option<bool>,
    /// The request's tools, whose calls are read out of the reply.
    pub tools: Option<Arc<Tools>>,
    /// A forced call's opening, which the prompt ends with and the reply continues.
    pub forced_prefix: Option<String>,
    pub info: Arc<ModelInfo>,
}

/// The environment's thinking default: `GMLX_ENABLE_THINKING`, then
/// `MLX_VLM_ENABLE_THINKING`.
pub fn env_thinking() -> Option<bool> {
    ["GMLX_ENABLE_THINKING", "MLX_VLM_ENABLE_THINKING"]
        .iter()
        .find_map(|k| std::env::var(k).ok().and_then(|v| parse_bool(&v)))
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The models and settings requests are checked against.
pub struct Context<'a> {
    pub config: &'a ServeConfig,
    pub models: &'a BTreeMap<String, Arc<ModelInfo>>,
    pub env_thinking: Option<bool>,
}

impl Context<'_> {
    fn resolve(&self, common: &CommonParams) -> Result<(Arc<ModelInfo>, Profile)> {
        let entry = self.config.model_or_first(common.model.as_deref());
        let info =
            entry
                .and_then(|e| self.models.get(&e.id))
                .ok_or_else(|| Error::UnknownModel {
                    model: common.model.clone().unwrap_or_default(),
                })?;
        let profile_name = common
            .profile
            .as_ref()
            .or(entry.and_then(|e| e.profile.as_ref()));
        let profile = match profile_name {
            Some(p) => self
                .config
                .profiles
                .get(p)
                .cloned()
                .ok_or_else(|| Error::UnknownProfile { profile: p.clone() })?,
            None => Profile::default(),
        };
        Ok((Arc::clone(info), profile))
    }
}

pub fn chat(wire: ChatCompletionRequest, ctx: &Context<'_>) -> Result<Valid> {
    let (info, profile) = ctx.resolve(&wire.common)?;
    let template = info.template.as_ref().ok_or_else(|| Error::BadParam {
        param: "messages".to_owned(),
        reason: "this model has no chat template; use /v1/completions".to_owned(),
    })?;
    if wire.messages.is_empty() {
        return Err(bad("messages", "is empty"));
    }
    let tools = Tools::from_wire(
        wire.tools.as_ref(),
        wire.tool_choice.as_ref(),
        wire.parallel_tool_calls,
        info.tool_format,
    )?;
    let injected = tools
        .as_ref()
        .is_some_and(|t| t.format == ToolFormat::Injected);
    let mut messages = wire.messages;
    for (i, m) in messages.iter_mut().enumerate() {
        normalize_message(i, m, injected)?;
    }
    if let Some(system) = &profile.system_prompt {
        if !messages.iter().any(|m| m["role"] == "system") {
            messages.insert(0, serde_json::json!({"role": "system", "content": system}));
        }
    }
    if let Some(t) = tools.as_ref().filter(|_| injected) {
        crate::tools::offer_in_system_prompt(&mut messages, t);
    }
    let mut kwargs = wire.chat_template_kwargs.unwrap_or_default();
    let thinking = wire
        .enable_thinking
        .or_else(|| kwargs.get("enable_thinking").and_then(|v| v.as_bool()))
        .or(profile.thinking)
        .or(ctx.env_thinking);
    if let Some(t) = thinking {
        kwargs.insert("enable_thinking".to_owned(), t.into());
    }
    let mut text = template.render(&ChatRequest {
        messages,
        tools: tools.as_ref().and_then(|t| t.for_template()),
        documents: None,
        add_generation_prompt: true,
        kwargs,
    })?;
    let mut reasoning = info
        .thinking_tags
        .then(|| text.trim_end().ends_with("<think>"));
    let forced = match tools.as_ref().filter(|t| t.forced()) {
        Some(t) => Some(Forced::build(t, &info.tokenizer)?),
        None => None,
    };
    if let Some(f) = &forced {
        if reasoning == Some(true) {
            // a forced call comes at once: the open reasoning block closes empty
            text.push_str("\n</think>\n\n");
            reasoning = Some(false);
        }
        text.push_str(&f.prefix);
    }
    let prompt = info.tokenizer.encode(&text, true, true)?;
    let logprobs = if wire.logprobs {
        Some(wire.top_logprobs.unwrap_or(0))
    } else if wire.top_logprobs.is_some() {
        return Err(bad("top_logprobs", "needs `logprobs: true`"));
    } else {
        None
    };
    if logprobs.is_some_and(|n| n > 20) {
        return Err(bad("top_logprobs", "must be at most 20"));
    }
    let forced_prefix = forced.as_ref().map(|f| f.prefix.clone());
    let constraint = forced.map(|f| info.constraint(f.schema));
    let mut valid = finish(
        info,
        profile,
        wire.common,
        prompt,
        logprobs,
        reasoning,
        constraint,
    )?;
    valid.tools = tools.map(Arc::new);
    valid.forced_prefix = forced_prefix;
    Ok(valid)
}

pub fn completion(wire: CompletionRequest, ctx: &Context<'_>) -> Result<Valid> {
    let (info, profile) = ctx.resolve(&wire.common)?;
    if wire.echo {
        return Err(bad("echo", "is not supported"));
    }
    let prompt = match wire.prompt {
        Prompt::Text(t) => info.tokenizer.encode(&t, true, false)?,
        Prompt::Texts(t) if t.len() == 1 => info.tokenizer.encode(&t[0], true, false)?,
        Prompt::Texts(_) => return Err(bad("prompt", "only one prompt per request")),
        Prompt::Tokens(ids) => {
            let vocab = info.tokenizer.vocab_size();
            if let Some(id) = ids.iter().find(|&&i| i as usize >= vocab) {
                return Err(bad(
                    "prompt",
                    &format!("token {id} is outside the vocabulary"),
                ));
            }
            ids
        }
    };
    if wire.logprobs.is_some_and(|n| n > 20) {
        return Err(bad("logprobs", "must be at most 20"));
    }
    finish(
        info,
        profile,
        wire.common,
        prompt,
        wire.logprobs,
        None,
        None,
    )
}

/// The roles of OpenAI's chat messages.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// Checks message `i` and puts it in the shape chat templates expect: `developer` becomes
/// `system`; a list of text parts becomes one string; a missing or null `content` (an
/// assistant turn that only calls tools) becomes the empty string. The faulty part is named
/// in the error (`messages[2].role`), never the template engine's message.
fn normalize_message(i: usize, m: &mut serde_json::Value, injected: bool) -> Result<()> {
    let at = |field: &str| format!("messages[{i}].{field}");
    let Some(obj) = m.as_object_mut() else {
        return Err(bad(&format!("messages[{i}]"), "must be an object"));
    };
    let role = match obj.get("role") {
        Some(serde_json::Value::String(r)) if ROLES.contains(&r.as_str()) => r.clone(),
        Some(serde_json::Value::String(r)) => {
            return Err(bad(
                &at("role"),
                &format!("`{r}` is not one of {}", ROLES.join(", ")),
            ))
        }
        _ => return Err(bad(&at("role"), "must be a string")),
    };
    if role == "developer" {
        obj.insert("role".to_owned(), "system".into());
    }
    let content = match obj.remove("content") {
        None | Some(serde_json::Value::Null) => {
            if role != "assistant" {
                return Err(bad(&at("content"), "is required for this role"));
            }
            String::new()
        }
        Some(serde_json::Value::String(text)) => text,
        Some(serde_json::Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match part.get("type").and_then(|t| t.as_str()) {
                    Some("text") => match part.get("text").and_then(|t| t.as_str()) {
                        Some(t) => text.push_str(t),
                        None => {
                            return Err(bad(
                                &format!("messages[{i}].content[{j}].text"),
                                "must be a string",
                            ))
                        }
                    },
                    Some(kind @ ("image_url" | "input_audio" | "file")) => {
                        return Err(bad(
                            &format!("messages[{i}].content[{j}]"),
                            &format!("`{kind}` parts are not supported: the model reads text only"),
                        ))
                    }
                    _ => {
                        return Err(bad(
                            &format!("messages[{i}].content[{j}].type"),
                            "must be `text`",
                        ))
                    }
                }
            }
            text
        }
        Some(_) => return Err(bad(&at("content"), "must be a string or a list of parts")),
    };
    let mut content = content;
    if let Some(calls) = obj.get_mut("tool_calls") {
        if role != "assistant" {
            return Err(bad(&at("tool_calls"), "only assistant messages call tools"));
        }
        let rendered = crate::tools::normalize_history_calls(i, calls)?;
        if injected {
            // the template renders no calls: the history shows them as the model writes them
            for call in rendered {
                if !content.is_empty() {
                    content.push('\n');
                }
                content.push_str(&call);
            }
            obj.remove("tool_calls");
        }
    }
    if role == "tool" && injected {
        content = format!("<tool_response>\n{content}\n</tool_response>");
    }
    obj.insert("content".to_owned(), content.into());
    Ok(())
}

/// OpenAI's documented ranges for the sampling fields a request may set.
fn check_ranges(common: &CommonParams) -> Result<()> {
    let within = |param: &str, v: Option<f32>, lo: f32, hi: f32, low_open: bool| match v {
        Some(x) if x.is_nan() || x > hi || x < lo || (low_open && x == lo) => {
            let open = if low_open { "(" } else { "[" };
            Err(bad(param, &format!("{x} is not in {open}{lo}, {hi}]")))
        }
        _ => Ok(()),
    };
    within("temperature", common.temperature, 0.0, 2.0, false)?;
    within("top_p", common.top_p, 0.0, 1.0, true)?;
    within(
        "presence_penalty",
        common.presence_penalty,
        -2.0,
        2.0,
        false,
    )?;
    within(
        "frequency_penalty",
        common.frequency_penalty,
        -2.0,
        2.0,
        false,
    )?;
    if common.n == Some(0) {
        return Err(bad("n", "must be at least 1"));
    }
    Ok(())
}

fn bad(param: &str, reason: &str) -> Error {
    Error::BadParam {
        param: param.to_owned(),
        reason: reason.to_owned(),
    }
}

fn finish(
    info: Arc<ModelInfo>,
    profile: Profile,
    common: CommonParams,
    prompt: Vec<TokenId>,
    logprobs: Option<usize>,
    reasoning: Option<bool>,
    forced: Option<Constraint>,
) -> Result<Valid> {
    if prompt.is_empty() {
        return Err(bad("prompt", "is empty"));
    }
    check_ranges(&common)?;
    let n = common.n.unwrap_or(1) as usize;
    let width = info.engine.batch_width();
    if n > width {
        return Err(bad(
            "n",
            &format!("must be at most {width}, the model's batch width (`batch_width`)"),
        ));
    }
    let context = info.engine.context();
    if prompt.len() >= context {
        return Err(Error::ContextOverflow {
            needed: prompt.len() + 1,
            context,
        });
    }
    let max_tokens = common
        .max_completion_tokens
        .or(common.max_tokens)
        .or(profile.max_tokens)
        .unwrap_or(context - prompt.len());
    if max_tokens == 0 {
        return Err(bad("max_tokens", "must be at least 1"));
    }
    let mut logit_bias = BTreeMap::new();
    for (k, &v) in common.logit_bias.iter().flatten() {
        let id: TokenId = k
            .parse()
            .map_err(|_| bad("logit_bias", &format!("`{k}` is not a token id")))?;
        if !(-100.0..=100.0).contains(&v) {
            return Err(bad("logit_bias", &format!("{v} is not in [-100, 100]")));
        }
        logit_bias.insert(id, v);
    }
    let defaults = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: common.temperature.or(profile.temperature).unwrap_or(1.0),
        top_k: common
            .top_k
            .map(|k| k.max(0) as usize)
            .or(profile.top_k)
            .unwrap_or(0),
        top_p: common.top_p.or(profile.top_p).unwrap_or(1.0),
        min_p: common.min_p.or(profile.min_p).unwrap_or(0.0),
        repetition_penalty: common
            .repetition_penalty
            .or(profile.repetition_penalty)
            .unwrap_or(1.0),
        presence_penalty: common
            .presence_penalty
            .or(profile.presence_penalty)
            .unwrap_or(0.0),
        frequency_penalty: common
            .frequency_penalty
            .or(profile.frequency_penalty)
            .unwrap_or(0.0),
        logit_bias,
        seed: common.seed.map(|s| s as u64),
        ..defaults
    };
    sampling.validate(info.engine.vocab())?;
    let stop = match common.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) if v.len() <= 4 => v,
        Some(Stop::Many(_)) => return Err(bad("stop", "at most 4 stop strings")),
    };
    let format = response_format(&info, common.response_format.as_ref())?;
    let constraint = match (forced, format) {
        (Some(_), Some(_)) => {
            return Err(bad(
                "response_format",
                "cannot be combined with a forced tool call (`tool_choice`)",
            ))
        }
        (forced, format) => forced.or(format),
    };
    let model = common.model.unwrap_or_else(|| info.entry.id.clone());
    Ok(Valid {
        request: ValidRequest {
            id: String::new(),
            prompt,
            max_tokens,
            sampling,
            stop,
            logprobs,
            ignore_eos: common.ignore_eos,
            constraint,
            n,
            span: tracing::Span::none(),
        },
        model,
        stream: common.stream,
        include_usage: common.stream_options.is_some_and(|o| o.include_usage),
        reasoning,
        tools: None,
        forced_prefix: None,
        info,
    })
}
