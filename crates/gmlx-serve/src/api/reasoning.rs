//! Splits generated text into reasoning (between `<think>` and `</think>`) and content.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Routes streamed text to reasoning or content, holding back partial tags.
#[derive(Debug, Default)]
pub struct ReasoningSplitter {
    inside: bool,
    held: String,
    /// Has any content been released yet (a `<think>` is only honoured before content).
    seen_content: bool,
}

impl ReasoningSplitter {
    /// `inside`: the prompt already opened a reasoning block.
    pub fn new(inside: bool) -> ReasoningSplitter {
        ReasoningSplitter {
            inside,
            ..ReasoningSplitter::default()
        }
    }

    /// Returns (reasoning, content) released by `text`.
    pub fn push(&mut self, text: &str) -> (String, String) {
        self.held.push_str(text);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            let tag = if self.inside { CLOSE } else { OPEN };
            if !self.inside && self.seen_content {
                content.push_str(&std::mem::take(&mut self.held));
                break;
            }
            if let Some(at) = self.held.find(tag) {
                let before: String = self.held[..at].to_owned();
                self.held.drain(..at + tag.len());
                if self.inside {
                    reasoning.push_str(&before);
                    self.inside = false;
                    // the blank line after `</think>` belongs to neither
                    let trimmed = self.held.trim_start().len();
                    let cut = self.held.len() - trimmed;
                    self.held.drain(..cut);
                } else {
                    if !before.trim().is_empty() {
                        self.seen_content = true;
                        content.push_str(&before);
                        content.push_str(tag);
                        continue;
                    }
                    self.inside = true;
                }
                continue;
            }
            // keep a suffix that may begin the tag
            let keep = (1..tag.len())
                .filter(|&k| self.held.ends_with(&tag[..k]))
                .max()
                .unwrap_or(0);
            let cut = self.held.len() - keep;
            let out: String = self.held.drain(..cut).collect();
            if self.inside {
                reasoning.push_str(&out);
            } else if !self.seen_content && out.trim().is_empty() && keep > 0 {
                // leading whitespace before a possible `<think>`: hold it with the tag
                self.held.insert_str(0, &out);
            } else {
                if !out.trim().is_empty() {
                    self.seen_content = true;
                }
                content.push_str(&out);
            }
            break;
        }
        (reasoning, content)
    }

    /// Releases whatever is held at the end.
    pub fn finish(&mut self) -> (String, String) {
        let rest = std::mem::take(&mut self.held);
        if self.inside {
            (rest, String::new())
        } else {
            (String::new(), rest)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(inside: bool, pieces: &[&str]) -> (String, String) {
        let mut s = ReasoningSplitter::new(inside);
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let (a, b) = s.push(p);
            r += &a;
            c += &b;
        }
        let (a, b) = s.finish();
        (r + &a, c + &b)
    }

    #[test]
    fn think_blocks_are_split_across_pieces() {
        let (r, c) = run(
            false,
            &["<th", "ink>\nhmm", " ok</th", "ink>\n\nHello", " world"],
        );
        assert_eq!(r, "\nhmm ok");
        assert_eq!(c, "Hello world");
        let (r, c) = run(true, &["plan</think>\n\nanswer"]);
        assert_eq!((r.as_str(), c.as_str()), ("plan", "answer"));
        let (r, c) = run(false, &["no tags at all"]);
        assert_eq!((r.as_str(), c.as_str()), ("", "no tags at all"));
    }
}
