//! What the bench records about the machine it ran on: cores, CPU model, memory, kernel, and
//! the load average (a 1-minute load of 1 or more at the start marks the figures as noisy:
//! something else was using the CPU).

use serde::Serialize;

/// A 1-minute load average at or above this at the start marks a run as noisy.
pub const NOISY_LOAD: f64 = 1.0;

/// The machine.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Host name.
    pub host: String,
    /// CPUs available to this process (`nproc`).
    pub nproc: usize,
    /// `model name` of the first CPU in /proc/cpuinfo.
    pub cpu_model: Option<String>,
    /// MemTotal of /proc/meminfo, in GiB (one decimal).
    pub memory_gib: Option<f64>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// 1, 5 and 15-minute load averages when the run started.
    pub load_average_start: Option<[f64; 3]>,
}

impl Machine {
    /// Reads the machine's description now (Linux /proc; fields are `None` elsewhere).
    pub fn read() -> Machine {
        Machine {
            host: hostname::get()
                .ok()
                .and_then(|name| name.into_string().ok())
                .unwrap_or_else(|| "unknown".to_owned()),
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: read("/proc/cpuinfo").and_then(|text| cpu_model(&text)),
            memory_gib: read("/proc/meminfo").and_then(|text| memory_gib(&text)),
            kernel: read("/proc/sys/kernel/osrelease").map(|s| s.trim().to_owned()),
            load_average_start: load_average(),
        }
    }

    /// True when the 1-minute load at the start reached [`NOISY_LOAD`].
    pub fn noisy(&self) -> bool {
        self.load_average_start
            .is_some_and(|load| load[0] >= NOISY_LOAD)
    }

    /// One line for the table header.
    pub fn summary(&self) -> String {
        format!(
            "{} cores ({}), {} GiB, kernel {}, load {}",
            self.nproc,
            self.cpu_model.as_deref().unwrap_or("unknown CPU"),
            self.memory_gib
                .map_or_else(|| "?".to_owned(), |gib| format!("{gib:.1}")),
            self.kernel.as_deref().unwrap_or("?"),
            self.load_average_start.map_or_else(
                || "?".to_owned(),
                |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
            ),
        )
    }
}

/// The 1, 5 and 15-minute load averages now, from /proc/loadavg.
pub fn load_average() -> Option<[f64; 3]> {
    read("/proc/loadavg").and_then(|text| parse_load(&text))
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn parse_load(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
}

fn memory_gib(meminfo: &str) -> Option<f64> {
    let kib: f64 = meminfo
        .lines()
        .find(|line| line.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((kib / (1024.0 * 1024.0) * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        assert_eq!(
            parse_load("3.72 3.17 2.30 4/512 12345\n"),
            Some([3.72, 3.17, 2.30])
        );
        assert_eq!(parse_load("garbage"), None);
        assert_eq!(
            cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags: x\n").as_deref(),
            Some("AMD EPYC 7B13")
        );
        assert_eq!(memory_gib("MemTotal:       24576000 kB\n"), Some(23.4));
    }

    #[test]
    fn a_loaded_machine_is_noisy() {
        let mut machine = Machine::read();
        machine.load_average_start = Some([0.4, 1.0, 1.0]);
        assert!(!machine.noisy());
        machine.load_average_start = Some([1.0, 0.2, 0.2]);
        assert!(machine.noisy());
        assert!(machine.summary().contains("load 1.00"));
    }
}
