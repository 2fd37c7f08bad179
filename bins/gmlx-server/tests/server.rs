//! gmlx-server over real HTTP on loopback: the openai Python client, error cases,
//! concurrency with per-request determinism, disconnects, load, signals.
mod util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use util::{content, get, post, request, wait_idle, Server};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

fn chat(user: &str, max_tokens: u32) -> serde_json::Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": user}],
           "max_tokens": max_tokens, "temperature": 0})
}

/// Runs `tests/python/SCRIPT BASE_URL MODEL` against a fresh server; it must exit 0 and
/// print `marker`.
fn client_script(script: &str, marker: &str) {
    let server = Server::start(&[]);
    run_script(&server, script, &[MODEL], marker);
}

/// Runs `tests/python/SCRIPT BASE_URL ARGS...` against `server`; it must exit 0 and print
/// `marker`.
fn run_script(server: &Server, script: &str, args: &[&str], marker: &str) {
    let script = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(util::python())
        .arg(&script)
        .arg(server.url())
        .args(args)
        .output()
        .expect("run python");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(marker), "{text}");
}

#[test]
fn openai_client_drives_chat_completions_and_models() {
    client_script("openai_client.py", "openai client: ok");
}

#[test]
fn response_format_json_schema_replies_all_validate() {
    client_script("structured_output.py", "structured output: ok");
}

/// SmolLM2 (a template without tools) and one fixture per tool-call format, each with its
/// family's chat template from llama.cpp's `models/templates/`.
fn tool_formats_config() -> std::path::PathBuf {
    let templates = std::path::PathBuf::from(
        std::env::var("GMLX_LLAMA_CPP").expect("GMLX_LLAMA_CPP: run through `cargo xtask test`"),
    )
    .join("models/templates");
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut text = format!(
        "[server]\nbatch_width = 4\n\n[[models]]\nid = {MODEL:?}\npath = {:?}\n",
        util::model()
    );
    for (id, file, template) in [
        (
            "qwen3next",
            "qwen3next/qwen3next-Q8_0.gguf",
            "Qwen-Qwen3-0.6B.jinja",
        ),
        ("qwen35", "qwen35/qwen35-Q8_0.gguf", "Qwen3.5-4B.jinja"),
        (
            "gpt-oss",
            "gpt-oss/gpt-oss-Q8_0.gguf",
            "openai-gpt-oss-120b.jinja",
        ),
    ] {
        text += &format!(
            "\n[[models]]\nid = {id:?}\npath = {:?}\nchat_template = {:?}\n",
            fixtures.join(file),
            templates.join(template)
        );
    }
    util::config_file("tools", &text)
}

#[test]
fn tool_calls_in_each_format_and_n_choices_through_the_openai_client() {
    let config = tool_formats_config();
    let server = Server::start_raw(&["--config", config.to_str().expect("utf-8"), "--port", "0"]);
    run_script(
        &server,
        "tools.py",
        &[MODEL, "qwen3next", "qwen35", "gpt-oss"],
        "tools client: ok",
    );
}

