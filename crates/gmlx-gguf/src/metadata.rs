//! The metadata map and its typed accessors.
//!
//! Keys are given as a [`MetaKey`]: a full key (`"llama.block_count"`), a template with the
//! architecture placeholder (`"{arch}.block_count"`, resolved from `general.architecture`), or a
//! [`crate::names::Kv`] row. Errors name the resolved key and the type found.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::value::{Array, Value};

/// Something that names a metadata key, possibly with an `{arch}` placeholder.
pub trait MetaKey {
    /// The key's template; `{arch}` stands for `general.architecture`.
    fn template(&self) -> Cow<'_, str>;
}

impl MetaKey for str {
    fn template(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl MetaKey for &str {
    fn template(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

impl MetaKey for String {
    fn template(&self) -> Cow<'_, str> {
        Cow::Borrowed(self)
    }
}

/// All metadata entries of a file, in file order, with lookup by key.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

macro_rules! int_getter {
    ($get:ident, $opt:ident, $t:ty) => {
        #[doc = concat!("The value as `", stringify!($t), "`: any integer type whose value fits.")]
        pub fn $get<K: MetaKey + ?Sized>(&self, key: &K) -> Result<$t> {
            let (k, v) = self.require(key)?;
            int_as::<$t>(&k, v)
        }

        #[doc = concat!("Like [`Metadata::", stringify!($get), "`], `None` when the key is absent.")]
        pub fn $opt<K: MetaKey + ?Sized>(&self, key: &K) -> Result<Option<$t>> {
            let k = self.resolve(key)?;
            match self.get(&k) {
                None => Ok(None),
                Some(v) => int_as::<$t>(&k, v).map(Some),
            }
        }
    };
}

macro_rules! int_array_getter {
    ($get:ident, $t:ty) => {
        #[doc = concat!("An integer array as `Vec<", stringify!($t), ">` (any integer element type whose values fit).")]
        pub fn $get<K: MetaKey + ?Sized>(&self, key: &K) -> Result<Vec<$t>> {
            let (k, v) = self.require(key)?;
            let Value::Array(a) = v else {
                return Err(wrong(&k, concat!("array of ", stringify!($t)), v));
            };
            (0..a.len())
                .map(|i| match a.get(i) {
                    Some(e) => int_as::<$t>(&k, &e).map_err(|err| match err {
                        Error::WrongType { .. } => wrong(&k, concat!("array of ", stringify!($t)), v),
                        other => other,
                    }),
                    None => Err(wrong(&k, concat!("array of ", stringify!($t)), v)),
                })
                .collect()
        }
    };
}

fn wrong(key: &str, expected: &'static str, found: &Value) -> Error {
    Error::WrongType {
        key: key.to_string(),
        expected,
        found: found.type_description(),
    }
}

fn int_as<T: TryFrom<i128>>(key: &str, v: &Value) -> Result<T> {
    let target = std::any::type_name::<T>();
    let Some(i) = v.as_integer() else {
        return Err(wrong(key, short_name(target), v));
    };
    T::try_from(i).map_err(|_| Error::OutOfRange {
        key: key.to_string(),
        value: i.to_string(),
        target: short_name(target),
    })
}

fn short_name(full: &'static str) -> &'static str {
    full.rsplit("::").next().unwrap_or(full)
}

impl Metadata {
    /// Build from entries in file order (keys assumed unique; a later duplicate shadows nothing,
    /// the first wins).
    pub fn new(entries: Vec<(String, Value)>) -> Metadata {
        let mut index = HashMap::with_capacity(entries.len());
        for (i, (k, _)) in entries.iter().enumerate() {
            index.entry(k.clone()).or_insert(i);
        }
        Metadata { entries, index }
    }

    /// Entries in file order.
    pub fn entries(&self) -> &[(String, Value)] {
        &self.entries
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The raw value of a full key (no template resolution).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    /// `general.architecture`, if present and a string.
    pub fn architecture(&self) -> Option<&str> {
        match self.get("general.architecture") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// Resolve a key template into the full key.
    pub fn resolve<K: MetaKey + ?Sized>(&self, key: &K) -> Result<String> {
        let t = key.template();
        if !t.contains("{arch}") {
            return Ok(t.into_owned());
        }
        match self.architecture() {
            Some(arch) => Ok(t.replace("{arch}", arch)),
            None => Err(Error::NoArchitecture {
                key: t.into_owned(),
            }),
        }
    }

    /// The value of a key (template resolved), if present.
    pub fn value<K: MetaKey + ?Sized>(&self, key: &K) -> Result<Option<&Value>> {
        let k = self.resolve(key)?;
        Ok(self.get(&k))
    }

    /// True when the (resolved) key is present.
    pub fn contains<K: MetaKey + ?Sized>(&self, key: &K) -> bool {
        self.resolve(key).is_ok_and(|k| self.index.contains_key(&k))
    }

    fn require<K: MetaKey + ?Sized>(&self, key: &K) -> Result<(String, &Value)> {
        let k = self.resolve(key)?;
        match self.get(&k) {
            Some(v) => Ok((k, v)),
            None => Err(Error::MissingKey { key: k }),
        }
    }

    int_getter!(get_u8, opt_u8, u8);
    int_getter!(get_u16, opt_u16, u16);
    int_getter!(get_u32, opt_u32, u32);
    int_getter!(get_u64, opt_u64, u64);
    int_getter!(get_i32, opt_i32, i32);
    int_getter!(get_i64, opt_i64, i64);
    int_getter!(get_usize, opt_usize, usize);
    int_array_getter!(get_u32_array, u32);
    int_array_getter!(get_i32_array, i32);
    int_array_getter!(get_u64_array, u64);

    /// A float (f32 stored, or f64 stored and converted, or any integer converted exactly).
    pub fn get_f32<K: MetaKey + ?Sized>(&self, key: &K) -> Result<f32> {
        let (k, v) = self.require(key)?;
        float_of(&k, v)
    }

    /// Like [`Metadata::get_f32`], `None` when absent.
    pub fn opt_f32<K: MetaKey + ?Sized>(&self, key: &K) -> Result<Option<f32>> {
        let k = self.resolve(key)?;
        self.get(&k).map(|v| float_of(&k, v)).transpose()
    }

    /// An f64 (f64 or f32 stored).
    pub fn get_f64<K: MetaKey + ?Sized>(&self, key: &K) -> Result<f64> {
        let (k, v) = self.require(key)?;
        match *v {
            Value::F64(x) => Ok(x),
            Value::F32(x) => Ok(x.into()),
            _ => Err(wrong(&k, "f64", v)),
        }
    }

    /// A bool.
    pub fn get_bool<K: MetaKey + ?Sized>(&self, key: &K) -> Result<bool> {
        let (k, v) = self.require(key)?;
        match v {
            Value::Bool(b) => Ok(*b),
            _ => Err(wrong(&k, "bool", v)),
        }
    }

    /// Like [`Metadata::get_bool`], `None` when absent.
    pub fn opt_bool<K: MetaKey + ?Sized>(&self, key: &K) -> Result<Option<bool>> {
        let k = self.resolve(key)?;
        match self.get(&k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong(&k, "bool", v)),
        }
    }

    /// A string.
    pub fn get_str<K: MetaKey + ?Sized>(&self, key: &K) -> Result<&str> {
        let (k, v) = self.require(key)?;
        match v {
            Value::String(s) => Ok(s),
            _ => Err(wrong(&k, "string", v)),
        }
    }

    /// Like [`Metadata::get_str`], `None` when absent.
    pub fn opt_str<K: MetaKey + ?Sized>(&self, key: &K) -> Result<Option<&str>> {
        let k = self.resolve(key)?;
        match self.get(&k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong(&k, "string", v)),
        }
    }

    /// An array of any element type.
    pub fn get_array<K: MetaKey + ?Sized>(&self, key: &K) -> Result<&Array> {
        let (k, v) = self.require(key)?;
        match v {
            Value::Array(a) => Ok(a),
            _ => Err(wrong(&k, "array", v)),
        }
    }

    /// An array of strings.
    pub fn get_str_array<K: MetaKey + ?Sized>(&self, key: &K) -> Result<&[String]> {
        let (k, v) = self.require(key)?;
        match v {
            Value::Array(Array::String(s)) => Ok(s),
            _ => Err(wrong(&k, "array of string", v)),
        }
    }

    /// An array of f32 (f32 elements only).
    pub fn get_f32_array<K: MetaKey + ?Sized>(&self, key: &K) -> Result<&[f32]> {
        let (k, v) = self.require(key)?;
        match v {
            Value::Array(Array::F32(s)) => Ok(s),
            _ => Err(wrong(&k, "array of f32", v)),
        }
    }

    /// A key that holds either one integer (same for every layer) or an array with one integer per
    /// layer; returns `n_layers` values. Used for per-layer hyperparameters such as head counts.
    pub fn get_u32_per_layer<K: MetaKey + ?Sized>(
        &self,
        key: &K,
        n_layers: usize,
    ) -> Result<Vec<u32>> {
        let (k, v) = self.require(key)?;
        match v {
            Value::Array(a) => {
                let vals = self.get_u32_array(&k)?;
                if vals.len() != n_layers {
                    return Err(Error::OutOfRange {
                        key: k,
                        value: format!("an array of {} elements", a.len()),
                        target: "one element per layer",
                    });
                }
                Ok(vals)
            }
            _ => Ok(vec![int_as::<u32>(&k, v)?; n_layers]),
        }
    }
}

fn float_of(key: &str, v: &Value) -> Result<f32> {
    match *v {
        Value::F32(x) => Ok(x),
        Value::F64(x) => Ok(x as f32),
        _ => match v.as_integer() {
            Some(i) if i.unsigned_abs() <= 1 << 24 => Ok(i as f32),
            _ => Err(wrong(key, "f32", v)),
        },
    }
}
