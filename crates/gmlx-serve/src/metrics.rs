//! Process figures for `/v1/metrics`.

/// Resident set size of this process (Linux `/proc/self/statm`), if readable.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
