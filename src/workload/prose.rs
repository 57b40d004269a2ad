//! `--prompt-source prose`: English-looking text, made up on the spot.
//!
//! Random words from a flat list tokenize steadily but look nothing like
//! what a server sees in use: no sentences, no punctuation, every word as
//! likely as any other. This generator draws words with Zipf's law (the
//! word of rank k has weight 1/k, so "the" is far more common than
//! "lantern", as in real English), strings them into sentences of varied
//! length with a capital, a comma now and then and a period, and groups
//! sentences into paragraphs. The vocabulary is a few hundred words written
//! for tokbench, ordered from the most to the least frequent.
//!
//! Words are still separated by white space (commas and periods stick to
//! their word), so the word count, and with it the calibration to a token
//! target, works exactly as for the random source.

use std::sync::OnceLock;

use super::rng::Rng;

/// Ranked from most to least frequent: function words first, then common
/// verbs, nouns and adjectives, then rarer words.
#[rustfmt::skip]
const VOCABULARY: &[&str] = &[
    // Function words.
    "the", "of", "and", "to", "a", "in", "is", "that", "it", "was", "for", "on", "with", "as",
    "he", "she", "they", "be", "at", "by", "this", "had", "not", "are", "but", "from", "or",
    "have", "an", "which", "one", "you", "were", "her", "all", "their", "there", "been", "if",
    "would", "when", "so", "what", "his", "we", "will", "can", "more", "no", "out", "up",
    "into", "them", "then", "some", "could", "than", "other", "only", "its", "over", "about",
    "after", "also", "before", "through", "where", "while", "because", "each", "under", "again",
    "every", "any", "most", "very", "just", "still", "never", "always", "often", "here", "now",
    "once", "both", "much", "many", "few", "those", "these", "our", "my", "your", "him",
    "who", "how", "why", "until", "since", "though", "between", "against", "without", "around",
    // Common verbs.
    "said", "made", "came", "went", "saw", "took", "knew", "found", "gave", "told", "thought",
    "looked", "turned", "asked", "kept", "left", "felt", "brought", "began", "seemed", "stood",
    "heard", "held", "wrote", "carried", "opened", "walked", "watched", "waited", "remembered",
    "make", "see", "know", "take", "come", "think", "look", "want", "give", "use", "find",
    "tell", "work", "call", "try", "need", "become", "leave", "put", "mean", "keep", "let",
    "begin", "help", "show", "hear", "play", "run", "move", "live", "believe", "hold", "bring",
    "write", "sit", "stand", "lose", "pay", "meet", "learn", "change", "lead", "understand",
    // Common nouns.
    "time", "people", "way", "day", "man", "woman", "child", "world", "life", "hand", "part",
    "place", "week", "house", "water", "room", "night", "home", "side", "morning",
    "door", "city", "road", "name", "story", "family", "friend", "letter", "voice", "light",
    "river", "field", "town", "market", "window", "table", "garden", "book", "head", "face",
    "eyes", "word", "question", "answer", "reason", "year", "evening", "train", "street",
    "country", "school", "money", "music", "wind", "rain", "sea", "sun", "tree", "hill",
    "village", "bridge", "paper", "fire", "stone", "boat", "horse", "dog", "bird", "sky",
    "winter", "summer", "spring", "autumn", "kitchen", "station", "office", "journey", "idea",
    // Adjectives and adverbs.
    "good", "new", "old", "long", "little", "great", "small", "large", "young", "high", "last",
    "first", "next", "early", "late", "quiet", "bright", "dark", "cold", "warm", "slow", "quick",
    "soft", "heavy", "strange", "simple", "careful", "tired", "happy", "open", "narrow", "wide",
    "slowly", "quietly", "suddenly", "together", "almost", "perhaps", "already", "away",
    // Rarer words.
    "lantern", "harbour", "orchard", "meadow", "ledger", "chimney", "compass", "carriage",
    "blanket", "whistle", "pebble", "shutter", "thimble", "parcel", "ferry", "lighthouse",
    "cellar", "hedge", "furnace", "quarry", "saddle", "kettle", "satchel", "anchor", "meander",
    "glimmer", "linger", "wander", "murmur", "gather", "scatter", "shimmer", "hesitate",
    "patient", "curious", "distant", "gentle", "hollow", "silver", "crooked", "faded", "restless",
    "weathered", "peculiar", "luminous", "reluctant", "ordinary", "steady", "brittle", "amber",
];

/// Cumulative Zipf weights (1, 1 + 1/2, 1 + 1/2 + 1/3, ...), built once.
fn cumulative() -> &'static [f64] {
    static CUMULATIVE: OnceLock<Vec<f64>> = OnceLock::new();
    CUMULATIVE.get_or_init(|| {
        let mut total = 0.0;
        (1..=VOCABULARY.len())
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect()
    })
}

