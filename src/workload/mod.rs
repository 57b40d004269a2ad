//! Prompts: unique from their first token, of a calibrated token length.
//!
//! Prompt length is counted in words and converted to server tokens by a
//! linear model `tokens = tokens_per_word * words + overhead`, where the
//! overhead is what the chat template adds. The model starts from a guess
//! (one token per word, or the server's `/tokenize`) and is fitted on what the
//! server reports for the warmup requests (`usage.prompt_tokens`).

pub(crate) mod corpus;
pub(crate) mod dataset;
pub(crate) mod profile;
pub(crate) mod prose;
pub(crate) mod rng;

use std::sync::Arc;

pub(crate) use dataset::{ChatMessage, Dataset};
pub(crate) use profile::{Profile, PromptSource, Traffic};
use rng::Rng;

/// The longest prompt or answer, in tokens, a flag, a dataset or a replay
/// log may ask for: more is a typo, not a workload.
pub(crate) const MAX_LEN_TOKENS: u32 = 10_000_000;

/// A length key of a dataset or replay line: absent or `null` is no length;
/// a whole number from 1 to [`MAX_LEN_TOKENS`] is one; anything else is
/// refused with what a length must be, and the caller names the line.
pub(crate) fn length_field(value: Option<&serde_json::Value>) -> Result<Option<u32>, String> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=u64::from(MAX_LEN_TOKENS)).contains(n))
            .map(|n| Some(n as u32))
            .ok_or_else(|| {
                format!(
                    "a whole number from 1 to {}",
                    crate::fmt::group(f64::from(MAX_LEN_TOKENS), 0)
                )
            }),
    }
}

/// Common English words that most BPE vocabularies hold as one token each
/// (with their leading space), so the word count maps to tokens steadily.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "she",
    "other",
    "its",
    "may",
    "these",
    "what",
    "them",
    "than",
    "some",
    "him",
    "time",
    "into",
    "only",
    "do",
    "our",
    "could",
    "new",
    "about",
    "two",
    "then",
    "first",
    "also",
    "any",
    "like",
    "my",
    "made",
    "over",
    "such",
    "did",
    "many",
    "after",
    "most",
    "where",
    "those",
    "me",
    "through",
    "well",
    "should",
    "good",
    "each",
    "years",
    "work",
    "way",
    "because",
    "long",
    "very",
    "day",
    "used",
    "just",
    "how",
    "much",
    "before",
    "own",
    "great",
    "same",
    "under",
    "life",
    "world",
    "while",
    "last",
    "might",
    "never",
    "back",
    "people",
    "three",
    "state",
    "see",
    "old",
    "year",
    "little",
    "between",
    "place",
    "must",
    "being",
    "both",
    "part",
    "still",
    "down",
    "water",
    "house",
    "light",
    "river",
    "stone",
    "music",
    "garden",
    "market",
    "paper",
    "window",
    "table",
    "school",
    "city",
    "night",
    "morning",
    "road",
    "field",
    "story",
    "family",
    "power",
    "money",
    "service",
    "group",
    "system",
    "number",
    "point",
    "hand",
    "home",
    "line",
    "book",
    "word",
    "side",
    "head",
    "case",
    "week",
    "company",
    "country",
    "problem",
    "question",
    "area",
    "job",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "game",
    "name",
    "program",
    "government",
    "door",
    "body",
    "face",
    "idea",
    "kind",
    "war",
    "law",
    "car",
    "child",
    "mind",
    "sound",
    "color",
    "sea",
    "tree",
    "sun",
    "moon",
    "wind",
    "rain",
    "snow",
    "fire",
    "earth",
    "air",
    "bird",
    "dog",
    "horse",
    "fish",
    "ship",
    "train",
    "plane",
    "bridge",
    "tower",
    "island",
    "forest",
    "valley",
    "mountain",
    "lake",
    "hill",
    "street",
    "village",
    "letter",
    "picture",
    "voice",
    "reason",
    "answer",
    "change",
    "plan",
    "order",
    "rest",
    "note",
    "step",
    "turn",
    "move",
    "start",
    "open",
    "close",
    "hold",
    "bring",
    "write",
    "read",
    "speak",
    "learn",
    "grow",
    "build",
    "carry",
    "watch",
    "follow",
    "stand",
];

/// Prompt length model: `tokens = tokens_per_word * words + overhead_tokens`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    pub tokens_per_word: f64,
    pub overhead_tokens: f64,
    /// The slope came from the server's own tokenizer (`/tokenize` of raw
    /// text), so a fit on one prompt length only needs the template's share.
    pub slope_from_tokenizer: bool,
}

