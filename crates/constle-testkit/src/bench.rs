//! Bench support: the one percentile and the one CPU clock of every
//! benchmark, so that a p99 or a CPU figure means the same in every table.
//!
//! - Percentiles are nearest-rank: the p-th percentile of n values is the
//!   ⌈p/100 · n⌉-th smallest (the smallest for p = 0). The median is the
//!   50th percentile (for an even n the lower of the two middle values),
//!   the maximum the 100th; with fewer than 100 values the 99th percentile
//!   is the maximum.
//! - CPU time is the kernel scheduler's run time (user and system, in ns),
//!   read one way per scope: for this whole process (every thread,
//!   finished ones included) `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`
//!   ([`process_cpu`]); for threads picked by name, of this process or
//!   another, the first field of `/proc/<pid>/task/<tid>/schedstat` of each
//!   live thread ([`thread_cpu`]).
//!
//! `bench/measure.py` (the `constle run` benchmarks) uses the same
//! definitions; `README.md` (Benchmarks) states them for the tables.

use std::cmp::Ordering;
use std::time::Duration;

/// Measured values, sorted, to read percentiles from.
#[derive(Clone, Debug)]
pub struct Samples<T>(Vec<T>);

impl<T: Copy + PartialOrd> Samples<T> {
    /// `values`, sorted (an unordered pair, a NaN say, counts as equal).
    pub fn new(values: impl IntoIterator<Item = T>) -> Samples<T> {
        let mut values: Vec<T> = values.into_iter().collect();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
        Samples(values)
    }

    /// The nearest-rank `p`-th percentile (`p` from 0 to 100); `None`
    /// without values.
    pub fn percentile(&self, p: f64) -> Option<T> {
        let n = self.0.len();
        let rank = (p / 100.0 * n as f64).ceil() as usize;
        self.0.get(rank.clamp(1, n.max(1)) - 1).copied()
    }

    /// The 50th percentile.
    pub fn median(&self) -> Option<T> {
        self.percentile(50.0)
    }

    /// The largest value.
    pub fn max(&self) -> Option<T> {
        self.0.last().copied()
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The CPU time of this whole process so far: every thread, finished ones
/// included.
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec.unsigned_abs(), t.tv_nsec.unsigned_abs() as u32)
}

/// This process's CPU time over `iters` runs of `work` (for criterion's
/// `iter_custom`): on a shared machine the clock also counts whatever else
/// runs, the CPU time the work itself.
pub fn process_cpu_of(iters: u64, mut work: impl FnMut()) -> Duration {
    let start = process_cpu();
    for _ in 0..iters {
        work();
    }
    process_cpu() - start
}

/// A process whose threads [`thread_cpu`] reads.
#[derive(Clone, Copy, Debug)]
pub enum Process {
    /// This one.
    Current,
    /// Another, by pid.
    Pid(u32),
}

/// The CPU time so far of each live thread of `process`, with its name
/// (`comm`); none when the process is gone. A thread that ended is no
/// longer counted: measure the threads that live through the measurement.
pub fn thread_cpu(process: Process) -> Vec<(String, Duration)> {
    let tasks = match process {
        Process::Current => "/proc/self/task".to_owned(),
        Process::Pid(pid) => format!("/proc/{pid}/task"),
    };
    let Ok(entries) = std::fs::read_dir(tasks) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|task| {
            let dir = task.path();
            let name = std::fs::read_to_string(dir.join("comm")).ok()?;
            let stat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
            let ns = stat.split_whitespace().next()?.parse::<u64>().ok()?;
            Some((name.trim().to_owned(), Duration::from_nanos(ns)))
        })
        .collect()
}

/// The CPU time so far of the live threads of `process` whose name `pick`s.
pub fn threads_cpu(process: Process, pick: impl Fn(&str) -> bool) -> Duration {
    thread_cpu(process)
        .into_iter()
        .filter(|(name, _)| pick(name))
        .map(|(_, cpu)| cpu)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::Samples;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples = Samples::new((1..=10).rev());
        assert_eq!(samples.percentile(0.0), Some(1));
        assert_eq!(samples.percentile(10.0), Some(1));
        assert_eq!(samples.percentile(11.0), Some(2));
        assert_eq!(samples.median(), Some(5));
        assert_eq!(samples.percentile(90.0), Some(9));
        assert_eq!(samples.percentile(99.0), Some(10));
        assert_eq!(samples.max(), Some(10));
        let hundred = Samples::new(1..=100);
        assert_eq!(hundred.percentile(99.0), Some(99));
        assert_eq!(Samples::<u8>::new([]).percentile(50.0), None);
    }

    #[test]
    fn the_process_clock_moves_with_work() {
        let spent = super::process_cpu_of(1, || {
            let mut x = 0u64;
            for i in 0..5_000_000u64 {
                x = std::hint::black_box(x ^ i);
            }
        });
        assert!(spent > std::time::Duration::ZERO);
    }
}
