//! Python's text forms of template values: `str()`, `repr()` and `json.dumps()`.
//!
//! Jinja2 prints values with Python's `str()`, so `{{ none }}` is `None`, a boolean
//! is `True`, and a dict prints as `{'a': 1}`. HF's `tojson` filter is
//! `json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)`.
//! These functions reproduce both over minijinja values.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// Python `str(value)`.
pub(crate) fn py_str(value: &Value) -> Result<String, Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(String::new()),
        ValueKind::String => Ok(value.as_str().unwrap_or_default().to_owned()),
        _ => py_repr(value),
    }
}

/// Python `repr(value)`.
pub(crate) fn py_repr(value: &Value) -> Result<String, Error> {
    let mut out = String::new();
    write_repr(&mut out, value)?;
    Ok(out)
}

fn write_repr(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => out.push_str(&py_number(value)),
        ValueKind::String => repr_str(out, value.as_str().unwrap_or_default()),
        ValueKind::Bytes => out.push_str(&value.to_string()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key)?;
                out.push_str(": ");
                write_repr(out, &value.get_item(&key)?)?;
            }
            out.push('}');
        }
        _ => out.push_str(&value.to_string()),
    }
    Ok(())
}

fn repr_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// A number as Python prints it: integers plainly, floats with `repr(float)`.
fn py_number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()) {
        Ok(f) => py_float(f),
        Err(_) => value.to_string(),
    }
}

/// Python `repr(float)`: the shortest round-trip digits, in exponent form when the
/// decimal exponent is below -4 or at least 16, and always with a `.0` or exponent.
pub(crate) fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // `{:e}` gives the shortest round-trip digits: "d.ddde<exp>".
    let sci = format!("{:e}", f);
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let n = digits.len() as i32;
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        format!("{sign}0.{zeros}{digits}")
    } else if exp + 1 >= n {
        let zeros = "0".repeat((exp + 1 - n) as usize);
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int, frac) = digits.split_at((exp + 1) as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// Options of Python's `json.dumps` that HF's `tojson` passes through.
#[derive(Debug, Clone)]
pub(crate) struct JsonOptions {
    pub ensure_ascii: bool,
    pub indent: Option<String>,
    pub item_sep: String,
    pub key_sep: String,
    pub sort_keys: bool,
}

impl JsonOptions {
    pub(crate) fn new(
        ensure_ascii: bool,
        indent: Option<String>,
        separators: Option<(String, String)>,
        sort_keys: bool,
    ) -> JsonOptions {
        let (item_sep, key_sep) = separators.unwrap_or_else(|| {
            if indent.is_some() {
                (",".into(), ": ".into())
            } else {
                (", ".into(), ": ".into())
            }
        });
        JsonOptions {
            ensure_ascii,
            indent,
            item_sep,
            key_sep,
            sort_keys,
        }
    }
}

/// Python `json.dumps(value, ...)`.
pub(crate) fn json_dumps(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_json(&mut out, value, opts, 0)?;
    Ok(out)
}

fn newline_indent(out: &mut String, opts: &JsonOptions, level: usize) {
    if let Some(ind) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn write_json(
    out: &mut String,
    value: &Value,
    opts: &JsonOptions,
    level: usize,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if value.is_integer() {
                out.push_str(&value.to_string());
            } else {
                let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
                out.push_str(&match f {
                    f if f.is_nan() => "NaN".to_owned(),
                    f if f == f64::INFINITY => "Infinity".to_owned(),
                    f if f == f64::NEG_INFINITY => "-Infinity".to_owned(),
                    f => py_float(f),
                });
            }
        }
        ValueKind::String => json_str(out, value.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline_indent(out, opts, level + 1);
                write_json(out, item, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline_indent(out, opts, level + 1);
                let key_text = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
                    ValueKind::None => "null".to_owned(),
                    ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_owned(),
                    ValueKind::Number => py_number(key),
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!(
                                "keys must be str, int, float, bool or None, not {}",
                                key.kind()
                            ),
                        ))
                    }
                };
                json_str(out, &key_text, opts.ensure_ascii);
                out.push_str(&opts.key_sep);
                write_json(out, &value.get_item(key)?, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push('}');
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {kind} is not JSON serializable"),
            ))
        }
    }
    Ok(())
}

fn json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{:04x}", unit));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        assert_eq!(py_float(22.0), "22.0");
        assert_eq!(py_float(0.1), "0.1");
        assert_eq!(py_float(1e16), "1e+16");
        assert_eq!(py_float(1.5e-5), "1.5e-05");
        assert_eq!(py_float(123456.789), "123456.789");
        assert_eq!(py_float(0.0001), "0.0001");
        assert_eq!(py_float(-2.5), "-2.5");
    }

    #[test]
    fn repr_of_containers() {
        let v = Value::from_serialize(serde_json::json!({"a": [1, true, null], "b": "it's"}));
        assert_eq!(
            py_repr(&v).ok().as_deref(),
            Some("{'a': [1, True, None], 'b': \"it's\"}")
        );
    }

    #[test]
    fn json_dumps_like_python() {
        let v = Value::from_serialize(serde_json::json!({"a": [1, 2.0], "b": {}, "c": "é\n"}));
        let compact = JsonOptions::new(false, None, None, false);
        assert_eq!(
            json_dumps(&v, &compact).ok().as_deref(),
            Some("{\"a\": [1, 2.0], \"b\": {}, \"c\": \"é\\n\"}")
        );
        let indented = JsonOptions::new(false, Some("  ".into()), None, false);
        assert_eq!(
            json_dumps(&v, &indented).ok().as_deref(),
            Some("{\n  \"a\": [\n    1,\n    2.0\n  ],\n  \"b\": {},\n  \"c\": \"é\\n\"\n}")
        );
    }
}
