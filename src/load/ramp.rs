//! `--ramp linear|exponential --ramp-from R0 --ramp-to R1 --ramp-duration S`:
//! an open-loop level whose offered rate changes continuously from R0 to R1
//! requests per second over S seconds. The quickest way to find where a
//! server breaks: one ramp instead of a sweep of rates.
//!
//! The schedule is even in the ramp's own clock: with Λ(t) the requests
//! offered by time t (the rate's integral), request k goes out at
//! Λ⁻¹(k - ½). So a second holds exactly the requests its share of Λ says,
//! to within one, and the offered count per second is known before the run.

/// The shape of the rate over time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RampKind {
    /// r(t) = R0 + (R1 - R0) t / S.
    Linear,
    /// r(t) = R0 (R1 / R0)^(t / S): the same factor each second.
    Exponential,
}

impl RampKind {
    pub fn name(self) -> &'static str {
        match self {
            RampKind::Linear => "linear",
            RampKind::Exponential => "exponential",
        }
    }

    pub fn parse(s: &str) -> Option<RampKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "linear" => Some(RampKind::Linear),
            "exponential" | "exp" => Some(RampKind::Exponential),
            _ => None,
        }
    }
}

/// A ramp: its kind, its rates (requests per second) and its length.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ramp {
    pub kind: RampKind,
    pub from: f64,
    pub to: f64,
    pub duration_s: f64,
}

/// Most requests one ramp may schedule (every time is kept in memory).
const MAX_REQUESTS: f64 = 10_000_000.0;

