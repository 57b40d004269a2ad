//! When open-loop requests go out: vLLM's arrival process. Intervals are
//! gamma-distributed with shape `burstiness` and mean `1 / rate`; a
//! burstiness of 1 is a Poisson process (exponential intervals), below 1
//! burstier, above 1 more even. Seeded, so a run's schedule is reproducible.

use crate::workload::rng::Rng;

/// Draws the gaps between one request and the next.
#[derive(Clone, Debug)]
pub(crate) struct Arrivals {
    rng: Rng,
    rate: f64,
    burstiness: f64,
}

impl Arrivals {
    /// `rate` in requests per second (> 0; infinite sends everything at
    /// once), `burstiness` > 0.
    pub(crate) fn new(seed: u64, rate: f64, burstiness: f64) -> Arrivals {
        Arrivals {
            rng: Rng::new(seed),
            rate,
            burstiness,
        }
    }

    /// Seconds until the next request.
    pub(crate) fn next_gap_s(&mut self) -> f64 {
        if !self.rate.is_finite() {
            return 0.0;
        }
        // Scale theta = 1 / (rate * shape) keeps the mean at 1 / rate.
        let theta = 1.0 / (self.rate * self.burstiness);
        gamma(&mut self.rng, self.burstiness) * theta
    }
}

/// Uniform in (0, 1), never 0 (so its logarithm is finite).
fn unit(rng: &mut Rng) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// Standard normal by Box-Muller.
fn normal(rng: &mut Rng) -> f64 {
    let (u1, u2) = (unit(rng), unit(rng));
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 through the
/// boost Gamma(a) = Gamma(a + 1) * U^(1/a).
fn gamma(rng: &mut Rng, shape: f64) -> f64 {
    if shape == 1.0 {
        return -unit(rng).ln();
    }
    if shape < 1.0 {
        return gamma(rng, shape + 1.0) * unit(rng).powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = unit(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_and_cv(rate: f64, burstiness: f64) -> (f64, f64) {
        let mut a = Arrivals::new(7, rate, burstiness);
        let gaps: Vec<f64> = (0..200_000).map(|_| a.next_gap_s()).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn poisson_gaps_have_mean_one_over_rate_and_cv_one() {
        // Exponential: mean 1/rate = 0.1 s, coefficient of variation 1.
        let (mean, cv) = mean_and_cv(10.0, 1.0);
        assert!((mean - 0.1).abs() < 0.001, "mean {mean}");
        assert!((cv - 1.0).abs() < 0.01, "cv {cv}");
    }

    #[test]
    fn burstiness_is_the_gamma_shape() {
        // Gamma(k): cv = 1/sqrt(k). k = 4 -> 0.5; k = 0.25 -> 2. Mean stays 1/rate.
        let (mean, cv) = mean_and_cv(4.0, 4.0);
        assert!((mean - 0.25).abs() < 0.0025, "mean {mean}");
        assert!((cv - 0.5).abs() < 0.01, "cv {cv}");
        let (mean, cv) = mean_and_cv(4.0, 0.25);
        assert!((mean - 0.25).abs() < 0.01, "mean {mean}");
        assert!((cv - 2.0).abs() < 0.06, "cv {cv}");
    }

    #[test]
    fn infinite_rate_sends_at_once_and_seed_repeats() {
        assert_eq!(Arrivals::new(1, f64::INFINITY, 1.0).next_gap_s(), 0.0);
        let mut a = Arrivals::new(3, 2.0, 1.0);
        let mut b = Arrivals::new(3, 2.0, 1.0);
        for _ in 0..10 {
            assert_eq!(a.next_gap_s(), b.next_gap_s());
        }
    }
}
