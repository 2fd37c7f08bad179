//! JSON Schema → the nodes the byte matcher walks. Only what a byte automaton can enforce is
//! accepted; any other keyword is refused by name (`SchemaError::Unsupported`).
use std::collections::BTreeMap;

use serde_json::Value;

/// An index into [`Schema::nodes`].
pub type NodeId = u32;

/// One schema node, as the matcher sees it.
#[derive(Debug, Clone)]
pub enum Node {
    /// Any JSON value.
    Any,
    /// An object. With `properties`, exactly those keys may appear, in the declared order,
    /// the required ones always; with none, any keys whose values match `values`.
    Object {
        properties: Vec<Property>,
        values: Option<NodeId>,
    },
    Array {
        items: NodeId,
        min: u32,
        max: Option<u32>,
    },
    String {
        min: u32,
        max: Option<u32>,
    },
    Number {
        integer: bool,
    },
    /// Exactly one of these serialized JSON texts (`enum`, `const`, `true`/`false`, `null`).
    Literals(u32),
    /// One of several nodes; compilation checks their first bytes never overlap, so the first
    /// byte of a value picks the branch.
    OneOf(Vec<NodeId>),
    /// A `$ref`, resolved after compilation.
    Ref(NodeId),
    /// Grammar parts (built by [`Grammar`], never from a JSON Schema): these in order.
    Seq(Vec<NodeId>),
    /// Exactly one of the sorted texts of literal list `list`, byte for byte (no whitespace
    /// around it), then what `then` names for the text taken.
    Choice {
        list: u32,
        then: Vec<Option<NodeId>>,
    },
    /// One control token, by id (a format's marker that no ordinary token spells).
    Token(u32),
}

#[derive(Debug, Clone)]
pub struct Property {
    pub node: NodeId,
    pub required: bool,
}

/// A compiled schema: nodes, and the sorted literal lists they name (`Literals`, and each
/// object's candidate keys from each position, serialized with their quotes).
#[derive(Debug, Clone)]
pub struct Schema {
    pub nodes: Vec<Node>,
    pub literals: Vec<Vec<Vec<u8>>>,
    /// For an object node and a position `next` among its properties: the literal list of
    /// the keys that may come next, and for each of its entries the property index.
    pub keys: BTreeMap<(NodeId, u32), (u32, Vec<u32>)>,
    pub root: NodeId,
    /// Nodes a free-form value (`Any`) becomes, by its first byte.
    pub any_object: NodeId,
    pub any_array: NodeId,
    pub any_string: NodeId,
    pub any_number: NodeId,
    /// `true`, `false`, `null`.
    pub any_word: NodeId,
    /// For each `OneOf` node, its branches and the first bytes each may start with.
    first: BTreeMap<NodeId, Vec<(NodeId, [bool; 256])>>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaError {
    #[error("the schema keyword `{keyword}` cannot be enforced (at {at})")]
    Unsupported { keyword: String, at: String },
    #[error("invalid schema at {at}: {reason}")]
    Invalid { at: String, reason: String },
}

/// Keywords that only describe: accepted and ignored.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$schema",
    "$id",
    "$comment",
    "strict",
    "deprecated",
    "readOnly",
    "writeOnly",
];

impl Schema {
    /// Any JSON object (`response_format: json_object`).
    pub fn any_object() -> Schema {
        let mut c = Compiler::default();
        let any = c.push(Node::Any);
        let root = c.push(Node::Object {
            properties: Vec::new(),
            values: Some(any),
        });
        c.finish(root)
    }