impl Ramp {
    /// A ramp whose figures make sense, or what is wrong, in one line.
    pub fn new(kind: RampKind, from: f64, to: f64, duration_s: f64) -> Result<Ramp, String> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(from) || !positive(to) {
            return Err(format!(
                "--ramp-from and --ramp-to must be requests per second above 0 (given {from} and {to})"
            ));
        }
        if !positive(duration_s) || duration_s > 86_400.0 {
            return Err(format!(
                "--ramp-duration must be seconds above 0, at most a day (given {duration_s})"
            ));
        }
        let ramp = Ramp {
            kind,
            from,
            to,
            duration_s,
        };
        if ramp.offered_by(duration_s) > MAX_REQUESTS {
            return Err(format!(
                "the ramp would send {:.0} requests; at most {MAX_REQUESTS:.0}",
                ramp.offered_by(duration_s)
            ));
        }
        Ok(ramp)
    }

    /// The offered rate at `t` seconds into the ramp.
    pub fn rate_at(&self, t: f64) -> f64 {
        let x = (t / self.duration_s).clamp(0.0, 1.0);
        match self.kind {
            RampKind::Linear => self.from + (self.to - self.from) * x,
            RampKind::Exponential => self.from * (self.to / self.from).powf(x),
        }
    }

    /// Λ(t): requests offered from the start to `t`.
    pub fn offered_by(&self, t: f64) -> f64 {
        let t = t.clamp(0.0, self.duration_s);
        match self.kind {
            RampKind::Linear => {
                self.from * t + (self.to - self.from) * t * t / (2.0 * self.duration_s)
            }
            RampKind::Exponential => {
                let a = self.growth();
                if a.abs() < 1e-12 {
                    self.from * t
                } else {
                    self.from * ((a * t).exp() - 1.0) / a
                }
            }
        }
    }

    /// Λ⁻¹(n): when the n-th request (counted fractionally) is offered.
    fn time_of(&self, n: f64) -> f64 {
        let t = match self.kind {
            RampKind::Linear => {
                let slope = (self.to - self.from) / self.duration_s;
                if slope.abs() < 1e-12 {
                    n / self.from
                } else {
                    // slope/2 t² + from t - n = 0, the root at or after 0.
                    (-self.from + (self.from * self.from + 2.0 * slope * n).max(0.0).sqrt()) / slope
                }
            }
            RampKind::Exponential => {
                let a = self.growth();
                if a.abs() < 1e-12 {
                    n / self.from
                } else {
                    (1.0 + a * n / self.from).max(f64::MIN_POSITIVE).ln() / a
                }
            }
        };
        t.clamp(0.0, self.duration_s)
    }

    fn growth(&self) -> f64 {
        (self.to / self.from).ln() / self.duration_s
    }

    /// Every request's send time, seconds from the ramp's start.
    pub fn schedule(&self) -> Vec<f64> {
        let total = self.offered_by(self.duration_s);
        let n = total.round().max(1.0) as usize;
        (0..n)
            .map(|k| self.time_of((k as f64 + 0.5).min(total)))
            .collect()
    }

    /// What the level file says of it.
    /// A ramp as [`Ramp::to_json`] wrote it (a level file's
    /// `trace.ramp`); None for anything else.
    pub fn from_json(v: &serde_json::Value) -> Option<Ramp> {
        let kind = RampKind::parse(v.get("kind")?.as_str()?)?;
        let number = |key: &str| v.get(key).and_then(serde_json::Value::as_f64);
        Ramp::new(kind, number("from")?, number("to")?, number("duration_s")?).ok()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind.name(),
            "from": self.from,
            "to": self.to,
            "duration_s": self.duration_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 to 20 requests/s over 6 s: r(t) = 2 + 3t, Λ(t) = 2t + 1.5t², 66
    /// requests in all; second k offers Λ(k+1) - Λ(k) = 3.5 + 3k: 3.5, 6.5,
    /// 9.5, 12.5, 15.5, 18.5, so the schedule puts 3 or 4, 6 or 7, ... in
    /// each. The first goes at Λ⁻¹(0.5) = (-2 + sqrt(4 + 3)) / 3 = 0.2153 s.
    #[test]
    fn a_linear_ramp_worked_by_hand() {
        let r = Ramp::new(RampKind::Linear, 2.0, 20.0, 6.0).expect("ramp");
        assert!((r.rate_at(3.0) - 11.0).abs() < 1e-12);
        assert!((r.offered_by(6.0) - 66.0).abs() < 1e-9);
        let times = r.schedule();
        assert_eq!(times.len(), 66);
        assert!((times[0] - (7f64.sqrt() - 2.0) / 3.0).abs() < 1e-12);
        assert!(times.windows(2).all(|w| w[0] < w[1]));
        for (k, want) in [3.5, 6.5, 9.5, 12.5, 15.5, 18.5].iter().enumerate() {
            let n = times
                .iter()
                .filter(|t| **t >= k as f64 && **t < k as f64 + 1.0)
                .count() as f64;
            assert!((n - want).abs() <= 0.5 + 1e-9, "second {k}: {n} for {want}");
        }
    }

    /// 1 to 16 requests/s over 4 s, exponential: the rate doubles each
    /// second (1, 2, 4, 8, 16); Λ(4) = (16 - 1) / ln 2 = 21.64, so 22
    /// requests; second k offers 2^k / ln 2: 1.44, 2.89, 5.77, 11.54.
    #[test]
    fn an_exponential_ramp_doubles_each_second() {
        let r = Ramp::new(RampKind::Exponential, 1.0, 16.0, 4.0).expect("ramp");
        assert!((r.rate_at(2.0) - 4.0).abs() < 1e-9);
        assert!((r.offered_by(4.0) - 15.0 / 2f64.ln()).abs() < 1e-9);
        let times = r.schedule();
        assert_eq!(times.len(), 22);
        for k in 0..4 {
            let want = 2f64.powi(k) / 2f64.ln();
            let n = times
                .iter()
                .filter(|t| **t >= f64::from(k) && **t < f64::from(k) + 1.0)
                .count() as f64;
            assert!((n - want).abs() <= 1.0, "second {k}: {n} for {want}");
        }
        // A flat "ramp" is an even rate.
        let flat = Ramp::new(RampKind::Exponential, 5.0, 5.0, 2.0).expect("ramp");
        assert_eq!(flat.schedule().len(), 10);
        assert!((flat.schedule()[0] - 0.1).abs() < 1e-12);
    }

    #[test]
    fn bad_ramps_say_what_is_wrong() {
        assert!(Ramp::new(RampKind::Linear, 0.0, 5.0, 1.0)
            .expect_err("refused")
            .starts_with("--ramp-from and --ramp-to must be"));
        assert!(Ramp::new(RampKind::Linear, 1.0, f64::NAN, 1.0).is_err());
        assert!(Ramp::new(RampKind::Linear, 1.0, 5.0, 0.0)
            .expect_err("refused")
            .starts_with("--ramp-duration must be"));
        assert!(Ramp::new(RampKind::Linear, 1e6, 1e6, 86_400.0)
            .expect_err("refused")
            .contains("at most 10000000"));
        assert_eq!(RampKind::parse("Exponential"), Some(RampKind::Exponential));
        assert_eq!(RampKind::parse("sine"), None);
    }
}
