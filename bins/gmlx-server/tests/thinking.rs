//! Thinking control: request > chat_template_kwargs > profile > environment > template
//! default, observed through a chat template that spells `enable_thinking` into the prompt
//! (so `usage.prompt_tokens` tells which value it saw); reasoning text comes back apart.
mod util;

use serde_json::json;
use util::{post, Server};

const TEMPLATE: &str = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}\
{% if enable_thinking is defined %}{% if enable_thinking %}think think think think think think\
{% else %}nothink{% endif %}{% endif %}\n<think>\n";

fn setup(tag: &str) -> std::path::PathBuf {
    let config = format!(
        "[[models]]\nid = \"smol\"\npath = {:?}\nchat_template = \"tmpl.jinja\"\nprofile = \"quiet\"\n\n\
         [profiles.quiet]\nthinking = false\n\n[profiles.plain]\ntemperature = 0.0\n",
        util::model()
    );
    let file = util::config_file(&format!("thinking-{tag}"), &config);
    let dir = file.parent().expect("scratch folder");
    std::fs::write(dir.join("tmpl.jinja"), TEMPLATE).expect("write template");
    file
}

fn prompt_tokens(addr: &str, extra: serde_json::Value) -> (u64, serde_json::Value) {
    let mut body = json!({"model": "smol", "messages": [{"role": "user", "content": "Hi"}],
                          "max_tokens": 2, "temperature": 0});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    let r = post(addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    (
        j["usage"]["prompt_tokens"].as_u64().expect("usage"),
        j["choices"][0]["message"].clone(),
    )
}

#[test]
fn enable_thinking_resolves_request_then_kwargs_then_profile_then_env() {
    let file = setup("env");
    let server = Server::start_env(
        &["--config", file.to_str().expect("utf-8"), "--port", "0"],
        &[("GMLX_ENABLE_THINKING", "1")],
    );
    let a = &server.addr;
    let (nothink, message) = prompt_tokens(a, json!({}));
    let (think, _) = prompt_tokens(a, json!({"enable_thinking": true}));
    assert!(
        think > nothink,
        "request true ({think}) vs the profile's false ({nothink})"
    );
    let (kw, _) = prompt_tokens(
        a,
        json!({"chat_template_kwargs": {"enable_thinking": true}}),
    );
    assert_eq!(kw, think, "chat_template_kwargs beats the profile");
    let (both, _) = prompt_tokens(
        a,
        json!({"enable_thinking": false, "chat_template_kwargs": {"enable_thinking": true}}),
    );
    assert_eq!(
        both, nothink,
        "the top-level field beats chat_template_kwargs"
    );
    let (env, _) = prompt_tokens(a, json!({"profile": "plain"}));
    assert_eq!(env, think, "with no profile value the environment applies");
    // the prompt opened `<think>`: what the model writes is reasoning, not content
    assert!(message["reasoning_content"].is_string(), "{message}");
    assert_eq!(message["content"], "", "{message}");

    let plain = Server::start_env(
        &["--config", file.to_str().expect("utf-8"), "--port", "0"],
        &[("MLX_VLM_ENABLE_THINKING", "false")],
    );
    let (compat, _) = prompt_tokens(&plain.addr, json!({"profile": "plain"}));
    assert_eq!(compat, nothink, "MLX_VLM_ENABLE_THINKING is honoured");
    drop(plain);
    let bare = Server::start_env(
        &["--config", file.to_str().expect("utf-8"), "--port", "0"],
        &[],
    );
    let (default, _) = prompt_tokens(&bare.addr, json!({"profile": "plain"}));
    assert!(
        default < nothink,
        "unset everywhere: the template's default ({default})"
    );
}
