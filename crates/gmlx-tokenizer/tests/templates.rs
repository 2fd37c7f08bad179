//! Every chat template in llama.cpp's `models/templates/` renders the conversations of
//! `tests/data/template_cases.json` exactly as Python jinja2 does with HF's conventions
//! (goldens from `tests/python/make_template_goldens.py`).
#![allow(clippy::unwrap_used)]

mod util;

use gmlx_tokenizer::{ChatRequest, ChatTemplate, Clock, DateTime, Error};
use serde_json::Value;

fn fixed_clock(cases: &Value) -> Clock {
    let t: Vec<u32> = cases["fixed_now"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    Clock::Fixed(DateTime {
        year: t[0] as i32,
        month: t[1],
        day: t[2],
        hour: t[3],
        minute: t[4],
        second: t[5],
    })
}

fn request(case: &Value) -> ChatRequest {
    ChatRequest {
        messages: case["messages"].as_array().unwrap().clone(),
        tools: case.get("tools").and_then(|t| t.as_array().cloned()),
        documents: None,
        add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
        kwargs: case
            .get("kwargs")
            .and_then(|k| k.as_object().cloned())
            .unwrap_or_default(),
    }
}

/// Differences between Python jinja2 and minijinja that no template setting can remove.
/// Each is listed with its cause; the test prints how often it was used.
fn known_divergence(template: &str, case: &str, golden: &Value) -> Option<&'static str> {
    let error = golden
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if error.contains("'NoneType' object is not iterable") {
        // Python raises on `for x in None`; minijinja iterates `none` as empty.
        return Some("iterating none");
    }
    if error.contains("Object of type generator is not JSON serializable") {
        // jinja2's `map` filter returns a generator that json.dumps rejects; minijinja's is a list.
        return Some("map() result serialized");
    }
    if template == "meetkai-functionary-medium-v3.1.jinja" && case.starts_with("tool_call") {
        // `"..."|safe + x|tojson`: jinja2's Markup.__add__ HTML-escapes the JSON; minijinja
        // concatenates plain strings.
        return Some("Markup + str escaping");
    }
    None
}

fn first_difference(a: &str, b: &str) -> String {
    let pos = a
        .char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map(|((i, _), _)| i)
        .unwrap_or(a.len().min(b.len()));
    let start = a[..pos].char_indices().rev().nth(40).map_or(0, |(i, _)| i);
    format!(
        "at byte {pos}:\n  jinja2: {:?}\n  gmlx:   {:?}",
        b.get(start..)
            .unwrap_or("")
            .chars()
            .take(120)
            .collect::<String>(),
        a.get(start..)
            .unwrap_or("")
            .chars()
            .take(120)
            .collect::<String>(),
    )
}

#[test]
fn templates_match_jinja2_goldens() {
    let dir = util::llama_cpp_dir().join("models/templates");
    let cases = util::read_json(&util::data_file("template_cases.json"));
    let goldens = util::read_json(&util::data_file("template_goldens.json"));
    let goldens = goldens["templates"].as_object().unwrap();
    let clock = fixed_clock(&cases);
    let bos = cases["bos_token"].as_str().unwrap();
    let eos = cases["eos_token"].as_str().unwrap();

    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jinja"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no templates in {}", dir.display());

    let mut failures = Vec::new();
    let mut known = Vec::new();
    let (mut rendered, mut errors) = (0, 0);
    for name in &names {
        let Some(golden) = goldens.get(name) else {
            failures.push(format!(
                "{name}: no golden (regenerate template_goldens.json)"
            ));
            continue;
        };
        let source = std::fs::read_to_string(dir.join(name)).unwrap();
        let template = match ChatTemplate::new(name, &source, bos, eos, clock) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: does not compile: {e}"));
                continue;
            }
        };
        for case in cases["cases"].as_array().unwrap() {
            let case_name = case["name"].as_str().unwrap();
            let expected = &golden[case_name];
            let got = template.render(&request(case));
            if let Some(why) = known_divergence(name, case_name, expected) {
                if got.as_ref().ok()
                    != expected
                        .get("ok")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .as_ref()
                {
                    known.push(format!("{name} / {case_name}: {why}"));
                    continue;
                }
            }
            match (expected.get("ok").and_then(Value::as_str), got) {
                (Some(want), Ok(have)) => {
                    if want == have {
                        rendered += 1;
                    } else {
                        failures.push(format!(
                            "{name} / {case_name}: {}",
                            first_difference(&have, want)
                        ));
                    }
                }
                (Some(_), Err(e)) => failures.push(format!(
                    "{name} / {case_name}: jinja2 renders, gmlx fails: {e}"
                )),
                (None, Ok(have)) => failures.push(format!(
                    "{name} / {case_name}: jinja2 fails ({}), gmlx renders {:?}",
                    expected["error"],
                    have.chars().take(200).collect::<String>()
                )),
                (None, Err(e)) => {
                    let want = expected["error"].as_str().unwrap_or_default();
                    // raise_exception messages must match; other failures only need to fail.
                    if let (Some(msg), Error::TemplateException { message }) =
                        (want.strip_prefix("TemplateError: "), &e)
                    {
                        if msg != message {
                            failures.push(format!(
                                "{name} / {case_name}: raised {message:?}, jinja2 raised {msg:?}"
                            ));
                            continue;
                        }
                    }
                    errors += 1;
                }
            }
        }
    }
    eprintln!(
        "{} templates: {rendered} renders identical to jinja2, {errors} failing in both, \
         {} known divergences, {} mismatches",
        names.len(),
        known.len(),
        failures.len()
    );
    for k in &known {
        eprintln!("  known divergence: {k}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
