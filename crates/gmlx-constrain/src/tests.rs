use serde_json::json;

use super::matcher;
use super::schema::{Schema, SchemaError};

/// Whether `text` is a prefix the matcher takes, and whether the value may end after it.
fn run(schema: &Schema, text: &str) -> (bool, bool) {
    let mut stack = matcher::start(schema);
    for &b in text.as_bytes() {
        if !matcher::feed(schema, &mut stack, b) {
            return (false, false);
        }
    }
    (true, matcher::can_finish(schema, &stack))
}

fn complete(schema: &Schema, text: &str) -> bool {
    run(schema, text) == (true, true)
}

fn person() -> Schema {
    Schema::compile(&json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "age": {"type": "integer"},
            "pet": {"enum": ["cat", "dog", 10, 1]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false
    }))
    .expect("compiles")
}

#[test]
fn a_schema_takes_its_values_and_refuses_others() {
    let s = person();
    assert!(complete(&s, r#"{"name": "Ann", "age": 31, "tags": ["a"]}"#));
    assert!(complete(
        &s,
        "{\n  \"name\": \"Bo\",\n  \"age\": -2,\n  \"pet\": 10,\n  \"tags\": [\"x\", \"y\"],\n  \"note\": null\n}"
    ));
    assert!(complete(
        &s,
        r#"{"name":"Bo","age":0,"pet":1,"tags":["x"],"note":"hi"}"#
    ));
    // a required property missing, out of order, an extra key, a type mismatch
    assert!(!run(&s, r#"{"name": "Ann", "tags""#).0);
    assert!(!run(&s, r#"{"age""#).0);
    assert!(!run(&s, r#"{"name": "Ann", "age": 3, "x""#).0);
    assert!(!run(&s, r#"{"name": 3"#).0);
    assert!(!run(&s, r#"{"name": "Ann", "age": 3.5"#).0);
    assert!(!run(&s, r#"{"name": "Ann", "age": 03"#).0);
    // maxLength counts characters; minItems/maxItems; enum values only
    assert!(run(&s, r#"{"name": "héllo""#).0);
    assert!(!run(&s, r#"{"name": "abcdef"#).0);
    assert!(!run(&s, r#"{"name": "A", "age": 1, "tags": []"#).0);
    assert!(!run(&s, r#"{"name": "A", "age": 1, "tags": ["a", "b", "#).0);
    assert!(!run(&s, r#"{"name": "A", "age": 1, "pet": "cow"#).0);
    // incomplete is not complete; nothing after the value
    assert_eq!(run(&s, r#"{"name": "A", "age": 1"#), (true, false));
    assert!(!run(&s, r#"{"name": "A", "age": 1, "tags": ["a"]} "#).0);
}

#[test]
fn json_object_takes_any_object_and_only_objects() {
    let s = Schema::any_object();
    assert!(complete(&s, r#"{}"#));
    assert!(complete(
        &s,
        r#"{"a": [1, 2.5e-3, true, null, {"b": "\u00e9\n"}], "c": -0.0}"#
    ));
    assert!(!run(&s, "[").0);
    assert!(!run(&s, r#"{"a": tru}"#).0);
    assert!(!run(&s, r#"{"a": 1,}"#).0);
    assert!(
        !run(&s, "{\"a\": \"\u{1}\"").0,
        "control characters must be escaped"
    );
    assert!(!run(&s, r#"{"a": "\x"}"#).0);
    assert!(!run(&s, r#"{"a": 01}"#).0);
    // whitespace is bounded: one newline and a few spaces per gap
    assert!(!run(&s, &format!("{{{}}}", " ".repeat(20))).0);
    assert!(!run(&s, "{\n\n}").0);
    assert!(complete(&s, "{\n    \"a\":\n 1\n}"));
}

#[test]
fn top_level_numbers_and_literals_end_where_they_may() {
    let n = Schema::compile(&json!({"type": "number"})).expect("compiles");
    assert_eq!(run(&n, "12"), (true, true));
    assert_eq!(run(&n, "12."), (true, false));
    assert_eq!(run(&n, "-"), (true, false));
    assert!(complete(&n, "1.5E+10"));
    let e = Schema::compile(&json!({"enum": [1, 10, "x"]})).expect("compiles");
    assert_eq!(run(&e, "1"), (true, true));
    assert_eq!(run(&e, "10"), (true, true));
    assert!(!run(&e, "100").0);
    assert_eq!(run(&e, "\"x\""), (true, true));
}

#[test]
fn refs_nest_and_unsupported_keywords_are_named() {
    let tree = Schema::compile(&json!({
        "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}
        }, "required": ["v"]}},
        "$ref": "#/$defs/node"
    }))
    .expect("compiles");
    assert!(complete(
        &tree,
        r#"{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}"#
    ));
    for (schema, keyword) in [
        (json!({"type": "string", "pattern": "a+"}), "pattern"),
        (json!({"type": "integer", "minimum": 3}), "minimum"),
        (json!({"type": "string", "format": "date"}), "format"),
        (
            json!({"anyOf": [{"type": "string"}, {"enum": ["a"]}]}),
            "anyOf",
        ),
    ] {
        match Schema::compile(&schema) {
            Err(SchemaError::Unsupported { keyword: k, .. }) => assert_eq!(k, keyword),
            other => panic!("{schema}: {other:?}"),
        }
    }
    assert!(matches!(
        Schema::compile(&json!({"type": "object", "properties": {}, "required": ["x"]})),
        Err(SchemaError::Invalid { .. })
    ));
}

/// A forced call in two formats' shape: `{"name": "N", "arguments": ARGS}` with the
/// arguments' schema chosen by the name, and a control token before a JSON value.
fn tool_grammar() -> Schema {
    use super::schema::Grammar;
    let mut g = Grammar::new();
    let weather = g
        .json(
            &json!({"type": "object", "properties": {"city": {"type": "string"}},
                      "required": ["city"], "additionalProperties": false}),
        )
        .expect("schema");
    let close = g.text("}");
    let weather = g.seq(vec![weather, close]);
    let time = g
        .json(&json!({"$defs": {"zone": {"enum": ["utc", "cet"]}},
                      "type": "object", "properties": {"zone": {"$ref": "#/$defs/zone"}},
                      "required": ["zone"]}))
        .expect("schema");
    let close = g.text("}");
    let time = g.seq(vec![time, close]);
    let names = g
        .choice(vec![
            (r#""get_weather", "arguments": "#.to_owned(), Some(weather)),
            (r#""get_time", "arguments": "#.to_owned(), Some(time)),
        ])
        .expect("prefix-free");
    let open = g.text(r#"{"name": "#);
    let marker = g.token(7);
    let root = g.seq(vec![open, names, marker]);
    g.build(root).expect("builds")
}

#[test]
fn a_grammar_picks_the_arguments_schema_by_the_name_and_waits_for_its_token() {
    let s = tool_grammar();
    let call = r#"{"name": "get_time", "arguments": {"zone": "cet"}}"#;
    let (took, done) = run(&s, call);
    assert!(took && !done, "the marker token is still due");
    let mut stack = matcher::start(&s);
    for &b in call.as_bytes() {
        assert!(matcher::feed(&s, &mut stack, b));
    }
    assert_eq!(matcher::pending_token(&s, &stack), Some(7));
    assert!(matcher::take_token(&s, &stack, 8).is_none());
    let after = matcher::take_token(&s, &stack, 7).expect("token 7 is due");
    assert!(matcher::can_finish(&s, &after));
    assert!(!matcher::feed(&s, &mut after.clone(), b' '));
    // the other name's arguments, bytes that are not the fixed text, whitespace it lacks
    assert!(!run(&s, r#"{"name": "get_time", "arguments": {"city""#).0);
    assert!(run(&s, r#"{"name": "get_weather", "arguments": {"city""#).0);
    assert!(!run(&s, r#"{"name":"get_time""#).0);
    assert!(!run(&s, r#"{"name": "get_date""#).0);
    assert!(matcher::pending_token(&s, &matcher::start(&s)).is_none());
}

#[test]
fn a_choice_refuses_a_text_that_begins_another() {
    let mut g = super::schema::Grammar::new();
    let err = g
        .choice(vec![("ab".to_owned(), None), ("a".to_owned(), None)])
        .expect_err("a begins ab");
    assert!(err.to_string().contains("`a` begins `ab`"), "{err}");
}
