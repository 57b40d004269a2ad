//! Cost at capacity against an API price (docs/decide.md, "From numbers to a decision", issue 5
//! item 3). From the capacity's output throughput `T` tok/s:
//! - cost per million output tokens = `price_per_hour / (T * 3600 / 1e6)`
//! - break-even output tok/s = `price_per_hour / price_per_m * 1e6 / 3600`
//! - break-even utilization = break-even tok/s / T
//! - effective cost per million = cost per million / utilization.

use serde_json::{json, Value};

use super::words::{dollars, num, opt_num, percent0, round_to, thousands};

/// Cost figures and the verdict in words. A figure that cannot be computed
/// (no throughput, no API price, no utilization) is `None`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Cost {
    pub capacity_output_tok_s: f64,
    pub gpu_price_per_hour: f64,
    pub api_price_per_m: Option<f64>,
    pub utilization: Option<f64>,
    /// At full use (utilization 1).
    pub cost_per_m_output: Option<f64>,
    pub break_even_output_tok_s: Option<f64>,
    pub break_even_utilization: Option<f64>,
    /// At the given utilization.
    pub effective_cost_per_m: Option<f64>,
    pub verdict: String,
}

impl Cost {
    /// The `cost` object of summary.json (docs/architecture.md section 5).
    pub(crate) fn to_json(&self) -> Value {
        let r4 = |x: Option<f64>| opt_num(x.map(|v| round_to(v, 4)));
        json!({
            "gpu_price_per_hour": num(self.gpu_price_per_hour),
            "api_price_per_m": opt_num(self.api_price_per_m),
            "cost_per_m_output": r4(self.cost_per_m_output),
            "break_even_output_tok_s": opt_num(self.break_even_output_tok_s.map(|v| round_to(v, 3))),
            "break_even_utilization": r4(self.break_even_utilization),
            "effective_cost_per_m": r4(self.effective_cost_per_m),
            "verdict": self.verdict,
        })
    }
}

fn positive(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v > 0.0)
}

/// "1.9x".
fn times(x: f64) -> String {
    format!("{x:.1}x")
}

/// The utilization an effective cost was figured at, read back from a
/// saved cost: `effective = full / utilization`, so `utilization = full /
/// effective`. summary.json keeps the two costs, not the share; the merge
/// and `tokbench view` recover it here.
pub(crate) fn utilization_of(
    cost_per_m: Option<f64>,
    effective_cost_per_m: Option<f64>,
) -> Option<f64> {
    match (cost_per_m, effective_cost_per_m) {
        (Some(full), Some(effective)) if effective > 0.0 => Some(full / effective),
        _ => None,
    }
}

