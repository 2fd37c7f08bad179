//! The HTTP half of `cargo xtask bench serve`: `gmlx-server` (release build) and llama.cpp's
//! `llama-server` (CPU build of the pinned llama.cpp, one slot per stream) on the default
//! model, each sent the same concurrent `/v1/completions` requests (greedy, `ignore_eos`, a
//! fixed number of tokens each) by the same client. Both servers run side by side (an idle one
//! takes no processor time) and are measured alternately at each stream count, `--rounds`
//! times (3; the server measured first alternates between rounds). Prints the median
//! aggregate generated tokens per second of each at every stream count (each round in
//! brackets) and their ratio, and keeps the JSON line as `serve-http.json`.
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench_cpu::median;

struct Options {
    tokens: usize,
    streams: Vec<usize>,
    threads: usize,
    rounds: usize,
}

fn parse(args: &[String]) -> Result<Options> {
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let tokens = value("--tokens").map_or(Ok(64), |v| v.parse().context("--tokens N"))?;
    let streams = value("--streams").map_or("1,2,4,8", String::as_str);
    let streams = streams
        .split(',')
        .map(|s| s.trim().parse::<usize>().context("--streams 1,2,4,8"))
        .collect::<Result<Vec<_>>>()?;
    if streams.is_empty() || streams.contains(&0) || tokens == 0 {
        bail!("--tokens and every --streams count must be at least 1");
    }
    let threads = value("--threads").map_or(Ok(2), |v| v.parse().context("--threads N"))?;
    let rounds = value("--rounds").map_or(Ok(3), |v| v.parse().context("--rounds N"))?;
    if rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    Ok(Options {
        tokens,
        streams,
        threads,
        rounds,
    })
}

/// A server child process, killed when dropped.
struct Server {
    name: &'static str,
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One HTTP/1.1 request with `Connection: close`; the status code and the body.
fn request(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(600)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").context("an HTTP response")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("an HTTP status")?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    Ok((
        status,
        if chunked {
            unchunk(rest)?
        } else {
            rest.to_owned()
        },
    ))
}

/// The body of a chunked transfer.
fn unchunk(mut rest: &str) -> Result<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").context("a chunk size")?;
        let size = usize::from_str_radix(size.trim(), 16).context("a chunk size")?;
        if size == 0 {
            return Ok(body);
        }
        body.push_str(after.get(..size).context("a whole chunk")?);
        rest = after.get(size + 2..).context("a chunk end")?;
    }
}

/// A server that ended before it answered.
#[derive(Debug)]
struct Exited {
    name: &'static str,
    status: std::process::ExitStatus,
}

impl std::fmt::Display for Exited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} exited with {} before it was ready",
            self.name, self.status
        )
    }
}

impl std::error::Error for Exited {}

/// Starts `cmd` on `port` and waits until `/health` answers 200.
fn start(name: &'static str, cmd: &mut Command, port: u16) -> Result<Server> {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("start {name}"))?;
    let mut server = Server { name, child, port };
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        if let Some(status) = server.child.try_wait()? {
            return Err(Exited { name, status }.into());
        }
        if matches!(request(port, "GET", "/health", ""), Ok((200, _))) {
            return Ok(server);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    bail!("{name} was not ready after 300 s")
}

/// Aggregate generated tokens per second of `n` concurrent requests, their prompts marked
/// with `run` (each measurement's prompts are new to both servers: llama-server keeps
/// earlier prompts in its slots, and repeated ones slowed its later rounds by 26-38%).
fn aggregate(server: &Server, model: &str, n: usize, tokens: usize, run: usize) -> Result<f64> {
    let start = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let port = server.port;
            let body = serde_json::json!({
                "model": model,
                "prompt": format!("Story {run}.{i}: once upon a time"),
                "max_tokens": tokens,
                "temperature": 0.0,
                "ignore_eos": true,
            })
            .to_string();
            std::thread::spawn(move || request(port, "POST", "/v1/completions", &body))
        })
        .collect();
    let mut generated = 0;
    for h in handles {
        let (status, body) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))??;
        if status != 200 {
            bail!("{}: status {status}: {body}", server.name);
        }
        let v: serde_json::Value = serde_json::from_str(&body).context("a completion")?;
        generated += v["usage"]["completion_tokens"]
            .as_u64()
            .context("usage.completion_tokens")?;
    }
    Ok(generated as f64 / start.elapsed().as_secs_f64())
}

