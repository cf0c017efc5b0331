//! The machine under the run, from /proc: load average, and CPU time spent by this process, the node's and the whole machine.

/// The 1, 5 and 15 minute load averages, as /proc/loadavg gives them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| first_three(&s))
        .unwrap_or_default()
}

fn first_three(loadavg: &str) -> String {
    loadavg
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// CPU seconds used so far, read together at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct CpuSample {
    own: Option<f64>,
    node: Option<f64>,
    machine: f64,
}

/// CPU seconds used between two samples.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct CpuUsed {
    /// By this process: the generator, and an in-process node if any.
    pub own: f64,
    /// By the node's process, when it is a separate one.
    pub node: Option<f64>,
    /// By the whole machine: every CPU's busy time.
    pub machine: f64,
}

impl CpuSample {
    pub fn take(node_pid: Option<u32>) -> CpuSample {
        CpuSample {
            own: cpu_seconds(None),
            node: node_pid.and_then(|p| cpu_seconds(Some(p))),
            machine: machine_busy(),
        }
    }

    /// What was used from this sample to `later`; a process unreadable at
    /// either end used 0 (this one) or an unknown amount (the node).
    pub fn until(self, later: CpuSample) -> CpuUsed {
        CpuUsed {
            own: later.own.zip(self.own).map(|(a, b)| a - b).unwrap_or(0.0),
            node: later.node.zip(self.node).map(|(a, b)| a - b),
            machine: later.machine - self.machine,
        }
    }
}

/// CPU seconds the machine has spent busy (all CPUs, not idle or iowait).
fn machine_busy() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| busy_ticks(&s))
        .map_or(0.0, |t| t / clock_ticks())
}

/// Busy ticks from /proc/stat's first ("cpu") line: user through steal,
/// less idle and iowait.
fn busy_ticks(stat: &str) -> Option<f64> {
    let f: Vec<f64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() < 5 {
        return None;
    }
    Some(f.iter().take(8).sum::<f64>() - f[3] - f[4])
}

/// CPU seconds (user + system) a process (None: this one) has used so far.
pub(super) fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let ticks = crate::cpu::ticks(pid.unwrap_or_else(std::process::id))?;
    Some(ticks as f64 / clock_ticks())
}

/// Ticks per second of /proc's CPU times.
#[allow(unsafe_code)]
fn clock_ticks() -> f64 {
    // SAFETY: sysconf reads a constant and has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_busy_time_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 5 50 9000 40 3 2 1 0 0\ncpu0 50 2 25 4500 20 1 1 0 0 0\n";
        assert_eq!(busy_ticks(stat), Some(100.0 + 5.0 + 50.0 + 3.0 + 2.0 + 1.0));
        assert_eq!(busy_ticks("cpu  1 2 3\n"), None);
    }

    #[test]
    fn usage_is_later_less_earlier_and_an_unread_node_stays_unknown() {
        let before = CpuSample {
            own: Some(1.0),
            node: None,
            machine: 10.0,
        };
        let after = CpuSample {
            own: Some(1.5),
            node: Some(4.0),
            machine: 12.0,
        };
        assert_eq!(
            before.until(after),
            CpuUsed {
                own: 0.5,
                node: None,
                machine: 2.0
            }
        );
        assert_eq!(
            first_three("0.52 0.58 0.59 1/467 12345\n"),
            "0.52 0.58 0.59"
        );
    }
}
