//! CPU time each node process used, read from /proc, for the share of the cluster's work one node did.

/// User plus system clock ticks `pid` has used, if /proc has it.
pub fn ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields are counted after
    // its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 here.
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
}