    /// Compiles a JSON Schema (`response_format: json_schema`, a tool's `parameters`).
    pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
        let mut g = Grammar::new();
        let root = g.json(schema)?;
        g.build(root)
    }

    /// The branch of `OneOf` node `id` a value starting with `b` takes.
    pub fn branch_for(&self, id: NodeId, b: u8) -> Option<NodeId> {
        self.first
            .get(&id)?
            .iter()
            .find(|(_, set)| set[b as usize])
            .map(|(branch, _)| *branch)
    }

    /// Follows `Ref` nodes.
    pub fn resolve(&self, mut id: NodeId) -> &Node {
        for _ in 0..=self.nodes.len() {
            match &self.nodes[id as usize] {
                Node::Ref(to) => id = *to,
                node => return node,
            }
        }
        &Node::Any // a cycle of refs only: compilation refuses it
    }

    /// The bytes a value of `id` may start with.
    fn first_bytes(&self, id: NodeId, depth: usize) -> Result<[bool; 256], SchemaError> {
        let mut set = [false; 256];
        if depth > self.nodes.len() {
            return Err(SchemaError::Invalid {
                at: "$ref".into(),
                reason: "refers to itself without a value in between".into(),
            });
        }
        let mut add = |bytes: &[u8]| bytes.iter().for_each(|&b| set[b as usize] = true);
        match self.resolve_checked(id, depth)? {
            Node::Any => add(b"{[\"-0123456789tfn"),
            Node::Object { .. } => add(b"{"),
            Node::Array { .. } => add(b"["),
            Node::String { .. } => add(b"\""),
            Node::Number { .. } => add(b"-0123456789"),
            Node::Literals(list) => {
                for l in &self.literals[*list as usize] {
                    add(&l[..1]);
                }
            }
            Node::OneOf(branches) => {
                for &b in branches {
                    let sub = self.first_bytes(b, depth + 1)?;
                    for (i, on) in sub.iter().enumerate() {
                        set[i] |= on;
                    }
                }
            }
            Node::Ref(_) => unreachable!("resolved"),
            Node::Seq(_) | Node::Choice { .. } | Node::Token(_) => {
                return Err(SchemaError::Invalid {
                    at: "anyOf".into(),
                    reason: "a grammar part cannot be a branch".into(),
                })
            }
        }
        Ok(set)
    }

    fn resolve_checked(&self, mut id: NodeId, depth: usize) -> Result<&Node, SchemaError> {
        for _ in depth..=self.nodes.len() {
            match &self.nodes[id as usize] {
                Node::Ref(to) => id = *to,
                node => return Ok(node),
            }
        }
        Err(SchemaError::Invalid {
            at: "$ref".into(),
            reason: "a cycle of references".into(),
        })
    }

    /// Every `anyOf`/`oneOf`/type list must be decidable by the first byte of the value.
    fn index_branches(&mut self) -> Result<(), SchemaError> {
        let mut first = BTreeMap::new();
        for (id, node) in self.nodes.iter().enumerate() {
            if let Node::OneOf(branches) = node {
                let mut seen = [false; 256];
                let mut sets = Vec::new();
                for &b in branches {
                    let set = self.first_bytes(b, 0)?;
                    if set.iter().zip(seen.iter()).any(|(a, b)| *a && *b) {
                        return Err(SchemaError::Unsupported {
                            keyword: "anyOf".into(),
                            at: "branches that can start with the same character".into(),
                        });
                    }
                    for (i, on) in set.iter().enumerate() {
                        seen[i] |= on;
                    }
                    sets.push((b, set));
                }
                first.insert(id as NodeId, sets);
            }
        }
        self.first = first;
        Ok(())
    }
}

/// Builds a constraint that is more than one JSON value: fixed text, control tokens, a
/// choice between texts, and JSON values of schemas, in sequence (a forced tool call in a
/// model's own format). Parts are nodes, so a continuation can be shared between choices.
#[derive(Default)]
pub struct Grammar {
    c: Compiler,
}

impl Grammar {
    pub fn new() -> Grammar {
        Grammar::default()
    }

    /// Exactly `text`.
    pub fn text(&mut self, text: &str) -> NodeId {
        let list = self.c.literal_list(vec![text.as_bytes().to_vec()]);
        self.c.push(Node::Choice {
            list,
            then: vec![None],
        })
    }

    /// The control token `id`.
    pub fn token(&mut self, id: u32) -> NodeId {
        self.c.push(Node::Token(id))
    }

    /// One JSON value of `schema` (its `$defs` are its own).
    pub fn json(&mut self, schema: &Value) -> Result<NodeId, SchemaError> {
        self.c.root(schema)
    }

    pub fn seq(&mut self, parts: Vec<NodeId>) -> NodeId {
        self.c.push(Node::Seq(parts))
    }

    /// One of the texts, then its continuation. No text may be empty or begin another, so
    /// the text taken is known at its last byte.
    pub fn choice(
        &mut self,
        options: Vec<(String, Option<NodeId>)>,
    ) -> Result<NodeId, SchemaError> {
        let mut options: Vec<(Vec<u8>, Option<NodeId>)> = options
            .into_iter()
            .map(|(t, n)| (t.into_bytes(), n))
            .collect();
        options.sort();
        let clash = options.windows(2).find(|w| w[1].0.starts_with(&w[0].0));
        if let Some(w) = clash {
            return Err(SchemaError::Invalid {
                at: "choice".into(),
                reason: format!(
                    "`{}` begins `{}`",
                    String::from_utf8_lossy(&w[0].0),
                    String::from_utf8_lossy(&w[1].0)
                ),
            });
        }
        if options.is_empty() || options[0].0.is_empty() {
            return Err(SchemaError::Invalid {
                at: "choice".into(),
                reason: "needs at least one non-empty text".into(),
            });
        }
        let then = options.iter().map(|o| o.1).collect();
        let list = self
            .c
            .literal_list(options.into_iter().map(|o| o.0).collect());
        Ok(self.c.push(Node::Choice { list, then }))
    }

