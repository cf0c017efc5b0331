//! CPU time of processes, read from /proc: what each node used, for the share of the cluster's work one node did, and what the bench's node and generator used.

/// User plus system clock ticks `pid` has used, if /proc has it.
pub fn ticks(pid: u32) -> Option<u64> {
    process_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime + stime from a /proc/PID/stat line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted from its last
/// ')': utime and stime, fields 14 and 15 of the line, are 12 and 13 there.
fn process_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The largest share of the CPU time the nodes used between two readings
/// (each `None` where a node was not running), or None with no time used.
pub fn busiest_share(before: &[Option<u64>], after: &[Option<u64>]) -> Option<f64> {
    let used: Vec<u64> = before
        .iter()
        .zip(after)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) => a.saturating_sub(*b),
            _ => 0,
        })
        .collect();
    let total: u64 = used.iter().sum();
    (total > 0).then(|| *used.iter().max().unwrap_or(&0) as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_ticks_and_the_busiest_share_is_of_the_total() {
        assert!(ticks(std::process::id()).is_some());
        let share = busiest_share(&[Some(10), Some(0), None], &[Some(40), Some(10), Some(5)]);
        assert_eq!(share, Some(0.75));
        assert_eq!(busiest_share(&[Some(1)], &[Some(1)]), None);
    }

    #[test]
    fn process_time_is_counted_past_a_name_with_spaces_and_parens() {
        let stat = "42 (bench gen) (x)) S 1 42 42 0 -1 4194304 10 0 0 0 170 30 0 0 20 0 4 0 9 0 0";
        assert_eq!(process_ticks(stat), Some(200));
        assert_eq!(process_ticks("42 (cut short) S 1"), None);
    }
}
