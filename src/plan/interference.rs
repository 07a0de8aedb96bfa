//! Other work on the machine while a measurement runs: the share of the
//! watched CPUs' time that went to other processes or to the hypervisor
//! (steal time), from `/proc/stat` and `/proc/self/stat`. Linux only;
//! elsewhere the share is unknown (`None`). Calibration uses it to refuse to
//! cache a model measured under load.

/// CPU time counters at one moment, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuTimes {
    /// Busy ticks of the watched CPUs: user, nice, system, irq, softirq and
    /// steal (time the hypervisor gave the vCPU's core to someone else).
    pub busy: u64,
    /// All ticks of the watched CPUs (busy, idle and iowait).
    pub total: u64,
    /// This process's own ticks, user and system, over all its threads.
    pub own: u64,
}

impl CpuTimes {
    /// The counters now, over `cpus` (every CPU if empty); `None` where
    /// `/proc` cannot tell.
    pub fn now(cpus: &[usize]) -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (busy, total) = parse_proc_stat(&stat, cpus)?;
        Some(CpuTimes {
            busy,
            total,
            own: parse_own_ticks(&own)?,
        })
    }
}

/// The share (0–1) of the watched CPUs' time between `before` and `after`
/// that other work took: their busy time less this process's own. `None` if
/// no tick passed.
pub fn share(before: CpuTimes, after: CpuTimes) -> Option<f64> {
    let total = after.total.checked_sub(before.total)?;
    if total == 0 {
        return None;
    }
    let busy = after.busy.saturating_sub(before.busy);
    let own = after.own.saturating_sub(before.own);
    Some((busy.saturating_sub(own) as f64 / total as f64).clamp(0.0, 1.0))
}

/// Busy and total ticks of `cpus` (the aggregate `cpu` line if empty) in the
/// text of `/proc/stat`; `None` if a CPU's line is missing or malformed.
fn parse_proc_stat(text: &str, cpus: &[usize]) -> Option<(u64, u64)> {
    let fields = |line: &str| -> Option<(u64, u64)> {
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // user nice system idle iowait irq softirq steal [guest guest_nice];
        // guest time is already counted in user.
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        if v.len() < 4 {
            return None;
        }
        let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
        Some((busy, busy + at(3) + at(4)))
    };
    let names: Vec<String> = if cpus.is_empty() {
        vec!["cpu".into()]
    } else {
        cpus.iter().map(|c| format!("cpu{c}")).collect()
    };
    let mut sum = (0, 0);
    for name in &names {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
        let (busy, total) = fields(line)?;
        sum = (sum.0 + busy, sum.1 + total);
    }
    Some(sum)
}

/// utime + stime (fields 14 and 15) of the text of `/proc/self/stat`; the
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted after its last `)`.
fn parse_own_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): utime is its 12th field, stime its 13th.
    let mut f = rest.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  300 10 100 1000 20 5 5 60 0 0\n\
                        cpu0 200 0 50 400 10 3 2 40 0 0\n\
                        cpu1 100 10 50 600 10 2 3 20 0 0\n\
                        intr 12345\n";

    #[test]
    fn proc_stat_counts_busy_and_total_ticks_of_the_watched_cpus() {
        assert_eq!(parse_proc_stat(STAT, &[]), Some((480, 1500)));
        assert_eq!(parse_proc_stat(STAT, &[0]), Some((295, 705)));
        assert_eq!(parse_proc_stat(STAT, &[0, 1]), Some((480, 1500)));
        assert_eq!(parse_proc_stat(STAT, &[2]), None);
        assert_eq!(parse_proc_stat("cpu0 1 2\n", &[0]), None);
    }

    #[test]
    fn own_ticks_are_read_after_the_command_name() {
        let text = "4242 (a (weird) name) R 1 2 3 4 5 6 7 8 9 10 123 45 0 0 20 0 3";
        assert_eq!(parse_own_ticks(text), Some(168));
        assert_eq!(parse_own_ticks("no name here"), None);
    }

    #[test]
    fn share_is_other_work_over_elapsed_ticks() {
        let t = |busy, total, own| CpuTimes { busy, total, own };
        // 200 ticks passed, 150 busy, 100 of them ours: 25 % was other work.
        assert_eq!(share(t(0, 0, 0), t(150, 200, 100)), Some(0.25));
        // Our own work only.
        assert_eq!(share(t(10, 10, 5), t(110, 210, 105)), Some(0.0));
        // No time passed.
        assert_eq!(share(t(1, 1, 1), t(1, 1, 1)), None);
    }

    #[test]
    fn this_process_can_read_its_counters_on_linux() {
        if cfg!(target_os = "linux") {
            let a = CpuTimes::now(&[]).expect("/proc is readable");
            assert!(a.total > 0);
        }
    }
}