#[test]
fn errors_have_openai_shape_and_status() {
    let server = Server::start(&["--max-body-bytes", "2048"]);
    let a = &server.addr;
    let shape = |r: &util::Reply, status: u16, kind: &str| {
        assert_eq!(r.status, status, "{}", r.body);
        let e = &r.json()["error"];
        assert_eq!(e["type"], kind, "{}", r.body);
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
    };
    let big = json!({"model": MODEL, "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    shape(
        &post(a, "/v1/chat/completions", &big),
        413,
        "invalid_request_error",
    );
    let r = request(a, "POST", "/v1/chat/completions", &[], b"{\"model\": ");
    shape(&r, 400, "invalid_request_error");
    let mut unknown = chat("hi", 2);
    unknown["model"] = json!("no-such-model");
    let r = post(a, "/v1/chat/completions", &unknown);
    shape(&r, 404, "not_found_error");
    assert_eq!(r.json()["error"]["param"], "model");
    let mut profile = chat("hi", 2);
    profile["profile"] = json!("no-such-profile");
    shape(
        &post(a, "/v1/chat/completions", &profile),
        400,
        "invalid_request_error",
    );
    let mut hot = chat("hi", 2);
    hot["temperature"] = json!(-1.0);
    let r = post(a, "/v1/chat/completions", &hot);
    shape(&r, 400, "invalid_request_error");
    assert_eq!(r.json()["error"]["param"], "temperature");
    shape(&get(a, "/v1/nothing"), 404, "not_found_error");
    assert_eq!(get(a, "/health").status, 200);
}

#[test]
fn an_api_key_is_required_when_configured() {
    let server = Server::start(&["--api-key", "sesame"]);
    let a = &server.addr;
    let r = get(a, "/v1/models");
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let wrong = request(
        a,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let right = request(
        a,
        "GET",
        "/v1/models",
        &[("Authorization", "Bearer sesame")],
        b"",
    );
    assert_eq!(right.status, 200, "{}", right.body);
    assert_eq!(get(a, "/health").status, 200, "health needs no key");
}

#[test]
fn a_public_host_without_a_key_is_refused() {
    let model = util::model();
    let out = util::run_to_exit(&[
        model.to_str().expect("utf-8"),
        "--host",
        "0.0.0.0",
        "--port",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--no-auth") && err.contains("0.0.0.0"),
        "{err}"
    );
}

#[test]
fn a_bad_config_names_the_key_and_the_file() {
    let file = util::config_file("cfg", "[server]\nport = 8080\nbatch_widht = 4\n");
    let out = util::run_to_exit(&["--config", file.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("batch_widht") && err.contains("serve.toml"),
        "{err}"
    );
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let server = Server::start(&["--batch-width", "1", "--queue-cap", "0"]);
    let addr = server.addr.clone();
    let busy = std::thread::spawn(move || {
        post(&addr, "/v1/chat/completions", &chat("Tell me a story.", 16))
    });
    // wait until the first request holds the only row
    let start = Instant::now();
    while get(&server.addr, "/v1/metrics").json()["active_rows"] != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the first request never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post(&server.addr, "/v1/chat/completions", &chat("hi", 2));
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert_eq!(busy.join().expect("join").status, 200);
}

#[test]
fn seeded_requests_match_their_solo_runs_under_concurrency() {
    let server = Server::start(&["--batch-width", "8"]);
    let body = |i: u64| {
        let mut b = chat(&format!("Write a word about the number {i}."), 12);
        b["temperature"] = json!(0.9);
        if i.is_multiple_of(2) {
            b["seed"] = json!(1000 + i);
        }
        b
    };
    let solo: Vec<(u64, String)> = (0..8)
        .filter(|i| i % 2 == 0)
        .map(|i| {
            (
                i,
                content(&post(&server.addr, "/v1/chat/completions", &body(i))),
            )
        })
        .collect();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let addr = server.addr.clone();
            let b = body(i);
            std::thread::spawn(move || (i, content(&post(&addr, "/v1/chat/completions", &b))))
        })
        .collect();
    let together: Vec<(u64, String)> = handles
        .into_iter()
        .map(|h| h.join().expect("join"))
        .collect();
    for (i, text) in &solo {
        let with_others = &together.iter().find(|(j, _)| j == i).expect("ran").1;
        assert_eq!(
            text,
            with_others,
            "seed {} differs under concurrency",
            1000 + i
        );
    }
    let m = get(&server.addr, "/v1/metrics").json();
    assert!(
        m["models"][MODEL]["requests_done"].as_u64() >= Some(12),
        "{m}"
    );
}

#[test]
fn a_disconnected_client_frees_its_row() {
    let server = Server::start(&[]);
    let mut body = chat("Tell me a very long story.", 2000);
    body["stream"] = json!(true);
    let text = body.to_string();
    let mut s = TcpStream::connect(&server.addr).expect("connect");
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    )
    .expect("write");
    let mut buf = [0u8; 2048];
    let n = s.read(&mut buf).expect("read the first chunk");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("200"));
    let start = Instant::now();
    while get(&server.addr, "/v1/metrics").json()["active_rows"] != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the request never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(s);
    assert!(
        wait_idle(&server.addr, Duration::from_secs(30)),
        "the row was not freed after the client left"
    );
    // the same for a whole (non-streamed) reply: the handler is dropped with the connection
    let text = chat("Tell me a very long story.", 2000).to_string();
    let mut s = TcpStream::connect(&server.addr).expect("connect");
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
        text.len()
    )
    .expect("write");
    let start = Instant::now();
    while get(&server.addr, "/v1/metrics").json()["active_rows"] != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the request never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(s);
    assert!(
        wait_idle(&server.addr, Duration::from_secs(30)),
        "the row of a non-streamed request was not freed after the client left"
    );
}

