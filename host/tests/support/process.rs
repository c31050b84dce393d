//! What a test or a benchmark reads of another process. Benches include this file by path: it
//! needs nothing else of the tests' support.

/// CPU seconds (user and system) a process (`self` or a pid) has used, from `/proc/PID/stat`:
/// 0 for a process that is gone. Wall time on this shared 2-core machine varies run to run by
/// up to a quarter; CPU time shows whether a process did less work whatever the machine was
/// doing. The kernel reports it in USER_HZ, 100 on Linux.
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name is in parentheses and may hold spaces.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    // Fields 14 and 15 (utime, stime); `after_name` starts at field 3.
    let ticks: u64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}