fn died_of_signal(e: &anyhow::Error) -> bool {
    use std::os::unix::process::ExitStatusExt;
    e.downcast_ref::<Exited>()
        .is_some_and(|x| x.status.signal().is_some())
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let refs = crate::setup::run()?;
    let model = gmlx_cache::default_model::fetch()?;
    let id = model
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the model's file name")?
        .to_owned();
    let llama = crate::bench_gguf::llama_cpp_tool(
        &refs.llama_cpp,
        "llama-server",
        &["-DLLAMA_BUILD_SERVER=ON"],
    )?;
    let gmlx = crate::bench_gguf::release_binary("gmlx-server", "gmlx-server")?;
    let width = o.streams.iter().copied().max().unwrap_or(1);

    let port = free_port()?;
    let ours = start(
        "gmlx-server",
        Command::new(&gmlx)
            .arg(&model)
            .args(["--port", &port.to_string()])
            .args(["--batch-width", &width.to_string()]),
        port,
    )?;

    // each slot holds its prompt and its tokens
    let context = width * (o.tokens + 64);
    let llama_server = |extra: &[&str]| -> Result<Server> {
        let port = free_port()?;
        start(
            "llama-server",
            Command::new(&llama)
                .arg("-m")
                .arg(&model)
                .args(["--port", &port.to_string(), "--host", "127.0.0.1"])
                .args(["-np", &width.to_string(), "-c", &context.to_string()])
                .args(["-t", &o.threads.to_string()])
                .args(extra),
            port,
        )
    };
    let (theirs, repack) = match llama_server(&[]) {
        // as llama-bench (bench_gguf): a processor that advertises AMX a VM does not let
        // programs use kills the native build in its repacking kernels
        Err(e) if died_of_signal(&e) => {
            eprintln!(
                "xtask: {e:#}; again with --no-repack (no extra CPU buffer types, AMX among them)"
            );
            (llama_server(&["--no-repack"])?, false)
        }
        other => (other?, true),
    };

    // one warm-up request each, then the rounds: at each stream count one server, then the
    // other (which goes first alternates from round to round)
    aggregate(&ours, &id, 1, o.tokens, 0)?;
    aggregate(&theirs, &id, 1, o.tokens, 0)?;
    let mut measured = vec![(Vec::new(), Vec::new()); o.streams.len()];
    let mut run = 0;
    for round in 0..o.rounds {
        eprintln!("xtask: round {}/{}", round + 1, o.rounds);
        for (&n, (a, b)) in o.streams.iter().zip(&mut measured) {
            run += 1;
            if round % 2 == 0 {
                a.push(aggregate(&ours, &id, n, o.tokens, run)?);
                b.push(aggregate(&theirs, &id, n, o.tokens, run)?);
            } else {
                b.push(aggregate(&theirs, &id, n, o.tokens, run)?);
                a.push(aggregate(&ours, &id, n, o.tokens, run)?);
            }
        }
    }
    drop((ours, theirs));

    println!(
        "HTTP /v1/completions, {} tokens per stream, {} slots, {} rounds alternating, median \
         aggregate generated tok/s (each round in brackets)",
        o.tokens, width, o.rounds
    );
    println!("| streams | gmlx-server | llama-server | ratio |");
    println!("|---|---|---|---|");
    let rounds = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut rows = Vec::new();
    for (n, (a, b)) in o.streams.iter().zip(&measured) {
        let (ma, mb) = (median(a.clone()), median(b.clone()));
        println!(
            "| {n} | {ma:.1} [{}] | {mb:.1} [{}] | {:.2} |",
            rounds(a),
            rounds(b),
            ma / mb
        );
        rows.push(serde_json::json!({
            "streams": n, "gmlx_server": ma, "llama_server": mb, "ratio": ma / mb,
            "gmlx_server_rounds": a, "llama_server_rounds": b,
        }));
    }
    let json = serde_json::json!({
        "bench": "serve-http", "model": id, "tokens_per_stream": o.tokens,
        "slots": width, "threads": o.threads, "rounds": o.rounds, "rows": rows,
        "llama_server_repack": repack,
    });
    crate::bench::save("serve-http", &json.to_string())
}