impl Default for Calibration {
    /// The guess before the server says anything: a word is a token, no template.
    fn default() -> Self {
        Calibration {
            tokens_per_word: 1.0,
            overhead_tokens: 0.0,
            slope_from_tokenizer: false,
        }
    }
}

impl Calibration {
    /// Words needed for a prompt of `target_tokens` server tokens (at least 1).
    pub(crate) fn words_for(&self, target_tokens: u32) -> usize {
        let words = (target_tokens as f64 - self.overhead_tokens) / self.tokens_per_word;
        if words.is_finite() && words >= 1.0 {
            words.round() as usize
        } else {
            1
        }
    }

    /// The server tokens a prompt of `words` words should come to, template
    /// included: what a dataset's or a replay's own text is expected to
    /// count (at least 1; the word count when the model is not finite).
    pub(crate) fn tokens_for(&self, words: usize) -> u32 {
        let estimate = self.tokens_per_word * words as f64 + self.overhead_tokens;
        if estimate.is_finite() {
            estimate.round().clamp(1.0, f64::from(u32::MAX)) as u32
        } else {
            u32::try_from(words).unwrap_or(u32::MAX)
        }
    }

    /// Fit the model on `(words sent, prompt tokens the server reported)`.
    ///
    /// With two or more distinct word counts this is a least-squares line.
    /// With one, a slope measured by the server's tokenizer is kept and only
    /// the template overhead is fitted; otherwise the overhead is kept from
    /// `prior` and only the slope is fitted. Returns None when the samples cannot give a sane model (no
    /// samples, a non-positive slope).
    pub(crate) fn fit(samples: &[(usize, u32)], prior: Calibration) -> Option<Calibration> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        let mean_x = samples.iter().map(|s| s.0 as f64).sum::<f64>() / n;
        let mean_y = samples.iter().map(|s| s.1 as f64).sum::<f64>() / n;
        let sxx: f64 = samples.iter().map(|s| (s.0 as f64 - mean_x).powi(2)).sum();
        let fitted = if sxx > 0.0 {
            let sxy: f64 = samples
                .iter()
                .map(|s| (s.0 as f64 - mean_x) * (s.1 as f64 - mean_y))
                .sum();
            let slope = sxy / sxx;
            Calibration {
                tokens_per_word: slope,
                overhead_tokens: (mean_y - slope * mean_x).max(0.0),
                slope_from_tokenizer: false,
            }
        } else if prior.slope_from_tokenizer && mean_y >= prior.tokens_per_word * mean_x {
            Calibration {
                overhead_tokens: mean_y - prior.tokens_per_word * mean_x,
                ..prior
            }
        } else {
            Calibration {
                tokens_per_word: (mean_y - prior.overhead_tokens) / mean_x,
                overhead_tokens: prior.overhead_tokens,
                slope_from_tokenizer: false,
            }
        };
        (fitted.tokens_per_word.is_finite() && fitted.tokens_per_word > 0.0).then_some(fitted)
    }
}

/// One request's prompt and what it aims for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PromptSpec {
    pub text: String,
    pub words: usize,
    /// The prompt length aimed for, in server tokens.
    pub input_tokens_target: u32,
    pub max_tokens: u32,
    /// A `--dataset` record of chat messages: sent as these messages on a
    /// chat API (`text` then holds them flattened, for a prompt API).
    pub messages: Option<Vec<ChatMessage>>,
}

/// Mixed into the seed for the lengths' generator.
const LEN_SEED: u64 = 0x6c65_6e67_7468_7321;
/// Mixed into the seed for a trace's block texts.
const BLOCK_SEED: u64 = 0x626c_6f63_6b73_2121;

/// Makes the prompts of a run.
#[derive(Clone, Debug)]
pub struct Workload {
    rng: Rng,
    pub input_len: u32,
    pub output_len: u32,
    pub calibration: Calibration,
    /// `--prefix-len`: tokens of one shared text before every prompt's
    /// unique part (vLLM's random-prefix-len), to measure a prefix cache on
    /// purpose. 0: none, every prompt unique from its first token.
    pub prefix_len: u32,
    /// The shared text's words, drawn once; the calibrated count of them is used.
    prefix_words: Vec<&'static str>,
    /// `--random-range-ratio`: each measured request's lengths drawn in [L(1-r), L(1+r)].
    pub range_ratio: f64,
    /// Where the words after the nonce come from.
    pub source: PromptSource,
    corpus: Option<Arc<corpus::Corpus>>,
    dataset: Option<Arc<Dataset>>,
    /// The next dataset record to send (wrapping).
    cursor: usize,
    /// `--random-output-len` was given: it wins over a ShareGPT length hint.
    output_len_explicit: bool,
    save_prompts: bool,
    /// Draws the lengths, apart from the words, so that a range ratio of 0
    /// leaves the prompts as they were.
    len_rng: Rng,
    /// Where a trace's blocks draw their words: one text per hash id for the
    /// whole run (and every shard of it), from the run's seed.
    block_seed: u64,
    /// `--shard I/N`: `(I, N)`. Every prompt's opening number then starts
    /// with the index (I x 10^9 + a draw below 10^9), so two shards never
    /// open a prompt alike even if their seeds' draws met; dataset records
    /// are dealt out I, I+N, I+2N, ...
    shard: Option<(u32, u32)>,
}

