//! Stop strings: text is held back while it might be the start of one, and cut where one
//! appears (the stop string itself is never output).

/// Holds back text that might begin a stop string.
#[derive(Debug, Default)]
pub struct StopFilter {
    stops: Vec<String>,
    held: String,
}

impl StopFilter {
    pub fn new(stops: Vec<String>) -> StopFilter {
        StopFilter {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Text safe to release, and whether a stop string was hit.
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..at].to_owned();
            self.held.clear();
            return (out, true);
        }
        let keep = self
            .stops
            .iter()
            .flat_map(|s| {
                (1..s.len())
                    .filter(|&k| s.is_char_boundary(k))
                    .filter(|&k| self.held.ends_with(&s[..k]))
                    .max()
            })
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_owned();
        self.held.drain(..cut);
        (out, false)
    }

    /// Whatever is still held (generation ended without a stop string).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_cut_and_hold_prefixes() {
        let mut f = StopFilter::new(vec!["END".to_owned()]);
        assert_eq!(f.push("abc E"), ("abc ".to_owned(), false));
        assert_eq!(f.push("N"), (String::new(), false));
        assert_eq!(f.push("Dxyz"), (String::new(), true));
        let mut f = StopFilter::new(vec!["END".to_owned()]);
        assert_eq!(f.push("EN"), (String::new(), false));
        assert_eq!(f.push("d"), ("ENd".to_owned(), false));
        assert_eq!(f.flush(), "");
    }
}