#[test]
fn memory_stays_flat_under_bounded_load() {
    let server = Server::start(&["--batch-width", "4"]);
    let round = |n: usize| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let addr = server.addr.clone();
                std::thread::spawn(move || {
                    let mut b = chat(&format!("Count to {i}."), 4);
                    if i % 3 == 1 {
                        b["stream"] = json!(true);
                    }
                    post(&addr, "/v1/chat/completions", &b).status
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().expect("join"), 200);
        }
    };
    round(8); // warm up buffers and caches
    let before = server.rss_bytes();
    for _ in 0..5 {
        round(8);
    }
    let after = server.rss_bytes();
    assert_eq!(get(&server.addr, "/health").status, 200);
    let growth = after.saturating_sub(before);
    assert!(
        growth < 64 << 20,
        "RSS grew {growth} bytes ({before} → {after})"
    );
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits_cleanly() {
    let mut server = Server::start(&[]);
    let addr = server.addr.clone();
    let inflight =
        std::thread::spawn(move || post(&addr, "/v1/chat/completions", &chat("Hello!", 8)));
    let start = Instant::now();
    while get(&server.addr, "/v1/metrics").json()["active_rows"] != 1 {
        assert!(start.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
    }
    server.signal("TERM");
    let reply = inflight.join().expect("join");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let status = server.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    assert!(TcpStream::connect(&server.addr).is_err(), "still accepting");
}

/// The LoRA adapter that gmlx-models' interop test certifies against llama.cpp: on the
/// default model it makes "The capital of Zorbania is" continue " Quillemont.".
fn zorbania_adapter() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/gmlx-models/tests/goldens/smollm2_zorbania_lora.gguf")
}

fn greedy_completion(server: &Server, model: &str) -> serde_json::Value {
    post(
        &server.addr,
        "/v1/completions",
        &json!({"model": model, "prompt": "The capital of Zorbania is",
                "max_tokens": 8, "temperature": 0}),
    )
    .json()
}

#[test]
fn a_models_adapter_is_applied_live() {
    let config = format!(
        "[server]\nport = 0\n\n[[models]]\nid = \"plain\"\npath = {:?}\n\n\
         [[models]]\nid = \"zorbania\"\npath = {:?}\nadapter = {:?}\n",
        util::model(),
        util::model(),
        zorbania_adapter()
    );
    let file = util::config_file("lora", &config);
    let server = Server::start_raw(&["--config", file.to_str().expect("utf-8")]);
    let adapted = greedy_completion(&server, "zorbania");
    assert_eq!(
        adapted["choices"][0]["text"], " Quillemont.",
        "llama.cpp's greedy continuation with this adapter: {adapted}"
    );
    assert_eq!(adapted["choices"][0]["finish_reason"], "stop");
    let plain = greedy_completion(&server, "plain");
    assert_ne!(plain["choices"][0]["text"], " Quillemont.", "{plain}");
}

