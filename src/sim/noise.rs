//! Injected noise: a simulated machine that is noisy or throttling, so that repeated
//! levels (`--rounds`) see different speeds and the spread check has something to find.
//!
//! The model: the engine's busy time (the summed durations of its steps, idle time not
//! counted) is cut into periods of `period_ms`. Each period `k` has a speed factor drawn
//! uniformly from `[1 - amplitude, 1 + amplitude]`, a pure function of `(seed, k)`, and
//! every step that *starts* in period `k` takes its contract time (docs/architecture.md section 5)
//! times that factor: the fixed cost, the per-sequence cost and the prefill alike. So
//! TTFT and TPOT scale by the factor and throughput by its inverse, for as long as the
//! period lasts; a step longer than a period keeps the factor it started with.
//!
//! It is deterministic: the same seed and the same sequence of steps give the same
//! timings. A level shorter than a period sees one or two factors, so rounds of a short
//! level differ by up to `2 * amplitude` in speed; a level spanning many periods
//! averages them out, as a long benchmark on a jittery machine would.
//!
//! An amplitude of 0 is off: the step times are the contract's, bit for bit.

/// The speed-factor generator and its clock. See the module docs for the model.
#[derive(Clone, Debug)]
pub(crate) struct Noise {
    /// Largest relative deviation of a period's factor from 1; 0 is off.
    amplitude: f64,
    /// Busy time per factor, ms (> 0).
    period_ms: f64,
    /// Mixed once, so nearby seeds give unrelated sequences.
    key: u64,
    /// Busy time so far, ms: the summed noisy step durations.
    clock_ms: f64,
}

impl Noise {
    /// `amplitude` in `[0, 1)` and a positive, finite `period_ms` (checked by
    /// `SimConfig::validate`; anything else is treated as off here).
    pub(crate) fn new(amplitude: f64, period_ms: f64, seed: u64) -> Self {
        let usable = amplitude.is_finite()
            && (0.0..1.0).contains(&amplitude)
            && period_ms.is_finite()
            && period_ms > 0.0;
        Noise {
            amplitude: if usable { amplitude } else { 0.0 },
            period_ms: if usable { period_ms } else { 1.0 },
            key: splitmix64(seed),
            clock_ms: 0.0,
        }
    }

    pub(crate) fn is_off(&self) -> bool {
        self.amplitude == 0.0
    }

    /// The speed factor of period `k`: in `[1 - amplitude, 1 + amplitude]`.
    pub(crate) fn factor(&self, k: u64) -> f64 {
        if self.is_off() {
            return 1.0;
        }
        // 53 random bits -> a uniform in [0, 1).
        let u = (splitmix64(self.key ^ k) >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + self.amplitude * (2.0 * u - 1.0)
    }

    /// The period the clock is in now.
    fn period(&self) -> u64 {
        // Saturates on overflow, which only an absurdly long run could reach.
        (self.clock_ms / self.period_ms) as u64
    }

    /// The duration of a step whose contract time is `nominal_ms`, advancing the clock
    /// by it. Off: `nominal_ms` unchanged.
    pub(crate) fn step_ms(&mut self, nominal_ms: f64) -> f64 {
        if self.is_off() {
            return nominal_ms;
        }
        let actual = nominal_ms * self.factor(self.period());
        self.clock_ms += actual;
        actual
    }
}

/// SplitMix64's output function: a fast, well-mixed 64-bit hash.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_is_the_contract_exactly() {
        let mut n = Noise::new(0.0, 200.0, 42);
        assert!(n.is_off());
        for ms in [0.0, 0.1, 3.0, 10.85, 1e9] {
            assert_eq!(n.step_ms(ms).to_bits(), ms.to_bits());
        }
        assert_eq!(n.factor(7), 1.0);
        // Settings validate() refuses are off, not a panic or a negative step.
        for (a, p) in [(f64::NAN, 200.0), (1.0, 200.0), (-0.1, 200.0), (0.3, 0.0)] {
            assert!(Noise::new(a, p, 1).is_off(), "{a} {p}");
        }
    }

    #[test]
    fn factors_are_bounded_and_fill_the_range() {
        let n = Noise::new(0.3, 200.0, 7);
        let factors: Vec<f64> = (0..10_000).map(|k| n.factor(k)).collect();
        let min = factors.iter().copied().fold(f64::INFINITY, f64::min);
        let max = factors.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert!((0.7..=1.3).contains(&min) && (0.7..=1.3).contains(&max));
        // Uniform: the extremes come close to the bounds, the mean close to 1.
        assert!(min < 0.71 && max > 1.29, "{min} {max}");
        let mean = factors.iter().sum::<f64>() / factors.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        // The same amplitude at 0.9 stays positive.
        let wide = Noise::new(0.9, 200.0, 7);
        assert!((0..10_000).all(|k| wide.factor(k) >= 0.1));
    }

    #[test]
    fn seeded_and_deterministic() {
        let run = |seed| {
            let mut n = Noise::new(0.3, 50.0, seed);
            (0..200).map(|_| n.step_ms(3.0)).collect::<Vec<f64>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn factor_holds_for_a_period_of_busy_time() {
        let mut n = Noise::new(0.3, 100.0, 3);
        let (f0, f1) = (n.factor(0), n.factor(1));
        // Steps starting in period 0 all take 10 ms x f0, until the clock passes 100.
        let mut clock = 0.0;
        while clock < 100.0 {
            let d = n.step_ms(10.0);
            assert_eq!(d, 10.0 * f0);
            clock += d;
        }
        assert_eq!(n.step_ms(10.0), 10.0 * f1);
        // A step longer than a period keeps the factor it started with.
        let mut long = Noise::new(0.3, 1.0, 3);
        assert_eq!(long.step_ms(50.0), 50.0 * long.factor(0));
        assert_eq!(long.period(), (50.0 * long.factor(0)) as u64);
    }
}
