//! Samples, their summary, and ratios against a baseline measured in the same run.

use serde::Serialize;

/// What a measurement's numbers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Microseconds per operation: lower is better.
    Micros,
    /// Megabytes per second: higher is better.
    MegabytesPerSec,
    /// Operations per second: higher is better.
    OpsPerSec,
    /// Milliseconds per operation: lower is better.
    Millis,
    /// A count per operation (device writes, flushes): lower is better.
    PerOp,
    /// A share in percent (a hit rate): higher is better.
    Percent,
}

impl Unit {
    pub fn lower_is_better(self) -> bool {
        matches!(self, Unit::Micros | Unit::Millis | Unit::PerOp)
    }

    pub fn label(self) -> &'static str {
        match self {
            Unit::Micros => "us",
            Unit::MegabytesPerSec => "MB/s",
            Unit::OpsPerSec => "ops/s",
            Unit::Millis => "ms",
            Unit::PerOp => "per op",
            Unit::Percent => "%",
        }
    }
}

/// The sorted-sample quantile `q` (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One thing measured, over several interleaved repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub suite: String,
    pub case: String,
    pub variant: String,
    /// The variant of the same case this one is compared with.
    pub baseline: Option<String>,
    pub unit: Unit,
    /// Every sample, in order.
    #[serde(skip)]
    pub samples: Vec<f64>,
    /// Per repetition: the median of that repetition's samples.
    pub rep_medians: Vec<f64>,
    /// Extra figures (device operations per op, batch sizes, ...).
    pub extra: Vec<(String, f64)>,
}

/// The summary printed and reported.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p99: f64,
    pub p999: f64,
    /// Smallest and largest per-repetition median.
    pub spread: (f64, f64),
}

impl Measurement {
    pub fn new(
        suite: &str,
        case: &str,
        variant: &str,
        baseline: Option<&str>,
        unit: Unit,
    ) -> Measurement {
        Measurement {
            suite: suite.into(),
            case: case.into(),
            variant: variant.into(),
            baseline: baseline.map(Into::into),
            unit,
            samples: Vec::new(),
            rep_medians: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// Adds one repetition's samples.
    pub fn add_rep(&mut self, mut samples: Vec<f64>) {
        samples.retain(|x| x.is_finite());
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        self.rep_medians.push(quantile(&sorted, 0.5));
        self.samples.extend(samples);
    }

    pub fn summary(&self) -> Summary {
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        let lo = self.rep_medians.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.rep_medians.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Summary {
            n: sorted.len(),
            median: quantile(&sorted, 0.5),
            p99: quantile(&sorted, 0.99),
            p999: quantile(&sorted, 0.999),
            spread: (lo, hi),
        }
    }

    pub fn extra(&self, key: &str) -> Option<f64> {
        self.extra.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    pub fn set_extra(&mut self, key: &str, value: f64) {
        self.extra.retain(|(k, _)| k != key);
        self.extra.push((key.into(), value));
    }
}

/// Runs `ops` samples of every variant per repetition, the variants taking turns in chunks
/// of `chunk` samples with the starting variant rotating, so slow drifts of the machine (tens
/// of percent over seconds on a shared VM) fall on every variant alike. `sample(v, i)` takes
/// the `i`-th sample of variant `v` (`i` counts on across repetitions); `before_rep` runs
/// untimed before each repetition (write-back, warm-up). Both get `state`, the things
/// measured.
pub fn interleaved<S: ?Sized>(
    ms: &mut [Measurement],
    (reps, ops, chunk): (usize, usize, usize),
    state: &mut S,
    mut before_rep: impl FnMut(&mut S),
    mut sample: impl FnMut(&mut S, usize, usize) -> f64,
) {
    let k = ms.len();
    let chunk = chunk.clamp(1, ops.max(1));
    let mut taken = vec![0usize; k];
    for _ in 0..reps {
        before_rep(state);
        let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(ops); k];
        for round in 0..ops.div_ceil(chunk) {
            let todo = chunk.min(ops - round * chunk);
            for j in 0..k {
                let v = (round + j) % k;
                for _ in 0..todo {
                    samples[v].push(sample(state, v, taken[v]));
                    taken[v] += 1;
                }
            }
        }
        for (m, s) in ms.iter_mut().zip(samples) {
            m.add_rep(s);
        }
    }
}

/// `variant / baseline` of the medians (for lower-is-better units a ratio below 1 is faster).
pub fn ratio(m: &Measurement, all: &[Measurement]) -> Option<f64> {
    let base = m.baseline.as_ref()?;
    let b = all.iter().find(|x| x.suite == m.suite && x.case == m.case && &x.variant == base)?;
    let (a, b) = (m.summary().median, b.summary().median);
    (b > 0.0 && a.is_finite() && b.is_finite()).then(|| a / b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_takes_turns_and_counts_on() {
        let mut ms = vec![
            Measurement::new("s", "c", "a", None, Unit::Micros),
            Measurement::new("s", "c", "b", Some("a"), Unit::Micros),
        ];
        let mut order = Vec::new();
        let mut reps = 0;
        interleaved(
            &mut ms,
            (2, 5, 2),
            &mut order,
            |_| reps += 1,
            |order, v, i| {
                order.push((v, i));
                i as f64
            },
        );
        assert_eq!(reps, 2);
        assert_eq!(&order[..6], &[(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3)]);
        assert_eq!(ms[0].summary().n, 10);
        assert_eq!(order.iter().filter(|(v, _)| *v == 1).map(|(_, i)| *i).max(), Some(9));
    }

    #[test]
    fn summary_and_ratio() {
        let mut a = Measurement::new("s", "c", "a", Some("b"), Unit::Micros);
        let mut b = Measurement::new("s", "c", "b", None, Unit::Micros);
        a.add_rep((1..=100).map(f64::from).collect());
        a.add_rep((1..=100).map(|x| f64::from(x) + 10.0).collect());
        b.add_rep((1..=100).map(|x| f64::from(x) * 2.0).collect());
        let s = a.summary();
        assert_eq!(s.n, 200);
        assert_eq!(s.spread, (51.0, 61.0));
        let r = ratio(&a, &[a.clone(), b.clone()]).unwrap();
        assert!((r - s.median / b.summary().median).abs() < 1e-9);
    }
}