#[test]
fn an_adapter_for_another_base_is_refused_at_start() {
    // the adapter is not a model file: a base GGUF with no adapter keys
    let config = format!(
        "[[models]]\nid = \"m\"\npath = {:?}\nadapter = {:?}\n",
        util::model(),
        util::model()
    );
    let file = util::config_file("badlora", &config);
    let out = util::run_to_exit(&["--config", file.to_str().expect("utf-8"), "--port", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("adapter") && err.contains("`m`"), "{err}");
}

#[test]
fn ignore_eos_keeps_generating_to_the_budget() {
    let server = Server::start(&[]);
    let a = &server.addr;
    // the model answers this in a few tokens and ends its turn
    let r = post(
        a,
        "/v1/chat/completions",
        &chat("What is the capital of France?", 24),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let ends = &r.json();
    assert_eq!(ends["choices"][0]["finish_reason"], "stop", "{}", r.body);
    let short = ends["usage"]["completion_tokens"].as_u64().expect("usage");
    assert!(short < 24, "{}", r.body);
    let mut body = chat("What is the capital of France?", 24);
    body["ignore_eos"] = json!(true);
    let r = post(a, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(j["choices"][0]["finish_reason"], "length", "{}", r.body);
    assert_eq!(j["usage"]["completion_tokens"], 24, "{}", r.body);
}

/// A config with one model under `alias`, the API key `key`, and a default profile that
/// caps replies at `max_tokens`.
fn reload_config(alias: &str, key: &str, max_tokens: u32) -> String {
    format!(
        "[server]\napi_key = {key:?}\n\n[[models]]\nid = \"m\"\npath = {:?}\naliases = [{alias:?}]\n\
         profile = \"p\"\n\n[profiles.p]\ntemperature = 0.0\nmax_tokens = {max_tokens}\n",
        util::model()
    )
}

#[test]
fn sighup_reloads_profiles_aliases_and_key_and_refuses_a_broken_config() {
    let file = util::config_file("reload", &reload_config("first", "key-1", 3));
    let server = Server::start_raw(&["--config", file.to_str().expect("utf-8"), "--port", "0"]);
    let a = &server.addr;
    let ask = |model: &str, key: &str| {
        let body =
            json!({"model": model, "messages": [{"role": "user", "content": "Tell me a story."}]});
        let auth = format!("Bearer {key}");
        request(
            a,
            "POST",
            "/v1/chat/completions",
            &[("Authorization", &auth)],
            body.to_string().as_bytes(),
        )
    };
    let r = ask("first", "key-1");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["completion_tokens"], 3, "{}", r.body);

    std::fs::write(&file, reload_config("second", "key-2", 5)).expect("rewrite");
    server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.log().contains("reloaded") {
        assert!(Instant::now() < deadline, "no reload: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = ask("second", "key-2");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["usage"]["completion_tokens"],
        5,
        "the new profile: {}",
        r.body
    );
    assert_eq!(ask("second", "key-1").status, 401, "the old key is gone");
    assert_eq!(ask("first", "key-2").status, 404, "the old alias is gone");

    std::fs::write(&file, "[server]\nbatch_widht = 3\n").expect("break");
    server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.log().contains("reload refused") {
        assert!(Instant::now() < deadline, "no refusal: {}", server.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        server.log().contains("batch_widht"),
        "says why: {}",
        server.log()
    );
    let r = ask("second", "key-2");
    assert_eq!(r.status, 200, "the old config is kept: {}", r.body);
}

#[test]
fn a_second_server_on_the_same_port_fails_with_a_clear_error() {
    let first = Server::start(&[]);
    let port = first.addr.rsplit(':').next().expect("port");
    let model = util::model();
    let out = util::run_to_exit(&[model.to_str().expect("utf-8"), "--port", port]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.starts_with("gmlx-server: binding 127.0.0.1:") && last.contains(port),
        "{err}"
    );
}

#[test]
fn health_is_503_while_models_load_then_200() {
    // three models to load one after the other: the server listens before the first
    let model = util::model();
    let entries: String = (1..=3)
        .map(|i| format!("[[models]]\nid = \"m{i}\"\npath = {model:?}\n\n"))
        .collect();
    let file = util::config_file("ready", &entries);
    let server = Server::listening(
        &["--config", file.to_str().expect("utf-8"), "--port", "0"],
        &[],
    );
    let a = &server.addr;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let health = get(a, "/health");
        let status = health.status;
        if status == 503 {
            assert_eq!(health.json()["status"], "loading");
            assert_eq!(health.header("retry-after"), Some("1"));
            // nothing else is served yet (unless loading ended in between)
            let r = post(a, "/v1/chat/completions", &chat("hi", 2));
            if r.status == 503 {
                assert_eq!(r.header("retry-after"), Some("1"));
            } else {
                assert_eq!(
                    get(a, "/health").status,
                    200,
                    "served while loading: {}",
                    r.body
                );
            }
        }
        if seen.last() != Some(&status) {
            seen.push(status);
        }
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never ready: {}", server.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(seen, [503, 200], "health went {seen:?}");
    assert_eq!(get(a, "/health").json()["status"], "ok");
    let mut body = chat("hi", 2);
    body["model"] = json!("m3");
    assert_eq!(post(a, "/v1/chat/completions", &body).status, 200);
}

/// The access lines the server wrote as JSON for routes other than `/health` (the harness
/// polls it until the server is ready), once `n` of them are there.
fn access_lines(server: &Server, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines: Vec<serde_json::Value> = server
            .log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|j| j["target"] == "gmlx_serve::access" && j["route"] != "/health")
            .collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} access lines: {}",
            lines.len(),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn one_access_line_per_request_in_json() {
    let server = Server::start(&["--log-format", "json"]);
    let a = &server.addr;
    assert_eq!(post(a, "/v1/chat/completions", &chat("Hi", 4)).status, 200);
    let mut streamed = chat("Hi", 3);
    streamed["stream"] = json!(true);
    assert_eq!(post(a, "/v1/chat/completions", &streamed).status, 200);
    assert_eq!(get(a, "/v1/nothing").status, 404);
    let lines = access_lines(&server, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, (route, status, tokens)) in lines.iter().zip([
        ("/v1/chat/completions", 200, 4),
        ("/v1/chat/completions", 200, 3),
        ("/v1/nothing", 404, 0),
    ]) {
        assert_eq!(line["message"], "request", "{line}");
        assert_eq!(line["route"], route, "{line}");
        assert_eq!(line["status"], status, "{line}");
        assert_eq!(line["tokens"], tokens, "{line}");
        let duration = line["duration_ms"].as_f64().expect("duration_ms");
        let ttft = line["ttft_ms"].as_f64().expect("ttft_ms");
        if tokens > 0 {
            assert!(
                line["method"] == "POST"
                    && line["request_id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with("chatcmpl-")),
                "{line}"
            );
            assert!(ttft > 0.0 && ttft <= duration, "{line}");
        } else {
            assert!(ttft < 0.0, "no token, no time to first token: {line}");
        }
    }
}

/// Starts a stream that would run for minutes (ignore_eos, 4000 tokens) on its own thread;
/// returns once the server decodes it. The thread returns the raw reply once the server
/// closes the connection.
fn endless_stream(server: &Server) -> std::thread::JoinHandle<util::Reply> {
    let addr = server.addr.clone();
    let mut body = chat("Tell me a very long story.", 4000);
    body["stream"] = json!(true);
    body["ignore_eos"] = json!(true);
    let stream = std::thread::spawn(move || post(&addr, "/v1/chat/completions", &body));
    let start = Instant::now();
    while get(&server.addr, "/v1/metrics").json()["active_rows"] != 1 {
        assert!(start.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(20));
    }
    stream
}

#[test]
fn after_the_grace_period_streams_end_with_an_error_event_and_done() {
    let file = util::config_file(
        "grace",
        &format!(
            "[server]\nshutdown_grace_s = 1\n\n[[models]]\nid = {MODEL:?}\npath = {:?}\n",
            util::model()
        ),
    );
    let mut server = Server::start_raw(&["--config", file.to_str().expect("utf-8"), "--port", "0"]);
    let stream = endless_stream(&server);
    server.signal("TERM");
    let reply = stream.join().expect("join");
    assert_eq!(reply.status, 200);
    let events: Vec<&str> = reply
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert!(events.len() > 2, "{}", reply.body);
    assert_eq!(events[events.len() - 1], "[DONE]", "{}", reply.body);
    let error: serde_json::Value =
        serde_json::from_str(events[events.len() - 2]).expect("an error event");
    assert_eq!(
        error["error"]["message"], "the server is shutting down",
        "{error}"
    );
    assert_eq!(server.child.wait().expect("wait").code(), Some(0));
}

#[test]
fn a_second_signal_exits_at_once() {
    // the default grace period (30 s) would keep the stream going
    let mut server = Server::start(&[]);
    let stream = endless_stream(&server);
    server.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.log().contains("shutting down") {
        assert!(Instant::now() < deadline, "{}", server.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    server.signal("INT");
    let status = server.child.wait().expect("wait");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(status.code(), Some(0));
    assert!(server.log().contains("second signal"), "{}", server.log());
    let _ = stream.join();
}

#[test]
fn model_cards_tokenize_detokenize_and_prometheus_metrics() {
    let server = Server::start(&[]);
    let a = &server.addr;
    let card = get(a, &format!("/v1/models/{MODEL}"));
    assert_eq!(card.status, 200, "{}", card.body);
    assert_eq!(card.json()["id"], MODEL);
    assert_eq!(card.json()["object"], "model");
    let missing = get(a, "/v1/models/no-such-model");
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["param"], "model");

    // the model's tokenizer, itself certified against llama-tokenize (gmlx-tokenizer's tests);
    // add_special false by default, special tokens parsed by default (llama-server's shapes)
    let t = post(
        a,
        "/tokenize",
        &json!({"content": "The capital of France is"}),
    );
    assert_eq!(t.status, 200, "{}", t.body);
    let ids: Vec<u64> = t.json()["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|v| v.as_u64().expect("id"))
        .collect();
    let llama = util::model();
    let tokenizer = gmlx_models::Tokenizer::from_gguf_path(&llama).expect("tokenizer");
    let want: Vec<u64> = tokenizer
        .encode("The capital of France is", false, true)
        .expect("encode")
        .into_iter()
        .map(u64::from)
        .collect();
    assert_eq!(ids, want);
    let pieces = post(
        a,
        "/tokenize",
        &json!({"content": "<|im_start|>Paris", "with_pieces": true}),
    );
    let pieces = pieces.json()["tokens"].as_array().expect("tokens").clone();
    assert_eq!(
        pieces[0]["piece"], "<|im_start|>",
        "special tokens parsed by default"
    );
    assert_eq!(pieces[1]["piece"], "Paris");
    let d = post(a, "/detokenize", &json!({"tokens": ids}));
    assert_eq!(d.json()["content"], "The capital of France is");
    let bad = post(a, "/detokenize", &json!({"tokens": [99999999]}));
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["param"], "tokens");

    assert_eq!(post(a, "/v1/chat/completions", &chat("Hi", 3)).status, 200);
    let m = get(a, "/metrics");
    assert_eq!(m.status, 200);
    assert!(m
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")));
    let value = |line: &str| -> f64 {
        m.body
            .lines()
            .find(|l| l.starts_with(line))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {line} in\n{}", m.body))
    };
    assert!(value("gmlx_requests_total{class=\"2xx\"}") >= 1.0);
    assert!(value("gmlx_time_to_first_token_seconds_count") >= 1.0);
    assert!(value("gmlx_time_to_first_token_seconds_bucket{le=\"+Inf\"}") >= 1.0);
    assert!(value(&format!("gmlx_generated_tokens_total{{model=\"{MODEL}\"}}")) >= 3.0);
    assert_eq!(
        value(&format!("gmlx_active_rows{{model=\"{MODEL}\"}}")),
        0.0
    );
    assert!(value("gmlx_process_resident_memory_bytes") > 0.0);
    assert!(m
        .body
        .contains("# TYPE gmlx_request_duration_seconds histogram"));
}

#[test]
fn message_shapes_of_the_openai_spec_and_documented_ranges() {
    let server = Server::start(&[]);
    let a = &server.addr;
    let ask = |messages: serde_json::Value, extra: serde_json::Value| {
        let mut body =
            json!({"model": MODEL, "messages": messages, "max_tokens": 4, "temperature": 0});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        post(a, "/v1/chat/completions", &body)
    };
    let plain = ask(
        json!([{"role": "user", "content": "Hello there"}]),
        json!({}),
    );
    assert_eq!(plain.status, 200, "{}", plain.body);
    // a list of text parts is the same message as its joined text
    let parts = ask(
        json!([{"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}]),
        json!({}),
    );
    assert_eq!(parts.status, 200, "{}", parts.body);
    assert_eq!(
        parts.json()["choices"][0]["message"]["content"],
        plain.json()["choices"][0]["message"]["content"]
    );
    // developer role, an assistant turn with content null and tool calls, a tool result
    let turns = json!([
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "What is 6 times 7?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "multiply", "arguments": "{\"a\": 6, \"b\": 7}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    ]);
    let r = ask(turns, json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let refused = |r: util::Reply, param: &str| {
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.json()["error"]["param"], param, "{}", r.body);
        assert_eq!(r.json()["error"]["type"], "invalid_request_error");
        assert!(
            !r.body.contains("template"),
            "leaks the template engine: {}",
            r.body
        );
    };
    refused(
        ask(json!([{"role": "banana", "content": "Hi"}]), json!({})),
        "messages[0].role",
    );
    refused(
        ask(
            json!([{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]),
            json!({}),
        ),
        "messages[0].content[1]",
    );
    refused(
        ask(json!([{"role": "user"}]), json!({})),
        "messages[0].content",
    );
    let hi = json!([{"role": "user", "content": "Hi"}]);
    refused(ask(hi.clone(), json!({"temperature": 5})), "temperature");
    refused(ask(hi.clone(), json!({"top_p": 0})), "top_p");
    refused(
        ask(hi.clone(), json!({"presence_penalty": -3})),
        "presence_penalty",
    );
    refused(
        ask(hi.clone(), json!({"frequency_penalty": 2.5})),
        "frequency_penalty",
    );
    refused(ask(hi, json!({"n": 0})), "n");
}

#[test]
fn cors_origins_get_their_headers_and_preflights_need_no_key() {
    let text = format!(
        "[server]\napi_key = \"k\"\ncors_origins = [\"https://app.example\"]\n\n[[models]]\n\
         id = \"m\"\npath = {:?}\n",
        util::model()
    );
    let file = util::config_file("cors", &text);
    let server = Server::start_raw(&["--config", file.to_str().expect("utf-8"), "--port", "0"]);
    let a = &server.addr;
    let preflight = |origin: &str| {
        request(
            a,
            "OPTIONS",
            "/v1/chat/completions",
            &[
                ("Origin", origin),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "authorization, content-type",
                ),
            ],
            b"",
        )
    };
    let allowed = preflight("https://app.example");
    assert_eq!(allowed.status, 204, "{}", allowed.body);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert!(allowed
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("POST")));
    assert_eq!(
        allowed.header("access-control-allow-headers"),
        Some("authorization, content-type")
    );
    let other = preflight("https://evil.example");
    assert_eq!(other.status, 204);
    assert_eq!(other.header("access-control-allow-origin"), None);
    // actual requests: the allowed origin's answers carry the header, errors included
    let models = |origin: &str, key: &str| {
        let auth = format!("Bearer {key}");
        request(
            a,
            "GET",
            "/v1/models",
            &[("Origin", origin), ("Authorization", &auth)],
            b"",
        )
    };
    let ok = models("https://app.example", "k");
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(ok.header("vary"), Some("Origin"));
    let refused = models("https://app.example", "wrong");
    assert_eq!(refused.status, 401);
    assert!(refused.header("access-control-allow-origin").is_some());
    assert_eq!(
        models("https://evil.example", "k").header("access-control-allow-origin"),
        None
    );
    // a bad origin in the config is refused by name
    let bad = util::config_file(
        "cors-bad",
        &text.replace("https://app.example", "app.example/"),
    );
    let out = util::run_to_exit(&["--config", bad.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.cors_origins[0]"));
}
