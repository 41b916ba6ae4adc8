//! Time for the translators: a clock that callers may drive, and RFC 3339 timestamps.
//!
//! Owns reading "now" (Unix-epoch nanoseconds, advancing monotonically from construction) and
//! formatting Ollama's `created_at`. Callers may pass their own `now_ns` to every call, which
//! makes output fully deterministic for tests and the oracle. It must not format durations.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub struct Clock {
    start_ns: u64,
    origin: Instant,
}

impl Clock {
    /// A clock whose start is `start_ns`, or the system time now.
    pub fn new(start_ns: Option<u64>) -> Self {
        Self { start_ns: start_ns.unwrap_or_else(system_ns), origin: Instant::now() }
    }

    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// `given`, or the start plus the monotonic time elapsed since construction.
    #[inline]
    pub fn now(&self, given: Option<u64>) -> u64 {
        given.unwrap_or_else(|| {
            let elapsed = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.start_ns.saturating_add(elapsed)
        })
    }
}

pub fn system_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Appends `ns` (Unix-epoch nanoseconds) as a quoted RFC 3339 UTC timestamp the way Go's
/// `time.RFC3339Nano` writes it: fraction trimmed of trailing zeros, no dot when zero.
pub fn write_rfc3339(out: &mut Vec<u8>, ns: u64) {
    let secs = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, rem / 60 % 60, rem % 60);
    let mut s = format!("\"{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}");
    if frac != 0 {
        let digits = format!("{frac:09}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s.push_str("Z\"");
    out.extend_from_slice(s.as_bytes());
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}
