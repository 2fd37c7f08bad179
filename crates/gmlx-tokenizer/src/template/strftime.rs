//! `strftime` for the `strftime_now` template global, over a UTC civil time.

use std::time::{SystemTime, UNIX_EPOCH};

/// A calendar date and time of day (UTC), the moment `strftime_now` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    /// Year, e.g. 2026.
    pub year: i32,
    /// Month, 1..=12.
    pub month: u32,
    /// Day of the month, 1..=31.
    pub day: u32,
    /// Hour, 0..=23.
    pub hour: u32,
    /// Minute, 0..=59.
    pub minute: u32,
    /// Second, 0..=59.
    pub second: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl DateTime {
    /// The current time in UTC.
    pub fn now_utc() -> DateTime {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        DateTime::from_unix(secs)
    }

    /// The UTC civil time of a Unix timestamp (seconds).
    pub fn from_unix(secs: i64) -> DateTime {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        DateTime {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    fn days(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day)
    }

    /// Day of week, 0 = Monday.
    fn weekday(&self) -> usize {
        // 1970-01-01 was a Thursday (3).
        (self.days() + 3).rem_euclid(7) as usize
    }

    fn day_of_year(&self) -> i64 {
        self.days() - days_from_civil(self.year, 1, 1) + 1
    }

    /// Formats like Python's `datetime.strftime` (C locale) for the common directives,
    /// including glibc's `%-d`-style unpadded forms.
    pub fn strftime(&self, fmt: &str) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let mut spec = match chars.next() {
                Some(s) => s,
                None => {
                    out.push('%');
                    break;
                }
            };
            let unpadded = spec == '-';
            if unpadded {
                spec = match chars.next() {
                    Some(s) => s,
                    None => {
                        out.push_str("%-");
                        break;
                    }
                };
            }
            let num = |v: i64, width: usize| {
                if unpadded {
                    v.to_string()
                } else {
                    format!("{v:0width$}")
                }
            };
            let month_name = MONTHS[(self.month.clamp(1, 12) - 1) as usize];
            let weekday_name = WEEKDAYS[self.weekday()];
            let hour12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            match spec {
                'Y' => out.push_str(&self.year.to_string()),
                'y' => out.push_str(&num(i64::from(self.year).rem_euclid(100), 2)),
                'm' => out.push_str(&num(i64::from(self.month), 2)),
                'd' => out.push_str(&num(i64::from(self.day), 2)),
                'e' => out.push_str(&format!("{:>2}", self.day)),
                'H' => out.push_str(&num(i64::from(self.hour), 2)),
                'I' => out.push_str(&num(i64::from(hour12), 2)),
                'M' => out.push_str(&num(i64::from(self.minute), 2)),
                'S' => out.push_str(&num(i64::from(self.second), 2)),
                'p' => out.push_str(if self.hour < 12 { "AM" } else { "PM" }),
                'j' => out.push_str(&num(self.day_of_year(), 3)),
                'B' => out.push_str(month_name),
                'b' | 'h' => out.push_str(&month_name[..3]),
                'A' => out.push_str(weekday_name),
                'a' => out.push_str(&weekday_name[..3]),
                'u' => out.push_str(&(self.weekday() + 1).to_string()),
                'w' => out.push_str(&((self.weekday() + 1) % 7).to_string()),
                'F' => out.push_str(&format!("{}-{:02}-{:02}", self.year, self.month, self.day)),
                'T' => out.push_str(&format!(
                    "{:02}:{:02}:{:02}",
                    self.hour, self.minute, self.second
                )),
                '%' => out.push('%'),
                other => {
                    out.push('%');
                    if unpadded {
                        out.push('-');
                    }
                    out.push(other);
                }
            }
        }
        out
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i32, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    ((y + i64::from(m <= 2)) as i32, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_common_directives() {
        let t = DateTime {
            year: 2026,
            month: 1,
            day: 5,
            hour: 13,
            minute: 4,
            second: 9,
        };
        assert_eq!(t.strftime("%Y-%m-%d"), "2026-01-05");
        assert_eq!(t.strftime("%d %b %Y"), "05 Jan 2026");
        assert_eq!(t.strftime("%B %-d, %Y"), "January 5, 2026");
        assert_eq!(t.strftime("%A %H:%M:%S %p %j"), "Monday 13:04:09 PM 005");
    }

    #[test]
    fn unix_round_trip() {
        let t = DateTime::from_unix(1_767_225_600); // 2026-01-01T00:00:00Z
        assert_eq!((t.year, t.month, t.day, t.hour), (2026, 1, 1, 0));
        assert_eq!(t.strftime("%a"), "Thu");
    }
}