    pub fn build(self, root: NodeId) -> Result<Schema, SchemaError> {
        let mut schema = self.c.finish(root);
        schema.index_branches()?;
        Ok(schema)
    }
}

#[derive(Default)]
struct Compiler {
    nodes: Vec<Node>,
    literals: Vec<Vec<Vec<u8>>>,
    defs: BTreeMap<String, NodeId>,
    /// Each object node's property names, in declared order.
    prop_names: BTreeMap<NodeId, Vec<String>>,
}

impl Compiler {
    /// Compiles a whole schema document: its `$defs` are visible inside it only.
    fn root(&mut self, schema: &Value) -> Result<NodeId, SchemaError> {
        let outer = std::mem::take(&mut self.defs);
        for key in ["$defs", "definitions"] {
            if let Some(defs) = schema.get(key).and_then(Value::as_object) {
                for name in defs.keys() {
                    let id = self.push(Node::Any);
                    self.defs.insert(format!("#/{key}/{name}"), id);
                }
            }
        }
        for key in ["$defs", "definitions"] {
            if let Some(defs) = schema.get(key).and_then(Value::as_object) {
                for (name, def) in defs {
                    let at = format!("#/{key}/{name}");
                    let node = self.node(def, &at)?;
                    let slot = self.defs[&at];
                    self.nodes[slot as usize] = Node::Ref(node);
                }
            }
        }
        let root = self.node(schema, "#");
        self.defs = outer;
        root
    }

    fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        (self.nodes.len() - 1) as NodeId
    }

    fn literal_list(&mut self, mut list: Vec<Vec<u8>>) -> u32 {
        list.sort();
        list.dedup();
        self.literals.push(list);
        (self.literals.len() - 1) as u32
    }

    fn finish(mut self, root: NodeId) -> Schema {
        let any = self.push(Node::Any);
        let any_object = self.push(Node::Object {
            properties: Vec::new(),
            values: Some(any),
        });
        let any_array = self.push(Node::Array {
            items: any,
            min: 0,
            max: None,
        });
        let any_string = self.push(Node::String { min: 0, max: None });
        let any_number = self.push(Node::Number { integer: false });
        let words = self.literal_list(vec![b"true".to_vec(), b"false".to_vec(), b"null".to_vec()]);
        let any_word = self.push(Node::Literals(words));
        let mut keys = BTreeMap::new();
        for (id, node) in self.nodes.clone().iter().enumerate() {
            let Node::Object { properties, .. } = node else {
                continue;
            };
            let names = self
                .prop_names
                .get(&(id as NodeId))
                .cloned()
                .unwrap_or_default();
            for next in 0..=properties.len() {
                let mut entries: Vec<(Vec<u8>, u32)> = Vec::new();
                for (j, p) in properties.iter().enumerate().skip(next) {
                    entries.push((key_literal(&names[j]), j as u32));
                    if p.required {
                        break;
                    }
                }
                entries.sort();
                let index = entries.iter().map(|e| e.1).collect();
                self.literals
                    .push(entries.into_iter().map(|e| e.0).collect());
                keys.insert(
                    (id as NodeId, next as u32),
                    ((self.literals.len() - 1) as u32, index),
                );
            }
        }
        Schema {
            nodes: self.nodes,
            literals: self.literals,
            keys,
            root,
            any_object,
            any_array,
            any_string,
            any_number,
            any_word,
            first: BTreeMap::new(),
        }
    }

    fn node(&mut self, schema: &Value, at: &str) -> Result<NodeId, SchemaError> {
        let invalid = |reason: &str| SchemaError::Invalid {
            at: at.to_owned(),
            reason: reason.to_owned(),
        };
        let obj = match schema {
            Value::Bool(true) => return Ok(self.push(Node::Any)),
            Value::Object(o) => o,
            _ => return Err(invalid("a schema is an object (or `true`)")),
        };
        for key in obj.keys() {
            let known = ANNOTATIONS.contains(&key.as_str())
                || matches!(
                    key.as_str(),
                    "type"
                        | "properties"
                        | "required"
                        | "additionalProperties"
                        | "items"
                        | "minItems"
                        | "maxItems"
                        | "minLength"
                        | "maxLength"
                        | "enum"
                        | "const"
                        | "anyOf"
                        | "oneOf"
                        | "$ref"
                        | "$defs"
                        | "definitions"
                );
            if !known {
                return Err(SchemaError::Unsupported {
                    keyword: key.clone(),
                    at: at.to_owned(),
                });
            }
        }
        if let Some(r) = obj.get("$ref") {
            let target = r.as_str().ok_or_else(|| invalid("`$ref` is a string"))?;
            let id = *self
                .defs
                .get(target)
                .ok_or_else(|| SchemaError::Unsupported {
                    keyword: "$ref".into(),
                    at: format!("{at} (only #/$defs/NAME and #/definitions/NAME: {target})"),
                })?;
            return Ok(self.push(Node::Ref(id)));
        }
        if let Some(values) = obj.get("const").map(|v| vec![v.clone()]).or_else(|| {
            obj.get("enum")
                .and_then(Value::as_array)
                .map(|a| a.to_vec())
        }) {
            if values.is_empty() {
                return Err(invalid("`enum` is empty"));
            }
            let list = values
                .iter()
                .map(|v| serde_json::to_vec(v).unwrap_or_default())
                .collect();
            let list = self.literal_list(list);
            return Ok(self.push(Node::Literals(list)));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = obj.get(key) {
                let branches = branches
                    .as_array()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| invalid(&format!("`{key}` is a non-empty list")))?;
                let ids = branches
                    .iter()
                    .enumerate()
                    .map(|(i, b)| self.node(b, &format!("{at}/{key}/{i}")))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(self.push(Node::OneOf(ids)));
            }
        }
        let types: Vec<&str> = match obj.get("type") {
            None => Vec::new(),
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            Some(_) => return Err(invalid("`type` is a string or a list of strings")),
        };
        if types.is_empty() {
            if obj.contains_key("properties") || obj.contains_key("additionalProperties") {
                return self.typed(obj, "object", at);
            }
            if obj.contains_key("items") {
                return self.typed(obj, "array", at);
            }
            return Ok(self.push(Node::Any));
        }
        if types.len() == 1 {
            return self.typed(obj, types[0], at);
        }
        let ids = types
            .iter()
            .map(|t| self.typed(obj, t, at))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(self.push(Node::OneOf(ids)))
    }

    fn typed(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        kind: &str,
        at: &str,
    ) -> Result<NodeId, SchemaError> {
        let count = |key: &str| -> Result<Option<u32>, SchemaError> {
            match obj.get(key) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| SchemaError::Invalid {
                        at: at.to_owned(),
                        reason: format!("`{key}` is a non-negative integer"),
                    }),
            }
        };
        let node = match kind {
            "object" => return self.object(obj, at),
            "array" => {
                let items = match obj.get("items") {
                    Some(s) => self.node(s, &format!("{at}/items"))?,
                    None => self.push(Node::Any),
                };
                Node::Array {
                    items,
                    min: count("minItems")?.unwrap_or(0),
                    max: count("maxItems")?,
                }
            }
            "string" => Node::String {
                min: count("minLength")?.unwrap_or(0),
                max: count("maxLength")?,
            },
            "integer" => Node::Number { integer: true },
            "number" => Node::Number { integer: false },
            "boolean" => {
                let list = self.literal_list(vec![b"true".to_vec(), b"false".to_vec()]);
                Node::Literals(list)
            }
            "null" => {
                let list = self.literal_list(vec![b"null".to_vec()]);
                Node::Literals(list)
            }
            other => {
                return Err(SchemaError::Invalid {
                    at: at.to_owned(),
                    reason: format!("unknown type `{other}`"),
                })
            }
        };
        Ok(self.push(node))
    }

    fn object(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        at: &str,
    ) -> Result<NodeId, SchemaError> {
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut properties = Vec::new();
        let mut names = Vec::new();
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, s) in props {
                let node = self.node(s, &format!("{at}/properties/{name}"))?;
                properties.push(Property {
                    node,
                    required: required.contains(&name.as_str()),
                });
                names.push(name.clone());
            }
        }
        if let Some(missing) = required.iter().find(|r| !names.iter().any(|n| n == *r)) {
            return Err(SchemaError::Invalid {
                at: at.to_owned(),
                reason: format!("required property `{missing}` is not among `properties`"),
            });
        }
        let values = if properties.is_empty() {
            Some(match obj.get("additionalProperties") {
                None | Some(Value::Bool(true)) => self.push(Node::Any),
                Some(Value::Bool(false)) => {
                    let id = self.push(Node::Object {
                        properties: Vec::new(),
                        values: None,
                    });
                    return Ok(id);
                }
                Some(s) => self.node(s, &format!("{at}/additionalProperties"))?,
            })
        } else {
            None // only the declared properties are generated, which every form allows
        };
        let id = self.push(Node::Object { properties, values });
        self.prop_names.insert(id, names);
        Ok(id)
    }
}

/// A property name as it appears in the output: a JSON string with its quotes.
fn key_literal(name: &str) -> Vec<u8> {
    serde_json::to_vec(name).unwrap_or_default()
}
