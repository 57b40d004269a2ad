//! Prometheus text exposition format (what `/metrics` of vLLM, llama.cpp's
//! `llama-server --metrics`, SGLang and TGI answer), parsed into samples.
//!
//! ```text
//! # HELP vllm:num_requests_running Number of requests in model execution batches.
//! # TYPE vllm:num_requests_running gauge
//! vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 32.0
//! llamacpp:requests_processing 0 1718000000000
//! ```
//!
//! - A sample line is `name{label="value",...} value [timestamp]`; the
//!   label set is optional, a trailing comma in it is allowed, label values
//!   may hold `\\`, `\"` and `\n` escapes (another backslash pair is kept as
//!   it stands). Metric and label names may also be quoted (Prometheus 3's
//!   UTF-8 names: `{"my.metric",label="v"} 1`).
//! - Values are floats, `NaN`, `+Inf`, `-Inf`; the timestamp is integer
//!   milliseconds. An OpenMetrics exemplar (`# {..} v`) after the value is
//!   ignored.
//! - `# HELP` lines are skipped, `# TYPE` lines recorded, other `#` lines are
//!   comments. Blank lines are skipped. Line ends are `\n` or `\r\n`.
//! - Any other line is garbage: skipped and counted in `Metrics::skipped`,
//!   never a panic and never an error. A scrape is a best-effort reading.
//!
//! Output is bounded: at most `MAX_SAMPLES` samples are kept per parse (the
//! rest are counted in `skipped`). The caller bounds the body it reads.

use std::fmt;

/// Most samples kept from one body. vLLM's full `/metrics` holds a few
/// thousand (histogram buckets included).
pub const MAX_SAMPLES: usize = 100_000;

/// One line of data: a metric name, its labels, its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In the order the server wrote them.
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Milliseconds since the epoch, when the server gave one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the sample has every `(label, value)` pair given.
    pub(crate) fn matches(&self, labels: &[(&str, &str)]) -> bool {
        labels.iter().all(|(k, v)| self.label(k) == Some(*v))
    }
}

/// A metric family's `# TYPE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    /// `untyped`, `unknown`, or a type this parser does not know
    /// (OpenMetrics `info`, `stateset`, `gaugehistogram`).
    Untyped,
}

impl MetricType {
    fn parse(s: &str) -> MetricType {
        match s {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            _ => MetricType::Untyped,
        }
    }
}

/// Everything one scrape said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    /// In the order of the body.
    pub samples: Vec<Sample>,
    /// Lines that were neither blank, a comment nor a sample (plus any
    /// samples beyond `MAX_SAMPLES`).
    pub skipped: usize,
    /// `# TYPE` lines: family name and type, in order.
    types: Vec<(String, MetricType)>,
}

impl fmt::Display for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} samples, {} lines skipped",
            self.samples.len(),
            self.skipped
        )
    }
}

/// Parse a `/metrics` body. Never fails: what cannot be read is counted in
/// `skipped`.
pub fn parse(text: &str) -> Metrics {
    let mut m = Metrics::default();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = line.trim_start_matches([' ', '\t']);
        if line.trim_end().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            m.comment(comment);
            continue;
        }
        match parse_sample(line) {
            Some(sample) if m.samples.len() < MAX_SAMPLES => m.samples.push(sample),
            _ => m.skipped += 1,
        }
    }
    m
}

/// `parse` for raw bytes; bytes that are not UTF-8 become U+FFFD (such a
/// line most likely still parses, with a mangled label value).
pub fn parse_bytes(body: &[u8]) -> Metrics {
    parse(&String::from_utf8_lossy(body))
}

