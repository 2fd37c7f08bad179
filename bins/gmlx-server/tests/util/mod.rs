//! Test harness: a gmlx-server child on an ephemeral loopback port, and a tiny HTTP client.
#![allow(dead_code)]
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub addr: String,
    /// What the server printed to stderr after its listening line.
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

pub fn model() -> PathBuf {
    gmlx_models::default_model::fetch().expect("the default model")
}

/// Writes `text` as `serve.toml` in a fresh scratch folder named after `tag` and this
/// process; returns the file.
pub fn config_file(tag: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gmlx-serve-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("serve.toml");
    std::fs::write(&file, text).expect("write config");
    file
}

/// Runs `gmlx-server ARGS` to its exit (for refusals before it serves).
pub fn run_to_exit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gmlx-server"))
        .args(args)
        .output()
        .expect("run gmlx-server")
}

impl Server {
    /// Starts `gmlx-server MODEL --port 0 ARGS` and waits for its listening line.
    pub fn start(args: &[&str]) -> Server {
        let model = model();
        let mut all = vec![model.to_str().expect("utf-8 path"), "--port", "0"];
        all.extend_from_slice(args);
        Self::start_raw(&all)
    }

    pub fn start_raw(args: &[&str]) -> Server {
        Self::start_env(args, &[])
    }

    /// Starts `gmlx-server ARGS` with extra environment variables; returns once its models
    /// are loaded (`/health` is 200).
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let server = Self::listening(args, env);
        // the server listens at once and answers 503 until its models are loaded
        let deadline = Instant::now() + Duration::from_secs(120);
        while get(&server.addr, "/health").status != 200 {
            assert!(
                Instant::now() < deadline,
                "not ready in 120 s:\n{}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// Starts `gmlx-server ARGS` and returns as soon as it listens (its models may still be
    /// loading).
    pub fn listening(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gmlx-server"))
            .args(args)
            .env_remove("GMLX_ENABLE_THINKING")
            .env_remove("MLX_VLM_ENABLE_THINKING")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gmlx-server");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = String::new();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(a) = line.split("listening on http://").nth(1) {
                        // text or JSON lines: the address ends where its characters do
                        let end = a
                            .find(|c: char| !(c.is_ascii_alphanumeric() || ".:[]".contains(c)))
                            .unwrap_or(a.len());
                        break a[..end].to_owned();
                    }
                    seen.push_str(&line);
                    seen.push('\n');
                }
                _ => panic!("gmlx-server exited before listening:\n{seen}"),
            }
        };
        // keep draining stderr so the child never blocks on a full pipe
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(|l| l.ok()) {
                if let Ok(mut log) = sink.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        Server { child, addr, log }
    }

    /// The server's stderr since it started listening.
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Sends `signal` to the server (`kill -SIGNAL PID`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory of the server process, from /proc.
    pub fn rss_bytes(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status, headers (lowercased names), body.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`; reads the whole reply.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(300))).ok();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write");
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse(&raw)
}

fn parse(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub fn post(addr: &str, path: &str, body: &serde_json::Value) -> Reply {
    request(addr, "POST", path, &[], body.to_string().as_bytes())
}

pub fn get(addr: &str, path: &str) -> Reply {
    request(addr, "GET", path, &[], b"")
}

/// The chat reply's text.
pub fn content(reply: &Reply) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_owned()
}

/// Waits until `/v1/metrics` says `active_rows` is 0 and nothing waits.
pub fn wait_idle(addr: &str, within: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        let m = get(addr, "/v1/metrics").json();
        if m["active_rows"] == 0 && m["queue_depth"] == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The Python with the `openai` package: `$GMLX_PYTHON` or the gmlx cache's pyenv.
pub fn python() -> PathBuf {
    let python = std::env::var_os("GMLX_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/gmlx/pyenv/bin/python")
        });
    let ok = Command::new(&python)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import `openai`: run `cargo xtask setup` (or pip install the pinned openai \
         from xtask/python-requirements.txt), or point GMLX_PYTHON at a Python that has it",
        python.display()
    );
    python
}
