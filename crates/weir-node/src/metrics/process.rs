//! The standard process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`), read from
//! /proc/self when scraped; on systems without /proc there are none.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

#[derive(Debug)]
pub struct ProcessCollector;

/// What /proc says of this process; each `None` when it could not be read.
#[derive(Debug, Default, PartialEq)]
struct Reading {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    open_fds: Option<u64>,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;
        let r = read();
        if let Some(cpu) = r.cpu_seconds {
            // The library appends `_total` to a counter's name.
            let m = enc.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu).encode(m)?;
        }
        if let Some(rss) = r.resident_bytes {
            let m = enc.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(rss as i64).encode(m)?;
        }
        if let Some(fds) = r.open_fds {
            let m = enc.encode_descriptor(
                "process_open_fds",
                "Open file descriptors.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(fds as i64).encode(m)?;
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn read() -> Reading {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let status = std::fs::read_to_string("/proc/self/status").ok();
    Reading {
        cpu_seconds: stat.as_deref().and_then(cpu_seconds),
        resident_bytes: status.as_deref().and_then(resident_bytes),
        // The directory read holds one descriptor itself, as every
        // exporter that counts this way also shows.
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
    }
}

#[cfg(not(target_os = "linux"))]
fn read() -> Reading {
    Reading::default()
}

/// Clock ticks per second of /proc's times (USER_HZ): 100 on every
/// architecture Linux builds for but Alpha, and reading the real value
/// (sysconf) would take unsafe code for this one number.
const USER_HZ: f64 = 100.0;

/// utime + stime of /proc/self/stat, in seconds. The command name (field
/// 2) is in parentheses and may hold spaces and parentheses itself, so the
/// fields are counted from after its last `)`: utime and stime are fields
/// 14 and 15, the 12th and 13th after it.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some((user + system) as f64 / USER_HZ)
}

/// `VmRSS:` of /proc/self/status (in kB there), in bytes.
fn resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kb: u64 = words.next()?.parse().ok()?;
    (words.next()? == "kB").then_some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_a_command_name_with_spaces_and_parentheses() {
        // Fields 3 to 15 of a real line; utime 250 and stime 50 ticks.
        let stat = "4242 (weir (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(cpu_seconds("4242 (weir) S 1"), None);
    }

    #[test]
    fn resident_memory_is_read_in_bytes() {
        let status = "Name:\tweir\nVmPeak:\t  9000 kB\nVmRSS:\t  2048 kB\nThreads:\t3\n";
        assert_eq!(resident_bytes(status), Some(2048 * 1024));
        assert_eq!(resident_bytes("Name:\tweir\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_cpu_time_memory_and_descriptors() {
        let r = read();
        assert!(r.cpu_seconds.is_some_and(|s| s >= 0.0), "{r:?}");
        assert!(r.resident_bytes.is_some_and(|b| b > 0), "{r:?}");
        // stdin, stdout, stderr and the directory being read at least.
        assert!(r.open_fds.is_some_and(|n| n >= 3), "{r:?}");
    }
}