impl Metrics {
    fn comment(&mut self, comment: &str) {
        let mut words = comment.split_ascii_whitespace();
        if words.next() == Some("TYPE") {
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                self.types.push((name.to_owned(), MetricType::parse(kind)));
            }
        }
    }

    /// The `# TYPE` of family `name`, if the body declared one.
    pub fn metric_type(&self, name: &str) -> Option<MetricType> {
        self.types.iter().find(|(n, _)| n == name).map(|(_, t)| *t)
    }

    /// Every sample named `name` (all label sets).
    pub(crate) fn samples_named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The first sample named `name` whose value is a number (not NaN).
    pub fn value(&self, name: &str) -> Option<f64> {
        self.value_where(name, &[])
    }

    /// The first sample named `name` with all the given labels, not NaN.
    pub fn value_where(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples_named(name)
            .filter(|s| s.matches(labels))
            .map(|s| s.value)
            .find(|v| !v.is_nan())
    }

    /// The sum over every label set of `name` (several models or engines),
    /// NaN samples left out. None when there is no such sample.
    pub fn sum(&self, name: &str) -> Option<f64> {
        self.sum_where(name, &[])
    }

    /// `sum` over the samples that have all the given labels.
    pub fn sum_where(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.fold(name, labels, |a, b| a + b)
    }

    /// The largest value over every label set of `name`, NaN left out.
    pub fn max(&self, name: &str) -> Option<f64> {
        self.fold(name, &[], f64::max)
    }

    fn fold(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        f: impl Fn(f64, f64) -> f64,
    ) -> Option<f64> {
        self.samples_named(name)
            .filter(|s| s.matches(labels))
            .map(|s| s.value)
            .filter(|v| !v.is_nan())
            .reduce(f)
    }

    /// Whether any sample's name starts with `prefix` (`"vllm:"`,
    /// `"llamacpp:"`): which engine answered.
    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.samples.iter().any(|s| s.name.starts_with(prefix))
    }
}

// ---------------------------------------------------------------------------
// One sample line. A small cursor over the bytes; every delimiter is ASCII,
// so slicing at them always lands on a char boundary.

struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    /// Skip spaces and tabs; how many were skipped.
    fn skip_ws(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
        self.at - start
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*` (colons only when `colons`).
    fn ident(&mut self, colons: bool) -> Option<&'a str> {
        let start = self.at;
        while let Some(b) = self.peek() {
            let ok = b.is_ascii_alphabetic()
                || b == b'_'
                || (colons && b == b':')
                || (self.at > start && b.is_ascii_digit());
            if !ok {
                break;
            }
            self.at += 1;
        }
        (self.at > start).then(|| &self.s[start..self.at])
    }

    /// A `"..."` string with `\\`, `\"`, `\n` escapes; the cursor is on the
    /// opening quote. None when it never closes.
    fn quoted(&mut self) -> Option<String> {
        if !self.eat(b'"') {
            return None;
        }
        let mut out = String::new();
        let mut run = self.at;
        loop {
            match self.peek()? {
                b'"' => {
                    out.push_str(&self.s[run..self.at]);
                    self.at += 1;
                    return Some(out);
                }
                b'\\' => {
                    out.push_str(&self.s[run..self.at]);
                    self.at += 1;
                    match self.peek()? {
                        b'\\' => out.push('\\'),
                        b'"' => out.push('"'),
                        b'n' => out.push('\n'),
                        // Unknown escape: keep the backslash; the next
                        // character is copied as part of the run.
                        _ => {
                            out.push('\\');
                            run = self.at;
                            continue;
                        }
                    }
                    self.at += 1;
                    run = self.at;
                }
                _ => self.at += 1,
            }
        }
    }

    /// The next run of non-blank characters.
    fn token(&mut self) -> Option<&'a str> {
        let start = self.at;
        while matches!(self.peek(), Some(b) if b != b' ' && b != b'\t') {
            self.at += 1;
        }
        (self.at > start).then(|| &self.s[start..self.at])
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let mut c = Cursor { s: line, at: 0 };
    let mut name = c.ident(true).map(str::to_owned);
    c.skip_ws();
    let mut labels = Vec::new();
    if c.eat(b'{') {
        loop {
            c.skip_ws();
            if c.eat(b'}') {
                break;
            }
            let key = match c.peek() {
                Some(b'"') => c.quoted()?,
                _ => c.ident(false)?.to_owned(),
            };
            c.skip_ws();
            if c.eat(b'=') {
                c.skip_ws();
                let value = c.quoted()?;
                labels.push((key, value));
            } else if name.is_none() {
                // A quoted metric name inside the braces.
                name = Some(key);
            } else {
                return None;
            }
            c.skip_ws();
            if !c.eat(b',') {
                c.skip_ws();
                if !c.eat(b'}') {
                    return None;
                }
                break;
            }
        }
        if c.skip_ws() == 0 {
            return None;
        }
    } else if c.at == 0 || !line[..c.at].ends_with([' ', '\t']) {
        // No name, or a name glued to its value.
        return None;
    }
    let name = name.filter(|n| !n.is_empty())?;
    let value = parse_value(c.token()?)?;
    c.skip_ws();
    let timestamp_ms = match c.peek() {
        None | Some(b'#') => None,
        Some(_) => Some(c.token()?.parse::<i64>().ok()?),
    };
    c.skip_ws();
    if !matches!(c.peek(), None | Some(b'#')) {
        return None;
    }
    Some(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// A Go-style float: `NaN`, `+Inf`, `-Inf`, `Inf`, decimal and exponent
/// forms. Rust's parser accepts all of these (and `infinity`, case aside).
fn parse_value(token: &str) -> Option<f64> {
    token.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Option<Sample> {
        let m = parse(line);
        assert!(m.samples.len() + m.skipped <= 1, "{m:?}");
        m.samples.into_iter().next()
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn sample_shapes() {
        let s = one("llamacpp:requests_processing 3").unwrap();
        assert_eq!(s.name, "llamacpp:requests_processing");
        assert!(s.labels.is_empty());
        assert_eq!(s.value, 3.0);
        assert_eq!(s.timestamp_ms, None);

        let s = one(
            r#"vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 32.0 1718000000123"#,
        )
        .unwrap();
        assert_eq!(
            s.labels,
            labels(&[("engine", "0"), ("model_name", "Qwen/Qwen3-8B")])
        );
        assert_eq!(s.value, 32.0);
        assert_eq!(s.timestamp_ms, Some(1_718_000_000_123));
        assert_eq!(s.label("model_name"), Some("Qwen/Qwen3-8B"));
        assert_eq!(s.label("nope"), None);

        // Empty label set, trailing comma, spaces everywhere they may be,
        // negative timestamp, CRLF, tabs.
        assert_eq!(one("a{} 1").unwrap().labels, vec![]);
        let s = one("a { x = \"1\" , y=\"2\", } \t 2.5e+3 -5\r").unwrap();
        assert_eq!(s.labels, labels(&[("x", "1"), ("y", "2")]));
        assert_eq!(s.value, 2500.0);
        assert_eq!(s.timestamp_ms, Some(-5));
    }

    #[test]
    fn special_values() {
        assert!(one("a NaN").unwrap().value.is_nan());
        assert_eq!(one("a +Inf").unwrap().value, f64::INFINITY);
        assert_eq!(one("a -Inf").unwrap().value, f64::NEG_INFINITY);
        assert_eq!(one("a Inf").unwrap().value, f64::INFINITY);
        assert_eq!(one("a -0.5").unwrap().value, -0.5);
        assert_eq!(one("a 1e-3").unwrap().value, 0.001);
        let s = one(r#"h_bucket{le="+Inf"} 996"#).unwrap();
        assert_eq!(s.label("le"), Some("+Inf"));
    }

    #[test]
    fn escaped_and_unicode_label_values() {
        let s = one(r#"a{path="C:\\dir\\f",q="say \"hi\"",nl="1\n2",odd="\t\x",u="世界 🦀"} 1"#)
            .unwrap();
        assert_eq!(s.label("path"), Some(r"C:\dir\f"));
        assert_eq!(s.label("q"), Some(r#"say "hi""#));
        assert_eq!(s.label("nl"), Some("1\n2"));
        assert_eq!(s.label("odd"), Some(r"\t\x"));
        assert_eq!(s.label("u"), Some("世界 🦀"));
        // Braces, commas and `=` inside a value are data.
        let s = one(r#"a{v="{x=1,y}"} 7"#).unwrap();
        assert_eq!(s.label("v"), Some("{x=1,y}"));
    }

    #[test]
    fn quoted_utf8_names_and_exemplars() {
        let s = one(r#"{"my.metric","my.label"="v"} 4"#).unwrap();
        assert_eq!(s.name, "my.metric");
        assert_eq!(s.labels, labels(&[("my.label", "v")]));
        let s = one(r#"foo_bucket{le="0.5"} 3 # {trace_id="abc"} 0.3 1520879607.789"#).unwrap();
        assert_eq!(s.value, 3.0);
        assert_eq!(s.timestamp_ms, None);
    }

    #[test]
    fn comments_types_and_blank_lines() {
        let m = parse(
            "# HELP a Some help, with {braces} and \"quotes\"\n# TYPE a counter\n\n   \n#plain comment\n# TYPE b gauge extra\n# TYPE c histogram\n# TYPE d weird\n# EOF\na 1\n",
        );
        assert_eq!(m.samples.len(), 1);
        assert_eq!(m.skipped, 0);
        assert_eq!(m.metric_type("a"), Some(MetricType::Counter));
        assert_eq!(m.metric_type("b"), Some(MetricType::Gauge));
        assert_eq!(m.metric_type("c"), Some(MetricType::Histogram));
        assert_eq!(m.metric_type("d"), Some(MetricType::Untyped));
        assert_eq!(m.metric_type("e"), None);
    }

    #[test]
    fn garbage_lines_are_skipped_and_counted() {
        let garbage = [
            "justaname",
            "a",
            "a{x=\"1\"}",
            "a{x=\"1\"}2",
            "a1x",
            "1a 2",
            "a notanumber",
            "a 1 notatimestamp",
            "a 1 2 3",
            "a 1 1.5",
            "a{x=\"unterminated} 1",
            "a{x=1} 1",
            "a{x} 1",
            "a{\"q\",\"r\"} 1",
            "a{x=\"1\" y=\"2\"} 1",
            "a{=\"1\"} 1",
            "{} 1",
            "{x=\"1\"} 1",
            "<html><body>502 Bad Gateway</body></html>",
            "a{x=\"1\\",
            "a{",
            "a\u{0}b 1",
        ];
        let mut body = String::from("good 1\n");
        for g in garbage {
            assert_eq!(one(g), None, "{g:?} parsed");
            body.push_str(g);
            body.push('\n');
        }
        body.push_str("good 2\n");
        let m = parse(&body);
        assert_eq!(m.skipped, garbage.len());
        assert_eq!(m.sum("good"), Some(3.0));
        assert_eq!(
            m.to_string(),
            format!("2 samples, {} lines skipped", garbage.len())
        );
    }

    #[test]
    fn never_panics_on_noise() {
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let alphabet = "ab_:{}=\",\\ \t\n\r#+-.e1NaInf世\u{0}";
        let chars: Vec<char> = alphabet.chars().collect();
        let mut text = String::new();
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push(chars[(x % chars.len() as u64) as usize]);
        }
        let m = parse(&text);
        assert!(m.samples.len() + m.skipped <= text.lines().count());
        let _ = parse_bytes(&[0xFF, b'a', b' ', b'1', b'\n', 0xC3]);
        for cut in (0..text.len()).step_by(97) {
            if text.is_char_boundary(cut) {
                let _ = parse(&text[..cut]);
            }
        }
    }

    #[test]
    fn lookups_over_labels() {
        let m = parse(concat!(
            "x{model=\"a\",engine=\"0\"} 1\n",
            "x{model=\"a\",engine=\"1\"} 2\n",
            "x{model=\"b\",engine=\"0\"} 4\n",
            "x{model=\"c\",engine=\"0\"} NaN\n",
            "y NaN\n",
            "z 0\n",
        ));
        assert_eq!(m.value("x"), Some(1.0));
        assert_eq!(m.sum("x"), Some(7.0));
        assert_eq!(m.max("x"), Some(4.0));
        assert_eq!(m.sum_where("x", &[("model", "a")]), Some(3.0));
        assert_eq!(
            m.value_where("x", &[("model", "a"), ("engine", "1")]),
            Some(2.0)
        );
        assert_eq!(m.value_where("x", &[("model", "c")]), None);
        assert_eq!(m.sum_where("x", &[("model", "nope")]), None);
        assert_eq!(m.value("y"), None);
        assert_eq!(m.sum("y"), None);
        assert_eq!(m.value("z"), Some(0.0));
        assert_eq!(m.sum("missing"), None);
        assert_eq!(m.samples_named("x").count(), 4);
        assert!(m.has_prefix("x"));
        assert!(!m.has_prefix("vllm:"));
    }

    #[test]
    fn sample_cap_bounds_the_output() {
        let body = "a 1\n".repeat(MAX_SAMPLES + 5);
        let m = parse(&body);
        assert_eq!(m.samples.len(), MAX_SAMPLES);
        assert_eq!(m.skipped, 5);
    }
}
