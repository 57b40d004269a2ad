//! Traffic shape: length presets (`--profile`), per-request length spread
//! (`--random-range-ratio`), where the prompt text comes from
//! (`--prompt-source`, `--dataset`), and the achieved lengths as recorded.

use std::sync::Arc;

use serde_json::{json, Value};

use super::corpus::Corpus;
use super::dataset::Dataset;
use super::rng::Rng;

/// A preset of input/output length (`--profile`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// 1024 in / 1024 out (the default lengths).
    Balanced,
    /// 4000 in / 50 out: long prompts, short answers (RAG, classification).
    PrefillHeavy,
    /// 200 in / 2000 out: short prompts, long answers (writing, reasoning).
    DecodeHeavy,
    /// 512 in / 256 out: a chat turn.
    Chat,
}

impl Profile {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Profile::Balanced => "balanced",
            Profile::PrefillHeavy => "prefill-heavy",
            Profile::DecodeHeavy => "decode-heavy",
            Profile::Chat => "chat",
        }
    }

    /// `(input tokens, output tokens)`.
    pub(crate) fn lengths(self) -> (u32, u32) {
        match self {
            Profile::Balanced => (1024, 1024),
            Profile::PrefillHeavy => (4000, 50),
            Profile::DecodeHeavy => (200, 2000),
            Profile::Chat => (512, 256),
        }
    }

    /// The preset these lengths are, if any.
    #[cfg(test)]
    pub(crate) fn of_lengths(input: u32, output: u32) -> Option<Profile> {
        [
            Profile::Balanced,
            Profile::PrefillHeavy,
            Profile::DecodeHeavy,
            Profile::Chat,
        ]
        .into_iter()
        .find(|p| p.lengths() == (input, output))
    }
}

/// Where a prompt's words come from (`--prompt-source`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PromptSource {
    /// Common English words in random order (the default; steady tokens per word).
    #[default]
    Random,
    /// Generated English-like prose: Zipf word frequencies, sentences, paragraphs.
    Prose,
    /// Passages cut from the text file given with `--corpus`.
    Corpus,
}

impl PromptSource {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PromptSource::Random => "random",
            PromptSource::Prose => "prose",
            PromptSource::Corpus => "corpus",
        }
    }
}

/// `profile chat`: a title's words for the run's profile, only where a
/// named profile set its lengths. `custom` (lengths given without a
/// profile), or a file that does not say, is no profile: the lengths
/// beside it say all.
pub(crate) fn profile_words(name: Option<&str>) -> Option<String> {
    name.filter(|n| !n.is_empty() && *n != "custom" && *n != "?")
        .map(|n| format!("profile {n}"))
}

/// Input and output lengths after the flags: a `--profile` preset, each
/// length replaced by an explicit `--random-input-len`/`--random-output-len`.
/// Returns `(input, output, profile name)`; the name is the preset's, or
/// `balanced` when no preset was named and the lengths are the default
/// 1024/1024, or `custom`.
pub(crate) fn resolve_lengths(
    profile: Option<Profile>,
    input: Option<u32>,
    output: Option<u32>,
) -> (u32, u32, String) {
    let (base_in, base_out) = profile.unwrap_or(Profile::Balanced).lengths();
    let (i, o) = (input.unwrap_or(base_in), output.unwrap_or(base_out));
    let name = match profile {
        Some(p) => p.name().to_string(),
        None if (i, o) == Profile::Balanced.lengths() => "balanced".into(),
        None => "custom".into(),
    };
    (i, o, name)
}

/// The lengths `--random-range-ratio r` draws from around `L`: from
/// `floor(L(1-r))` (at least 1) to `floor(L(1+r))`, both included, as vLLM
/// draws them. What the
/// requests get (`draw_len`) and what a report declares they got
/// (`report --format br`) both come from here.
pub(crate) fn len_bounds(base: u32, ratio: f64) -> (u32, u32) {
    if ratio.is_nan() || ratio <= 0.0 || base == 0 {
        return (base, base);
    }
    let lo = (f64::from(base) * (1.0 - ratio)).floor().max(1.0) as u64;
    let hi = ((f64::from(base) * (1.0 + ratio)).floor() as u64).max(lo);
    let to_u32 = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    (to_u32(lo), to_u32(hi))
}

/// A length drawn uniformly from [`len_bounds`], as vLLM's
/// `--random-range-ratio`. `r = 0` gives `L` and draws nothing.
pub(crate) fn draw_len(rng: &mut Rng, base: u32, ratio: f64) -> u32 {
    if ratio.is_nan() || ratio <= 0.0 || base == 0 {
        return base;
    }
    // A range of one length still draws, so a seed's later draws stay put.
    let (lo, hi) = len_bounds(base, ratio);
    lo + rng.below((hi - lo) as usize + 1) as u32
}