/// A word's rank (0 = most frequent), drawn with Zipf's law.
pub(crate) fn zipf_rank(rng: &mut Rng) -> usize {
    let weights = cumulative();
    let total = weights[weights.len() - 1];
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
    weights.partition_point(|&w| w <= u).min(weights.len() - 1)
}

/// The word of a rank.
pub(crate) fn word(rank: usize) -> &'static str {
    VOCABULARY[rank.min(VOCABULARY.len() - 1)]
}

#[cfg(test)]
pub(crate) fn vocabulary_len() -> usize {
    VOCABULARY.len()
}

/// Append `n` words of prose, each preceded by white space (a space, or a
/// blank line between paragraphs). The text starts a sentence and ends
/// with a period.
pub(crate) fn push_words(rng: &mut Rng, text: &mut String, n: usize) {
    let mut left_in_sentence = 0usize;
    let mut in_sentence = 0usize;
    let mut sentences_left_in_paragraph = 3 + rng.below(4);
    let mut previous = usize::MAX;
    for i in 0..n {
        let starts_sentence = left_in_sentence == 0;
        if starts_sentence {
            // 4 to 22 words, most often near the middle.
            left_in_sentence = 4 + rng.below(10) + rng.below(10);
            in_sentence = 0;
            if i > 0 {
                sentences_left_in_paragraph -= 1;
            }
        }
        if starts_sentence && i > 0 && sentences_left_in_paragraph == 0 {
            text.push_str("\n\n");
            sentences_left_in_paragraph = 3 + rng.below(4);
        } else {
            text.push(' ');
        }
        // No word twice in a row ("the the"): one more draw.
        let mut rank = zipf_rank(rng);
        if rank == previous {
            rank = zipf_rank(rng);
        }
        previous = rank;
        let w = word(rank);
        if starts_sentence {
            let mut chars = w.chars();
            if let Some(first) = chars.next() {
                text.extend(first.to_uppercase());
                text.push_str(chars.as_str());
            }
        } else {
            text.push_str(w);
        }
        left_in_sentence -= 1;
        in_sentence += 1;
        if left_in_sentence == 0 || i + 1 == n {
            text.push('.');
            left_in_sentence = 0;
        } else if in_sentence >= 3 && left_in_sentence > 2 && rng.below(9) == 0 {
            text.push(',');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_rank_order_roughly_holds() {
        let mut rng = Rng::new(11);
        let mut counts = vec![0u32; vocabulary_len()];
        let draws = 300_000;
        for _ in 0..draws {
            counts[zipf_rank(&mut rng)] += 1;
        }
        // With weights 1/k: rank 1 is drawn twice as often as rank 2, ten
        // times as often as rank 10, a hundred times as often as rank 100.
        assert!(counts[0] > counts[1] && counts[1] > counts[4], "{counts:?}");
        assert!(
            counts[4] > counts[19] && counts[19] > counts[99],
            "{counts:?}"
        );
        let ratio = |a: usize, b: usize| f64::from(counts[a]) / f64::from(counts[b]);
        assert!((1.8..2.2).contains(&ratio(0, 1)), "{}", ratio(0, 1));
        assert!((8.0..12.0).contains(&ratio(0, 9)), "{}", ratio(0, 9));
        // Share of "the": 1 / H(V), H(V) = sum of 1/k up to V.
        let h: f64 = (1..=vocabulary_len()).map(|k| 1.0 / k as f64).sum();
        let share = f64::from(counts[0]) / f64::from(draws);
        assert!((share - 1.0 / h).abs() < 0.01, "{share} vs {}", 1.0 / h);
        assert!(vocabulary_len() >= 300, "{}", vocabulary_len());
    }

    #[test]
    fn prose_has_the_word_count_and_looks_like_sentences() {
        let mut rng = Rng::new(5);
        for n in [1usize, 2, 7, 64, 500] {
            let mut text = String::new();
            push_words(&mut rng, &mut text, n);
            assert_eq!(text.split_whitespace().count(), n, "{text}");
            assert!(text.ends_with('.'), "{text}");
            let first = text.trim_start().chars().next().expect("a word");
            assert!(first.is_uppercase(), "{text}");
        }
        let mut text = String::new();
        push_words(&mut rng, &mut text, 2_000);
        assert!(text.contains(", "), "commas");
        assert!(text.contains(".\n\n"), "paragraphs");
        // Every sentence starts with a capital.
        for sentence in text.split(". ").skip(1) {
            let c = sentence.trim_start().chars().next().expect("a word");
            assert!(c.is_uppercase(), "{sentence}");
        }
        let sentences = text.matches('.').count();
        // 4 to 22 words a sentence, 13 on average: about 150 in 2000 words.
        assert!((90..=250).contains(&sentences), "{sentences}");
    }
}
