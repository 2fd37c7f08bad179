//! A byte-at-a-time pushdown matcher for JSON values of a [`Schema`]: which bytes may come
//! next, and whether the value may end here.
use super::schema::{Node, NodeId, Schema};

/// Whitespace allowed between the tokens of the value: at most one newline and this many
/// spaces or tabs per gap (as llama.cpp's JSON grammar), so a sampled reply cannot run on in
/// whitespace.
const MAX_WS: u8 = 12;
/// The bit of a gap's whitespace count that records its newline.
const NEWLINE: u8 = 0x80;
/// Digits allowed in each part of a number.
const MAX_DIGITS: u8 = 16;
/// Nesting depth of free-form values (`Any`).
const MAX_DEPTH: usize = 32;
const NO_LIMIT: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Obj {
    Open,
    Key,
    Colon,
    Val,
    After,
    Comma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arr {
    Open,
    Val,
    After,
    Comma,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Num {
    Start,
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Esc {
    None,
    Backslash,
    Hex(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Frame {
    Root {
        done: bool,
    },
    Value {
        node: NodeId,
        ws: u8,
    },
    Object {
        node: NodeId,
        next: u32,
        cur: u32,
        st: Obj,
        ws: u8,
    },
    Array {
        node: NodeId,
        count: u32,
        st: Arr,
        ws: u8,
    },
    Str {
        min: u32,
        max: u32,
        len: u32,
        esc: Esc,
        /// Continuation bytes still due, and the range of the next one.
        cont: (u8, u8, u8),
    },
    Number {
        integer: bool,
        st: Num,
        digits: u8,
    },
    Lit {
        list: u32,
        pos: u16,
        lo: u16,
        hi: u16,
    },
    /// Inside a `Seq` node, at part `i`.
    Seq {
        node: NodeId,
        i: u32,
    },
    /// A `Choice` node whose text is being read (a `Lit` above it).
    Choice {
        node: NodeId,
    },
}

enum Step {
    Reject,
    /// The byte is consumed; the frame becomes this.
    Stay(Frame),
    /// The frame becomes this and the byte is fed again (a value picking its kind).
    Refeed(Frame),
    /// The byte is consumed; the frame becomes the first and the second is pushed.
    Push(Frame, Frame),
    /// As `Push`, then the byte is fed to the pushed frame.
    PushRefeed(Frame, Frame),
    /// The byte is consumed and ends the frame.
    Done,
    /// As `Done`, the frame having become this first (a literal's final candidate).
    DoneAs(Frame),
    /// The frame ended before this byte, which goes to its parent.
    DoneRefeed,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

/// A gap's whitespace count after `b`, or `None` when the gap may hold no more.
fn more_ws(ws: u8, b: u8) -> Option<u8> {
    match b {
        b'\n' | b'\r' if ws & NEWLINE == 0 => Some(ws | NEWLINE),
        b' ' | b'\t' if ws & !NEWLINE < MAX_WS => Some(ws + 1),
        _ => None,
    }
}

/// The matcher's stack: a root frame and the open values inside it.
pub(super) type Stack = Vec<Frame>;

pub(super) fn start(schema: &Schema) -> Stack {
    vec![
        Frame::Root { done: false },
        Frame::Value {
            node: schema.root,
            ws: 0,
        },
    ]
}

/// Feeds one byte; `false` (and a stack to throw away) if the value cannot continue with it.
pub(super) fn feed(schema: &Schema, stack: &mut Stack, b: u8) -> bool {
    loop {
        let Some(&top) = stack.last() else {
            return false;
        };
        match step(schema, top, b, stack.len()) {
            Step::Reject => return false,
            Step::Stay(f) => {
                *stack.last_mut().expect("top") = f;
                return true;
            }
            Step::Refeed(f) => *stack.last_mut().expect("top") = f,
            Step::Push(f, child) => {
                *stack.last_mut().expect("top") = f;
                stack.push(child);
                return true;
            }
            Step::PushRefeed(f, child) => {
                *stack.last_mut().expect("top") = f;
                stack.push(child);
            }
            Step::Done => {
                child_done(schema, stack);
                return true;
            }
            Step::DoneAs(f) => {
                *stack.last_mut().expect("top") = f;
                child_done(schema, stack);
                return true;
            }
            Step::DoneRefeed => child_done(schema, stack),
        }
    }
}

/// Whether the value may end here (a number or literal that could still go on ends too).
pub(super) fn can_finish(schema: &Schema, stack: &Stack) -> bool {
    let mut s = stack.clone();
    loop {
        match s.last() {
            Some(Frame::Root { done }) => return *done,
            Some(&f) if ends_here(schema, f) => child_done(schema, &mut s),
            _ => return false,
        }
    }
}

fn ends_here(schema: &Schema, f: Frame) -> bool {
    match f {
        Frame::Number { st, .. } => matches!(st, Num::Zero | Num::Int | Num::Frac | Num::Exp),
        Frame::Lit { list, pos, lo, .. } => {
            schema.literals[list as usize][lo as usize].len() == pos as usize
        }
        Frame::Seq { node, i } => seq_part(schema, node, i).is_none(),
        _ => false,
    }
}

/// Pops the finished top frame and moves its parent on.
fn child_done(schema: &Schema, stack: &mut Stack) {
    let Some(child) = stack.pop() else { return };
    let Some(parent) = stack.last_mut() else {
        return;
    };
    match parent {
        Frame::Root { done } => *done = true,
        Frame::Object {
            node,
            next,
            cur,
            st,
            ..
        } => match st {
            Obj::Key => {
                if let Frame::Lit { lo, .. } = child {
                    let (_, index) = &schema.keys[&(*node, *next)];
                    *cur = index[lo as usize];
                    *next = *cur + 1;
                }
                *st = Obj::Colon;
            }
            _ => *st = Obj::After,
        },
        Frame::Array { count, st, .. } => {
            *count += 1;
            *st = Arr::After;
        }
        Frame::Seq { i, .. } => *i += 1,
        Frame::Choice { node } => {
            let Node::Choice { then, .. } = &schema.nodes[*node as usize] else {
                return;
            };
            let taken = match child {
                Frame::Lit { lo, .. } => then.get(lo as usize).copied().flatten(),
                _ => None,
            };
            match taken {
                Some(next) => *parent = Frame::Value { node: next, ws: 0 },
                None => child_done(schema, stack),
            }
        }
        _ => {}
    }
}

/// Part `i` of `Seq` node `node`; `None` past its last part.
fn seq_part(schema: &Schema, node: NodeId, i: u32) -> Option<NodeId> {
    match &schema.nodes[node as usize] {
        Node::Seq(parts) => parts.get(i as usize).copied(),
        _ => None,
    }
}

/// Moves `stack` to where a control token is due, ending values that may end; the token's
/// id, or `None` when the next thing is not a control token.
fn to_token(schema: &Schema, stack: &mut Stack) -> Option<u32> {
    loop {
        let top = *stack.last()?;
        match top {
            Frame::Value { node, .. } => match schema.resolve(node) {
                Node::Token(id) => return Some(*id),
                Node::Seq(_) => {
                    *stack.last_mut()? = Frame::Seq {
                        node: concrete_id(schema, node),
                        i: 0,
                    }
                }
                _ => return None,
            },
            Frame::Seq { node, i } => match seq_part(schema, node, i) {
                Some(part) => stack.push(Frame::Value { node: part, ws: 0 }),
                None => child_done(schema, stack),
            },
            f if ends_here(schema, f) => child_done(schema, stack),
            _ => return None,
        }
    }
}

/// The control token that may come next, if one may.
pub(super) fn pending_token(schema: &Schema, stack: &Stack) -> Option<u32> {
    to_token(schema, &mut stack.clone())
}

/// The stack after control token `id`, if it may come next.
pub(super) fn take_token(schema: &Schema, stack: &Stack, id: u32) -> Option<Stack> {
    let mut s = stack.clone();
    (to_token(schema, &mut s)? == id).then(|| {
        child_done(schema, &mut s);
        s
    })
}

fn step(schema: &Schema, f: Frame, b: u8, depth: usize) -> Step {
    match f {
        Frame::Root { .. } => Step::Reject,
        Frame::Value { node, ws } => value(schema, node, ws, b, depth),
        Frame::Object {
            node,
            next,
            cur,
            st,
            ws,
        } => object(schema, (node, next, cur, st, ws), b, depth),
        Frame::Array {
            node,
            count,
            st,
            ws,
        } => array(schema, (node, count, st, ws), b, depth),
        Frame::Str {
            min,
            max,
            len,
            esc,
            cont,
        } => string(min, max, len, esc, cont, b),
        Frame::Number {
            integer,
            st,
            digits,
        } => number(integer, st, digits, b),
        Frame::Lit { list, pos, lo, hi } => literal(schema, list, pos, lo, hi, b),
        Frame::Seq { node, i } => match seq_part(schema, node, i) {
            Some(part) => Step::PushRefeed(f, Frame::Value { node: part, ws: 0 }),
            None => Step::DoneRefeed,
        },
        // a choice's text is read by the `Lit` above it
        Frame::Choice { .. } => Step::Reject,
    }
}

fn value(schema: &Schema, node: NodeId, ws: u8, b: u8, depth: usize) -> Step {
    // grammar parts take their bytes exactly, whitespace included
    match schema.resolve(node) {
        Node::Seq(_) => {
            return Step::Refeed(Frame::Seq {
                node: concrete_id(schema, node),
                i: 0,
            })
        }
        Node::Choice { list, .. } => {
            let hi = schema.literals[*list as usize].len() as u16;
            return Step::PushRefeed(
                Frame::Choice {
                    node: concrete_id(schema, node),
                },
                Frame::Lit {
                    list: *list,
                    pos: 0,
                    lo: 0,
                    hi,
                },
            );
        }
        Node::Token(_) => return Step::Reject,
        _ => {}
    }
    if is_ws(b) {
        return more_ws(ws, b).map_or(Step::Reject, |ws| Step::Stay(Frame::Value { node, ws }));
    }
    let resolved = schema.resolve(node);
    let concrete = match resolved {
        Node::Any => {
            if depth > MAX_DEPTH {
                return Step::Reject;
            }
            let node = match b {
                b'{' => schema.any_object,
                b'[' => schema.any_array,
                b'"' => schema.any_string,
                b'-' | b'0'..=b'9' => schema.any_number,
                _ => schema.any_word,
            };
            return Step::Refeed(Frame::Value { node, ws });
        }
        Node::Object { .. } if b == b'{' => Frame::Object {
            node: concrete_id(schema, node),
            next: 0,
            cur: NO_LIMIT,
            st: Obj::Open,
            ws: 0,
        },
        Node::Array { .. } if b == b'[' => Frame::Array {
            node: concrete_id(schema, node),
            count: 0,
            st: Arr::Open,
            ws: 0,
        },
        Node::String { min, max } if b == b'"' => Frame::Str {
            min: *min,
            max: max.unwrap_or(NO_LIMIT),
            len: 0,
            esc: Esc::None,
            cont: (0, 0, 0),
        },
        Node::Number { integer } => {
            return Step::Refeed(Frame::Number {
                integer: *integer,
                st: Num::Start,
                digits: 0,
            })
        }
        Node::Literals(list) => {
            let hi = schema.literals[*list as usize].len() as u16;
            return Step::Refeed(Frame::Lit {
                list: *list,
                pos: 0,
                lo: 0,
                hi,
            });
        }
        Node::OneOf(_) => {
            let id = concrete_id(schema, node);
            return match schema.branch_for(id, b) {
                Some(branch) => Step::Refeed(Frame::Value { node: branch, ws }),
                None => Step::Reject,
            };
        }
        _ => return Step::Reject,
    };
    Step::Stay(concrete)
}

/// The id behind a chain of `Ref`s.
fn concrete_id(schema: &Schema, mut id: NodeId) -> NodeId {
    while let Node::Ref(to) = schema.nodes[id as usize] {
        id = to;
    }
    id
}

fn object(
    schema: &Schema,
    (node, next, cur, st, ws): (NodeId, u32, u32, Obj, u8),
    b: u8,
    depth: usize,
) -> Step {
    let Node::Object { properties, values } = &schema.nodes[node as usize] else {
        return Step::Reject;
    };
    let frame = |next, cur, st, ws| Frame::Object {
        node,
        next,
        cur,
        st,
        ws,
    };
    if is_ws(b) && matches!(st, Obj::Open | Obj::Colon | Obj::After | Obj::Comma) {
        return more_ws(ws, b).map_or(Step::Reject, |ws| Step::Stay(frame(next, cur, st, ws)));
    }
    let may_close = properties[next as usize..].iter().all(|p| !p.required);
    let key = || -> Step {
        if b != b'"' {
            return Step::Reject;
        }
        if values.is_some() {
            if depth > MAX_DEPTH {
                return Step::Reject;
            }
            let key = Frame::Str {
                min: 0,
                max: NO_LIMIT,
                len: 0,
                esc: Esc::None,
                cont: (0, 0, 0),
            };
            return Step::Push(frame(next, cur, Obj::Key, 0), key);
        }
        let (list, _) = &schema.keys[&(node, next)];
        let hi = schema.literals[*list as usize].len() as u16;
        if hi == 0 {
            return Step::Reject;
        }
        let lit = Frame::Lit {
            list: *list,
            pos: 0,
            lo: 0,
            hi,
        };
        Step::PushRefeed(frame(next, cur, Obj::Key, 0), lit)
    };
    match st {
        Obj::Open if b == b'}' && may_close => Step::Done,
        Obj::Open | Obj::Comma => key(),
        Obj::Colon if b == b':' => {
            let child = match values {
                Some(v) => *v,
                None => properties[cur as usize].node,
            };
            Step::Push(
                frame(next, cur, Obj::Val, 0),
                Frame::Value { node: child, ws: 0 },
            )
        }
        Obj::After if b == b'}' && may_close => Step::Done,
        Obj::After if b == b',' => {
            let more = values.is_some() || (next as usize) < properties.len();
            if more {
                Step::Stay(frame(next, cur, Obj::Comma, 0))
            } else {
                Step::Reject
            }
        }
        _ => Step::Reject,
    }
}

fn array(
    schema: &Schema,
    (node, count, st, ws): (NodeId, u32, Arr, u8),
    b: u8,
    depth: usize,
) -> Step {
    let Node::Array { items, min, max } = &schema.nodes[node as usize] else {
        return Step::Reject;
    };
    let frame = |count, st, ws| Frame::Array {
        node,
        count,
        st,
        ws,
    };
    if is_ws(b) {
        return more_ws(ws, b).map_or(Step::Reject, |ws| Step::Stay(frame(count, st, ws)));
    }
    let room = max.is_none_or(|m| count < m);
    let item = Frame::Value {
        node: *items,
        ws: 0,
    };
    match st {
        Arr::Open | Arr::After if b == b']' && count >= *min => Step::Done,
        Arr::Open | Arr::Comma if room && depth <= MAX_DEPTH => {
            Step::PushRefeed(frame(count, Arr::Val, 0), item)
        }
        Arr::After if b == b',' && room => Step::Stay(frame(count, Arr::Comma, 0)),
        _ => Step::Reject,
    }
}

fn string(min: u32, max: u32, len: u32, esc: Esc, cont: (u8, u8, u8), b: u8) -> Step {
    let frame = |len, esc, cont| {
        Step::Stay(Frame::Str {
            min,
            max,
            len,
            esc,
            cont,
        })
    };
    let (due, lo, hi) = cont;
    if due > 0 {
        return if (lo..=hi).contains(&b) {
            frame(len, esc, (due - 1, 0x80, 0xBF))
        } else {
            Step::Reject
        };
    }
    match esc {
        Esc::Backslash => {
            return match b {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                    frame(len, Esc::None, cont)
                }
                b'u' => frame(len, Esc::Hex(4), cont),
                _ => Step::Reject,
            }
        }
        Esc::Hex(n) => {
            return if b.is_ascii_hexdigit() {
                frame(len, if n > 1 { Esc::Hex(n - 1) } else { Esc::None }, cont)
            } else {
                Step::Reject
            }
        }
        Esc::None => {}
    }
    if b == b'"' {
        return if len >= min { Step::Done } else { Step::Reject };
    }
    if b < 0x20 || len >= max {
        return Step::Reject;
    }
    let next = match b {
        b'\\' => return frame(len + 1, Esc::Backslash, cont),
        0x00..=0x7F => (0, 0, 0),
        0xC2..=0xDF => (1, 0x80, 0xBF),
        0xE0 => (2, 0xA0, 0xBF),
        0xED => (2, 0x80, 0x9F),
        0xE1..=0xEF => (2, 0x80, 0xBF),
        0xF0 => (3, 0x90, 0xBF),
        0xF1..=0xF3 => (3, 0x80, 0xBF),
        0xF4 => (3, 0x80, 0x8F),
        _ => return Step::Reject,
    };
    frame(len + 1, Esc::None, next)
}

fn number(integer: bool, st: Num, digits: u8, b: u8) -> Step {
    let go = |st, digits| {
        Step::Stay(Frame::Number {
            integer,
            st,
            digits,
        })
    };
    let digit = b.is_ascii_digit();
    let more = digits < MAX_DIGITS;
    match (st, b) {
        (Num::Start, b'-') => go(Num::Minus, 0),
        (Num::Start | Num::Minus, b'0') => go(Num::Zero, 1),
        (Num::Start | Num::Minus, _) if digit => go(Num::Int, 1),
        (Num::Int, _) if digit && more => go(Num::Int, digits + 1),
        (Num::Zero | Num::Int, b'.') if !integer => go(Num::Dot, 0),
        (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') if !integer => go(Num::E, 0),
        (Num::Dot, _) if digit => go(Num::Frac, 1),
        (Num::Frac, _) if digit && more => go(Num::Frac, digits + 1),
        (Num::E, b'+' | b'-') => go(Num::ESign, 0),
        (Num::E | Num::ESign, _) if digit => go(Num::Exp, 1),
        (Num::Exp, _) if digit && digits < 3 => go(Num::Exp, digits + 1),
        (Num::Zero | Num::Int | Num::Frac | Num::Exp, _) if !digit => Step::DoneRefeed,
        _ => Step::Reject,
    }
}

/// Narrows the sorted candidates `lo..hi` (all sharing their first `pos` bytes) by one byte.
fn literal(schema: &Schema, list: u32, pos: u16, lo: u16, hi: u16, b: u8) -> Step {
    let candidates = &schema.literals[list as usize];
    let p = pos as usize;
    let range = &candidates[lo as usize..hi as usize];
    let first = range.partition_point(|c| c.get(p).is_none_or(|&x| x < b));
    let last = range.partition_point(|c| c.get(p).is_none_or(|&x| x <= b));
    if first == last {
        return if candidates[lo as usize].len() == p {
            Step::DoneRefeed
        } else {
            Step::Reject
        };
    }
    let (nlo, nhi) = (lo + first as u16, lo + last as u16);
    let exact = candidates[nlo as usize].len() == p + 1;
    let narrowed = Frame::Lit {
        list,
        pos: pos + 1,
        lo: nlo,
        hi: nhi,
    };
    if exact && nhi - nlo == 1 {
        return Step::DoneAs(narrowed);
    }
    Step::Stay(narrowed)
}