impl Workload {
    pub(crate) fn new(seed: u64, input_len: u32, output_len: u32) -> Workload {
        Workload {
            rng: Rng::new(seed),
            input_len,
            output_len,
            calibration: Calibration::default(),
            prefix_len: 0,
            prefix_words: Vec::new(),
            range_ratio: 0.0,
            source: PromptSource::Random,
            corpus: None,
            dataset: None,
            cursor: 0,
            output_len_explicit: false,
            save_prompts: false,
            len_rng: Rng::new(seed ^ LEN_SEED),
            block_seed: seed ^ BLOCK_SEED,
            shard: None,
        }
    }

    /// Prompts of shard `index` of `count` (`--shard`), drawn from the
    /// shard's own `seed`: see [`Workload::shard`]. Call it after
    /// [`Workload::with_shared_prefix`], so every shard keeps the run's one
    /// shared prefix (it is there for the server's cache to hit).
    pub(crate) fn with_shard(mut self, index: u32, count: u32, seed: u64) -> Workload {
        let count = count.max(1);
        self.shard = Some((index.min(count - 1), count));
        self.cursor = index as usize;
        self.rng = Rng::new(seed);
        self.len_rng = Rng::new(seed ^ LEN_SEED);
        self
    }

    /// Take the traffic shape of the run: range ratio, prompt source, dataset.
    pub(crate) fn with_traffic(mut self, traffic: &Traffic) -> Workload {
        self.range_ratio = traffic.range_ratio;
        self.source = traffic.source;
        self.corpus = traffic.corpus.clone();
        self.dataset = traffic.dataset.clone();
        self.output_len_explicit = traffic.output_len_explicit;
        self.save_prompts = traffic.save_prompts;
        self
    }

    /// `--save-prompts`: the driver should keep each request's
    /// `PromptSpec::text` in its `RequestRecord::prompt` (requests.jsonl
    /// then has a `prompt` field).
    /// Prompts and lengths come from a `--dataset`, not from one length.
    pub(crate) fn uses_dataset(&self) -> bool {
        self.dataset.is_some()
    }

    pub(crate) fn save_prompts(&self) -> bool {
        self.save_prompts
    }

    /// Usable records of the `--dataset`, when the run has one: each level
    /// sends each record once unless `--num-prompts` says otherwise.
    #[cfg(test)]
    pub(crate) fn records_len(&self) -> Option<usize> {
        self.dataset.as_ref().map(|d| d.records.len())
    }

    /// Put the same `tokens`-token text before every prompt.
    pub(crate) fn with_shared_prefix(mut self, tokens: u32) -> Workload {
        // Its own generator, so the unique parts stay as without a prefix.
        let mut rng = Rng::new(self.rng.clone().next_u64() ^ 0x9e37_79b9);
        // Twice the tokens in words covers any tokens-per-word above 0.5.
        self.prefix_words = (0..tokens as usize * 2)
            .map(|_| WORDS[rng.below(WORDS.len())])
            .collect();
        self.prefix_len = tokens;
        self
    }

    fn prefix_word_count(&self) -> usize {
        if self.prefix_len == 0 {
            return 0;
        }
        let words = (f64::from(self.prefix_len) / self.calibration.tokens_per_word).round();
        (words.max(1.0) as usize).min(self.prefix_words.len())
    }

    /// The next measured prompt: the next dataset record, or a generated
    /// prompt at the calibrated length (drawn around the target with a
    /// range ratio).
    pub(crate) fn next_prompt(&mut self) -> PromptSpec {
        if self.dataset.is_some() {
            return self.next_record();
        }
        let input = profile::draw_len(&mut self.len_rng, self.input_len, self.range_ratio);
        let output = profile::draw_len(&mut self.len_rng, self.output_len, self.range_ratio);
        let words = self.calibration.words_for(input);
        let mut prompt = self.prompt_of_words(words);
        prompt.input_tokens_target = input + self.prefix_len;
        prompt.max_tokens = output;
        prompt
    }