/// Everything of the traffic shape beyond the two lengths, settled from the
/// flags before the run (`SweepPlan::traffic`).
#[derive(Clone, Debug, Default)]
pub struct Traffic {
    /// `balanced`, `prefill-heavy`, `decode-heavy`, `chat`, `custom`, or `dataset`.
    pub profile: String,
    /// `--random-range-ratio`, in [0, 1).
    pub range_ratio: f64,
    pub source: PromptSource,
    /// `--corpus`, loaded.
    pub corpus: Option<Arc<Corpus>>,
    /// `--dataset`, loaded and checked.
    pub dataset: Option<Arc<Dataset>>,
    /// `--random-output-len` was given on the command line (it then wins
    /// over a ShareGPT answer's length hint).
    pub output_len_explicit: bool,
    /// `--save-prompts`: requests.jsonl gets each request's prompt text.
    pub save_prompts: bool,
}

impl Traffic {
    /// The run-level keys of `summary.json`'s `run` object.
    pub(crate) fn run_json(&self) -> Value {
        json!({
            "range_ratio": self.range_ratio,
            "prompt_source": if self.dataset.is_some() { "dataset" } else { self.source.as_str() },
            "corpus": self.corpus.as_ref().map(|c| c.name.clone()),
            "dataset": self.dataset.as_ref().map(|d| d.name.clone()),
            "save_prompts": self.save_prompts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_overrides() {
        assert_eq!(
            resolve_lengths(None, None, None),
            (1024, 1024, "balanced".into())
        );
        assert_eq!(
            resolve_lengths(Some(Profile::Chat), None, None),
            (512, 256, "chat".into())
        );
        assert_eq!(
            resolve_lengths(Some(Profile::PrefillHeavy), None, None),
            (4000, 50, "prefill-heavy".into())
        );
        assert_eq!(
            resolve_lengths(Some(Profile::DecodeHeavy), None, None),
            (200, 2000, "decode-heavy".into())
        );
        // An explicit length replaces the preset's, the other stays.
        assert_eq!(
            resolve_lengths(Some(Profile::Chat), None, Some(100)),
            (512, 100, "chat".into())
        );
        // No preset named: the old rule, balanced only at 1024/1024.
        assert_eq!(
            resolve_lengths(None, Some(128), None),
            (128, 1024, "custom".into())
        );
        assert_eq!(
            resolve_lengths(None, Some(1024), Some(1024)),
            (1024, 1024, "balanced".into())
        );
        assert_eq!(Profile::of_lengths(512, 256), Some(Profile::Chat));
        assert_eq!(Profile::of_lengths(512, 257), None);
    }

    #[test]
    fn range_ratio_bounds_and_mean() {
        // L = 512, r = 0.5: [256, 768], mean 512.
        let mut rng = Rng::new(1);
        let draws: Vec<u32> = (0..20_000).map(|_| draw_len(&mut rng, 512, 0.5)).collect();
        assert_eq!(*draws.iter().min().unwrap(), 256);
        assert_eq!(*draws.iter().max().unwrap(), 768);
        let mean = draws.iter().map(|&d| f64::from(d)).sum::<f64>() / draws.len() as f64;
        // Standard error: 148 / sqrt(20000) = 1.05; 5 is almost 5 of them.
        assert!((mean - 512.0).abs() < 5.0, "mean {mean}");
        // L = 10, r = 0.25: [7.5, 12.5] -> 7..=12.
        let draws: Vec<u32> = (0..5_000).map(|_| draw_len(&mut rng, 10, 0.25)).collect();
        assert_eq!(*draws.iter().min().unwrap(), 7);
        assert_eq!(*draws.iter().max().unwrap(), 12);
        // Never below 1: L = 1, r = 0.9 -> [0.1, 1.9] -> 1..=1.
        assert!((0..100).all(|_| draw_len(&mut rng, 1, 0.9) == 1));
        // The bounds themselves, worked by hand: L = 100, r = 0.333 gives
        // [66.7, 133.3] -> 66..=133; L = 1, r = 0.5 gives [0.5, 1.5] -> 1..=1.
        assert_eq!(len_bounds(100, 0.333), (66, 133));
        assert_eq!(len_bounds(1, 0.5), (1, 1));
        assert_eq!(len_bounds(300, 0.0), (300, 300));
        // r = 0 draws nothing and gives L.
        let before = rng.clone().next_u64();
        assert_eq!(draw_len(&mut rng, 300, 0.0), 300);
        assert_eq!(rng.next_u64(), before);
    }
}
