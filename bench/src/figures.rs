//! What one scenario measured, and how: records, time, CPU, peak memory, settle quantiles.

use std::time::{Duration, Instant};

/// One scenario's figures (added up over passes).
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// Records the clock ran over.
    pub records: u64,
    /// From the first record to the last.
    pub elapsed: Duration,
    /// Fetch-to-settle median; `None` where it cannot be measured (the bare loop, the peers).
    pub p50: Option<Duration>,
    /// Fetch-to-settle 99th percentile.
    pub p99: Option<Duration>,
    /// Peak RSS of the scenario's process (VmHWM), MB.
    pub rss_mb: f64,
    /// CPU time the scenario's process used (all threads) while the clock ran.
    pub cpu: Duration,
}

impl Figures {
    /// Adds another pass: records and times add up; quantiles and peak memory are the worst
    /// pass's.
    pub fn add(&mut self, pass: Figures) {
        self.records += pass.records;
        self.elapsed += pass.elapsed;
        self.cpu += pass.cpu;
        self.rss_mb = self.rss_mb.max(pass.rss_mb);
        self.p50 = self.p50.max(pass.p50);
        self.p99 = self.p99.max(pass.p99);
    }

    /// Records per second.
    pub fn rate(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU microseconds per record.
    pub fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.records.max(1) as f64
    }

    /// The line a scenario's process prints for the bench to read:
    /// `FIGURES <records> <elapsed ns> <p50 ns> <p99 ns> <rss MB> <cpu ns>` (0 for no quantile).
    /// The Java peers print the same.
    pub fn line(&self) -> String {
        format!(
            "FIGURES {} {} {} {} {} {}",
            self.records,
            self.elapsed.as_nanos(),
            self.p50.map_or(0, |d| d.as_nanos()),
            self.p99.map_or(0, |d| d.as_nanos()),
            self.rss_mb,
            self.cpu.as_nanos()
        )
    }

    /// Reads a `FIGURES` line from a process's standard output.
    pub fn parse(stdout: &str) -> Option<Figures> {
        let line = stdout.lines().find_map(|l| l.strip_prefix("FIGURES "))?;
        let n: Vec<f64> = line
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        if n.len() != 6 {
            return None;
        }
        let nanos = |v: f64| (v > 0.0).then(|| Duration::from_nanos(v as u64));
        Some(Figures {
            records: n[0] as u64,
            elapsed: Duration::from_nanos(n[1] as u64),
            p50: nanos(n[2]),
            p99: nanos(n[3]),
            rss_mb: n[4],
            cpu: Duration::from_nanos(n[5] as u64),
        })
    }
}

/// CPU time used so far by this process, all threads.
#[allow(unsafe_code)]
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Wall-clock and CPU time since `first` (zero when there was no first record).
pub fn since(first: Option<(Instant, Duration)>) -> (Duration, Duration) {
    first.map_or_else(Default::default, |(at, cpu)| {
        (at.elapsed(), cpu_time().saturating_sub(cpu))
    })
}

/// The process's peak RSS, in MB (VmHWM).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// The `q` quantile (0 to 1) of kafka-dlq's fetch-to-settle histogram
/// (`kafka_dlq_record_settle_seconds` in `registry`), as the upper bound of the bucket that holds
/// it; `None` before any record.
pub fn settle_quantile(registry: &prometheus::Registry, q: f64) -> Option<Duration> {
    let family = registry
        .gather()
        .into_iter()
        .find(|f| f.name() == "kafka_dlq_record_settle_seconds")?;
    let h = family.get_metric().first()?.get_histogram().clone();
    let total = h.get_sample_count();
    if total == 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
    h.get_bucket()
        .iter()
        .find(|b| b.cumulative_count() >= rank)
        .map(|b| Duration::from_secs_f64(b.upper_bound()))
        .or(Some(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figures_line_reads_back() {
        let f = Figures {
            records: 10,
            elapsed: Duration::from_millis(1500),
            p50: Some(Duration::from_micros(200)),
            p99: None,
            rss_mb: 42.5,
            cpu: Duration::from_millis(700),
        };
        let back = Figures::parse(&format!("noise\n{}\n", f.line())).unwrap();
        assert_eq!(back.records, 10);
        assert_eq!(back.elapsed, f.elapsed);
        assert_eq!(back.p50, f.p50);
        assert_eq!(back.p99, None);
        assert_eq!(back.rss_mb, 42.5);
        assert_eq!(back.cpu, f.cpu);
        assert!(Figures::parse("FIGURES 1 2").is_none());
    }
}