/// Cost at `capacity_tok_s` output tok/s on a GPU rented at
/// `gpu_price_per_hour`, against an API at `api_price_per_m` dollars per
/// million output tokens, at `utilization` (a fraction in (0, 1]; anything
/// else is ignored).
pub(crate) fn cost(
    capacity_tok_s: f64,
    gpu_price_per_hour: f64,
    api_price_per_m: Option<f64>,
    utilization: Option<f64>,
) -> Cost {
    let price = positive(Some(gpu_price_per_hour));
    let api = positive(api_price_per_m);
    let util = positive(utilization).filter(|u| *u <= 1.0);
    let tput = positive(Some(capacity_tok_s));

    let cost_per_m_output = match (price, tput) {
        (Some(p), Some(t)) => Some(p / (t * 3600.0 / 1e6)),
        _ => None,
    };
    let break_even_output_tok_s = match (price, api) {
        (Some(p), Some(a)) => Some(p / a * 1e6 / 3600.0),
        _ => None,
    };
    let break_even_utilization = match (break_even_output_tok_s, tput) {
        (Some(b), Some(t)) => Some(b / t),
        _ => None,
    };
    let effective_cost_per_m = match (cost_per_m_output, util) {
        (Some(c), Some(u)) => Some(c / u),
        _ => None,
    };

    let verdict = match (cost_per_m_output, price) {
        (_, None) => "no cost: the GPU price per hour must be above 0".to_string(),
        (None, _) => "no cost: no output throughput at capacity".to_string(),
        (Some(full), Some(_)) => {
            let (own, at) = match (effective_cost_per_m, util) {
                (Some(e), Some(u)) => (e, format!("at {} utilization", percent0(u))),
                _ => (full, "at full use".to_string()),
            };
            match (api, break_even_utilization, break_even_output_tok_s) {
                (Some(a), Some(bu), Some(bt)) => {
                    let head = format!(
                        "self-hosting costs {}/M {at} vs the API's {}/M",
                        dollars(own),
                        dollars(a)
                    );
                    let even = if bu <= 1.0 {
                        format!("it breaks even above {} utilization", percent0(bu))
                    } else {
                        format!(
                            "it would need {} tok/s to break even, {} this capacity",
                            thousands(bt),
                            times(bu)
                        )
                    };
                    if own < a {
                        format!("{head}: {} cheaper; {even}", times(a / own))
                    } else if own > a {
                        format!("{head}: the API is {} cheaper; {even}", times(own / a))
                    } else {
                        format!("{head}: the same; {even}")
                    }
                }
                _ => {
                    let mut s = format!(
                        "self-hosting costs {}/M output tokens at full use",
                        dollars(full)
                    );
                    if let Some(u) = util {
                        s.push_str(&format!(
                            ", {}/M at {} utilization",
                            dollars(own),
                            percent0(u)
                        ));
                    }
                    s
                }
            }
        }
    };

    Cost {
        capacity_output_tok_s: capacity_tok_s,
        gpu_price_per_hour,
        api_price_per_m,
        utilization,
        cost_per_m_output,
        break_even_output_tok_s,
        break_even_utilization,
        effective_cost_per_m,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_cost_gives_back_its_utilization() {
        // $0.20 a million at full use, $0.40 effective: figured at 50%.
        assert_eq!(utilization_of(Some(0.2), Some(0.4)), Some(0.5));
        assert_eq!(utilization_of(Some(0.2), Some(0.0)), None);
        assert_eq!(utilization_of(None, Some(0.4)), None);
        assert_eq!(utilization_of(Some(0.2), None), None);
    }

    fn close(a: Option<f64>, b: f64, tol: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() <= tol)
    }

    #[test]
    fn article_figures() {
        // $4.47/h vs $0.65/M: 4.47 / 0.65 * 1e6 / 3600 = 6.876923 * 277.777 = 1910.256 tok/s.
        let c = cost(2000.0, 4.47, Some(0.65), None);
        assert!(close(c.break_even_output_tok_s, 1910.256, 0.001));
        // $2/h at 2,000 tok/s: 2000 * 3600 / 1e6 = 7.2 M tokens per hour -> 2/7.2 = $0.2778/M.
        let c = cost(2000.0, 2.0, None, None);
        assert!(close(c.cost_per_m_output, 0.27778, 0.00001));
        assert_eq!(
            c.verdict,
            "self-hosting costs $0.278/M output tokens at full use"
        );
        // At 500 tok/s: 1.8 M per hour -> 2/1.8 = $1.111/M.
        let c = cost(500.0, 2.0, None, None);
        assert!(close(c.cost_per_m_output, 1.1111, 0.0001));
        assert_eq!(c.break_even_output_tok_s, None);
        assert_eq!(c.effective_cost_per_m, None);
    }

    #[test]
    fn self_hosting_wins() {
        // $4.47/h at 3,650 tok/s: 13.14 M per hour -> $0.34018/M; the API's
        // $0.65 is 0.65 / 0.34018 = 1.91x dearer; break-even 1910.256 / 3650 = 52.3%.
        let c = cost(3650.0, 4.47, Some(0.65), None);
        assert!(close(c.cost_per_m_output, 0.34018, 0.00001));
        assert!(close(c.break_even_utilization, 0.52336, 0.00001));
        assert_eq!(
            c.verdict,
            "self-hosting costs $0.34/M at full use vs the API's $0.65/M: 1.9x cheaper; \
             it breaks even above 52% utilization"
        );
        // At 72% utilization: 0.34018 / 0.72 = $0.47248/M, 0.65 / 0.47248 = 1.38x.
        let c = cost(3650.0, 4.47, Some(0.65), Some(0.72));
        assert!(close(c.effective_cost_per_m, 0.47248, 0.00001));
        assert_eq!(
            c.verdict,
            "self-hosting costs $0.472/M at 72% utilization vs the API's $0.65/M: 1.4x cheaper; \
             it breaks even above 52% utilization"
        );
        let j = c.to_json();
        let mut keys: Vec<&String> = j
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        keys.sort();
        assert_eq!(
            keys,
            [
                "api_price_per_m",
                "break_even_output_tok_s",
                "break_even_utilization",
                "cost_per_m_output",
                "effective_cost_per_m",
                "gpu_price_per_hour",
                "verdict"
            ]
        );
        assert_eq!(j["cost_per_m_output"], json!(0.3402));
        assert_eq!(j["break_even_output_tok_s"], json!(1910.256));
    }

    #[test]
    fn the_api_wins() {
        // $2/h at 500 tok/s: $1.111/M vs $0.65/M -> the API is 1.111/0.65 = 1.71x
        // cheaper; break-even 2 / 0.65 * 1e6 / 3600 = 854.7 tok/s = 1.71x this capacity.
        let c = cost(500.0, 2.0, Some(0.65), None);
        assert!(close(c.break_even_output_tok_s, 854.70, 0.01));
        assert_eq!(
            c.verdict,
            "self-hosting costs $1.11/M at full use vs the API's $0.65/M: the API is 1.7x cheaper; \
             it would need 855 tok/s to break even, 1.7x this capacity"
        );
    }

    #[test]
    fn nothing_to_divide_gives_nulls_not_nan() {
        let c = cost(0.0, 2.0, Some(0.65), Some(0.5));
        assert_eq!(c.cost_per_m_output, None);
        assert_eq!(c.break_even_utilization, None);
        assert!(close(c.break_even_output_tok_s, 854.70, 0.01));
        assert_eq!(c.verdict, "no cost: no output throughput at capacity");
        let j = c.to_json();
        assert_eq!(j["cost_per_m_output"], Value::Null);
        assert_eq!(j["effective_cost_per_m"], Value::Null);
        let c = cost(1000.0, 0.0, Some(0.0), Some(7.0));
        assert_eq!(c.cost_per_m_output, None);
        assert_eq!(c.break_even_output_tok_s, None);
        assert_eq!(c.verdict, "no cost: the GPU price per hour must be above 0");
        assert!(!serde_json::to_string(&c.to_json())
            .unwrap_or_default()
            .contains("NaN"));
    }
}