    /// The next dataset record, as given. Its input target is the
    /// calibrated estimate for its word count (the server's count is what
    /// gets recorded); its output length is the record's `output_len`, else
    /// a ShareGPT answer's length unless `--random-output-len` was given,
    /// else the run's output length (with the range ratio).
    fn next_record(&mut self) -> PromptSpec {
        let Some(dataset) = self.dataset.clone().filter(|d| !d.records.is_empty()) else {
            let words = self.calibration.words_for(self.input_len);
            return self.prompt_of_words(words);
        };
        let record = &dataset.records[self.cursor % dataset.records.len()];
        // A shard deals itself every N-th record, from its index on.
        let stride = self.shard.map_or(1, |(_, count)| count as usize);
        self.cursor = self.cursor.wrapping_add(stride);
        let hint = record.output_hint.filter(|_| !self.output_len_explicit);
        let max_tokens = match record.output_len.or(hint) {
            Some(n) => n,
            None => profile::draw_len(&mut self.len_rng, self.output_len, self.range_ratio),
        };
        PromptSpec {
            text: record.text.clone(),
            words: record.words,
            input_tokens_target: self.calibration.tokens_for(record.words),
            max_tokens,
            messages: record.messages.clone(),
        }
    }

    /// A prompt of exactly `words` words. It opens with a random number, so
    /// no two prompts share a first token and no prefix cache can answer
    /// beyond the chat template.
    pub(crate) fn prompt_of_words(&mut self, words: usize) -> PromptSpec {
        use std::fmt::Write;
        let words = words.max(1);
        let prefix = self.prefix_word_count();
        let mut text = String::with_capacity((words + prefix).min(1 << 20) * 7 + 12);
        for word in &self.prefix_words[..prefix] {
            text.push_str(word);
            text.push(' ');
        }
        // A number nonce is one "word" for the simulator's whitespace tokenizer.
        let draw = self.rng.next_u64() % 1_000_000_000;
        let _ = match self.shard {
            Some((index, _)) => write!(text, "{}", u64::from(index) * 1_000_000_000 + draw),
            None => write!(text, "{draw}"),
        };
        match (self.source, &self.corpus) {
            (PromptSource::Prose, _) => prose::push_words(&mut self.rng, &mut text, words - 1),
            (PromptSource::Corpus, Some(corpus)) => {
                corpus.push_words(&mut self.rng, &mut text, words - 1)
            }
            _ => {
                for _ in 1..words {
                    text.push(' ');
                    text.push_str(WORDS[self.rng.below(WORDS.len())]);
                }
            }
        }
        PromptSpec {
            text,
            words: words + prefix,
            input_tokens_target: self.input_len + self.prefix_len,
            max_tokens: self.output_len,
            messages: None,
        }
    }

    /// A prompt of a trace's blocks (`hash_ids`), `input_tokens` long: each
    /// block's words come from its id alone, so two prompts that share a
    /// leading run of ids share exactly that text and a server's prefix cache
    /// sees the reuse the trace had. A block opens with a number drawn from
    /// its id (two ids never open alike) and holds the calibrated words for
    /// its tokens; the last one is short where the length ends inside it,
    /// and a length past the blocks ends with unique words.
    pub(crate) fn prompt_of_blocks(
        &mut self,
        blocks: &[u64],
        block_tokens: u32,
        input_tokens: u32,
    ) -> PromptSpec {
        use std::fmt::Write;
        let words_of = |tokens: u32| -> usize {
            ((f64::from(tokens) / self.calibration.tokens_per_word).round() as usize).max(1)
        };
        let mut text = String::new();
        let mut words = 0usize;
        let mut covered = 0u32;
        for (id, tokens) in crate::load::trace::block_spans(blocks, block_tokens, input_tokens) {
            let mut rng = Rng::new(self.block_seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let n = words_of(tokens);
            if !text.is_empty() {
                text.push(' ');
            }
            let _ = write!(text, "{}", rng.next_u64() % 1_000_000_000);
            for _ in 1..n {
                text.push(' ');
                text.push_str(WORDS[rng.below(WORDS.len())]);
            }
            words += n;
            covered += tokens;
        }
        if input_tokens > covered || text.is_empty() {
            let rest = self.prompt_of_words(words_of(input_tokens.saturating_sub(covered).max(1)));
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&rest.text);
            words += rest.words;
        }
        PromptSpec {
            text,
            words,
            input_tokens_target: input_tokens,
            max_tokens: self.output_len,
            messages: None,
        }
    }

    /// Word counts for the warmup requests: alternately the current guess and
    /// half of it, so the fit can tell the template overhead from the slope.
    pub(crate) fn warmup_words(&self, index: usize) -> usize {
        let full = self.calibration.words_for(self.input_len);
        if index % 2 == 0 {
            full
        } else {
            (full / 2).max(1)
        }
    }
}

#[cfg(test)]
mod tests;
