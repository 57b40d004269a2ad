//! The workload's tests, beside it as `ui/app_tests.rs` is beside the app.

use super::*;

/// A prompt-length model of `tokens_per_word` and `overhead_tokens`, its
/// slope fitted (not the tokenizer's).
fn words_model(tokens_per_word: f64, overhead_tokens: f64) -> Calibration {
    Calibration {
        tokens_per_word,
        overhead_tokens,
        slope_from_tokenizer: false,
    }
}

#[test]
fn words_for_inverts_the_model() {
    // 1.3 tokens a word and a 26-token template: (1024 - 26) / 1.3 = 767.7 -> 768 words.
    let c = words_model(1.3, 26.0);
    assert_eq!(c.words_for(1024), 768);
    // Target below the template overhead: one word, never zero or negative.
    assert_eq!(c.words_for(10), 1);
    assert_eq!(Calibration::default().words_for(128), 128);
}

#[test]
fn tokens_for_counts_the_template_too() {
    // 100 words at 1.3 tokens a word, plus a 26-token template: 130 + 26 = 156.
    let c = words_model(1.3, 26.0);
    assert_eq!(c.tokens_for(100), 156);
    // 3 words: 3.9 + 26 = 29.9 -> 30; no words at all still ask for one token.
    assert_eq!(c.tokens_for(3), 30);
    assert_eq!(words_model(1.0, 0.0).tokens_for(0), 1);
    // Inverts words_for: 768 words -> 998.4 + 26 = 1024.4 -> 1024.
    assert_eq!(c.tokens_for(c.words_for(1024)), 1024);
    assert_eq!(words_model(f64::NAN, 0.0).tokens_for(7), 7);
}

#[test]
fn fit_separates_slope_and_overhead() {
    // Server saw 1.25 tokens a word plus 30 of template:
    // 800 words -> 1030 tokens, 400 words -> 530 tokens.
    let c = Calibration::fit(
        &[(800, 1030), (400, 530), (800, 1030)],
        Calibration::default(),
    )
    .expect("fit");
    assert!((c.tokens_per_word - 1.25).abs() < 1e-9, "{c:?}");
    assert!((c.overhead_tokens - 30.0).abs() < 1e-9, "{c:?}");
    assert_eq!(c.words_for(1024), 795); // (1024 - 30) / 1.25 = 795.2
}

#[test]
fn fit_with_one_length_keeps_prior_overhead() {
    // 100 words -> 150 tokens, prior overhead 10: slope (150 - 10) / 100 = 1.4.
    let prior = words_model(1.0, 10.0);
    let c = Calibration::fit(&[(100, 150)], prior).expect("fit");
    assert!((c.tokens_per_word - 1.4).abs() < 1e-9);
    assert_eq!(c.overhead_tokens, 10.0);
    assert!(Calibration::fit(&[], prior).is_none());
    // A server that reports 0 tokens gives no usable model.
    assert!(Calibration::fit(&[(100, 0)], Calibration::default()).is_none());
}

#[test]
fn fit_with_one_length_and_a_tokenizer_slope_finds_the_template() {
    // Seen on llama-server with SmolLM2: /tokenize gives 1.08 tokens a
    // word; one warmup prompt of 118 words reached the model as 158
    // tokens. The template is then 158 - 1.08 * 118 = 30.56 tokens, and
    // 128 tokens need (128 - 30.56) / 1.08 = 90.2 -> 90 words.
    let prior = Calibration {
        slope_from_tokenizer: true,
        ..words_model(1.08, 0.0)
    };
    let c = Calibration::fit(&[(118, 158)], prior).expect("fit");
    assert!((c.tokens_per_word - 1.08).abs() < 1e-9);
    assert!((c.overhead_tokens - 30.56).abs() < 1e-9, "{c:?}");
    assert_eq!(c.words_for(128), 90);
    // A report below the tokenizer's own count cannot be a template:
    // fall back to fitting the slope (keeping overhead 0).
    let c = Calibration::fit(&[(100, 90)], prior).expect("fit");
    assert!((c.tokens_per_word - 0.9).abs() < 1e-9);
}

#[test]
fn prompts_have_the_asked_word_count_and_unique_openings() {
    let mut w = Workload::new(1, 64, 16);
    let mut firsts = std::collections::HashSet::new();
    for _ in 0..200 {
        let p = w.next_prompt();
        assert_eq!(p.text.split_whitespace().count(), 64);
        assert_eq!(p.words, 64);
        assert_eq!(p.max_tokens, 16);
        firsts.insert(p.text.split_whitespace().next().unwrap_or("").to_string());
    }
    assert_eq!(firsts.len(), 200, "every prompt opens with its own token");
}

#[test]
fn a_shared_prefix_opens_every_prompt_then_each_is_unique() {
    // 16 tokens of prefix at one token a word: 16 shared words, then
    // the nonce and 31 more words of the 32-token unique part.
    let mut w = Workload::new(3, 32, 8).with_shared_prefix(16);
    let a = w.next_prompt();
    let b = w.next_prompt();
    let (wa, wb): (Vec<&str>, Vec<&str>) = (
        a.text.split_whitespace().collect(),
        b.text.split_whitespace().collect(),
    );
    assert_eq!(wa.len(), 48);
    assert_eq!(a.words, 48);
    assert_eq!(a.input_tokens_target, 48);
    assert_eq!(wa[..16], wb[..16], "the prefix is shared");
    assert_ne!(wa[16], wb[16], "the unique part opens with its own nonce");
    // Without a prefix nothing changes.
    assert_eq!(Workload::new(3, 32, 8).next_prompt().words, 32);
}

#[test]
fn shards_open_their_prompts_with_their_index() {
    // The same seed on purpose: the index alone keeps shards apart.
    let mut firsts = std::collections::HashSet::new();
    for index in 0..4u32 {
        let mut w = Workload::new(5, 16, 8).with_shard(index, 4, 5);
        for _ in 0..50 {
            let p = w.next_prompt();
            assert_eq!(p.words, 16);
            let first: u64 = p
                .text
                .split_whitespace()
                .next()
                .and_then(|t| t.parse().ok())
                .expect("a number first");
            // Shard I's numbers lie in [I x 10^9, (I+1) x 10^9).
            assert_eq!(first / 1_000_000_000, u64::from(index));
            firsts.insert(first);
        }
    }
    assert_eq!(firsts.len(), 200);
    // Unsharded prompts are as before: shard 0 opens with the same draws.
    let plain = Workload::new(5, 16, 8).next_prompt();
    let zero = Workload::new(5, 16, 8).with_shard(0, 4, 5).next_prompt();
    assert_eq!(plain, zero);
}

#[test]
fn shards_deal_out_dataset_records() {
    let text: String = (0..10)
        .map(|i| format!("{{\"prompt\": \"record {i}\"}}\n"))
        .collect();
    let dataset = Arc::new(Dataset::parse(&text, "d.jsonl").expect("dataset"));
    let traffic = Traffic {
        dataset: Some(dataset),
        ..Traffic::default()
    };
    let sent = |index: u32, n: usize| -> Vec<String> {
        let mut w = Workload::new(1, 16, 8)
            .with_traffic(&traffic)
            .with_shard(index, 4, 1);
        (0..n).map(|_| w.next_prompt().text).collect()
    };
    // 10 records over 4 shards: 3, 3, 2, 2, none twice.
    assert_eq!(sent(0, 3), ["record 0", "record 4", "record 8"]);
    assert_eq!(sent(1, 3), ["record 1", "record 5", "record 9"]);
    assert_eq!(sent(2, 2), ["record 2", "record 6"]);
    assert_eq!(sent(3, 2), ["record 3", "record 7"]);
}

#[test]
fn seed_makes_prompts_repeatable() {
    let a = Workload::new(9, 32, 8).next_prompt();
    let b = Workload::new(9, 32, 8).next_prompt();
    let c = Workload::new(10, 32, 8).next_prompt();
    assert_eq!(a, b);
    assert_ne!(a.text, c.text);
}

#[test]
fn warmup_alternates_full_and_half() {
    let w = Workload::new(1, 100, 10);
    assert_eq!(w.warmup_words(0), 100);
    assert_eq!(w.warmup_words(1), 50);
    assert_eq!(w.warmup_words(2), 100);
}

#[test]
fn range_ratio_draws_each_request_around_the_targets() {
    // chat with r = 0.5: inputs in [256, 768], outputs in [128, 384], means 512 and 256.
    let traffic = Traffic {
        range_ratio: 0.5,
        ..Traffic::default()
    };
    let mut w = Workload::new(4, 512, 256).with_traffic(&traffic);
    let prompts: Vec<PromptSpec> = (0..4000).map(|_| w.next_prompt()).collect();
    let ins: Vec<u32> = prompts.iter().map(|p| p.input_tokens_target).collect();
    let outs: Vec<u32> = prompts.iter().map(|p| p.max_tokens).collect();
    assert_eq!(
        (*ins.iter().min().unwrap(), *ins.iter().max().unwrap()),
        (256, 768)
    );
    assert_eq!(
        (*outs.iter().min().unwrap(), *outs.iter().max().unwrap()),
        (128, 384)
    );
    let mean = |v: &[u32]| v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
    // Standard errors: 148 / sqrt(4000) = 2.3 and 74 / sqrt(4000) = 1.2.
    assert!((mean(&ins) - 512.0).abs() < 10.0, "{}", mean(&ins));
    assert!((mean(&outs) - 256.0).abs() < 5.0, "{}", mean(&outs));
    // At one token a word the prompt has as many words as its target.
    assert!(prompts
        .iter()
        .all(|p| p.text.split_whitespace().count() as u32 == p.input_tokens_target));
    // No ratio: the lengths and the prompts are exactly as before.
    let a = Workload::new(9, 32, 8)
        .with_traffic(&Traffic::default())
        .next_prompt();
    assert_eq!(a, Workload::new(9, 32, 8).next_prompt());
}

#[test]
fn prose_and_corpus_prompts_open_with_a_nonce_at_the_word_count() {
    let corpus = corpus::Corpus::from_text("alpha beta gamma delta", "c.txt").map(Arc::new);
    for source in [PromptSource::Prose, PromptSource::Corpus] {
        let traffic = Traffic {
            source,
            corpus: corpus.clone(),
            ..Traffic::default()
        };
        let mut w = Workload::new(2, 100, 10).with_traffic(&traffic);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..50 {
            let p = w.next_prompt();
            assert_eq!(p.text.split_whitespace().count(), 100, "{source:?}");
            let first = p.text.split_whitespace().next().unwrap_or("");
            assert!(first.parse::<u64>().is_ok(), "{first}");
            firsts.insert(first.to_string());
        }
        assert_eq!(firsts.len(), 50);
    }
}

#[test]
fn dataset_records_go_out_in_order_and_wrap() {
    let text = concat!(
        "{\"prompt\": \"one two three\", \"output_len\": 5}\n",
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi there\"}]}\n",
        "{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, {\"from\": \"gpt\", \"value\": \"a b c d\"}]}\n",
    );
    let dataset = Arc::new(Dataset::parse(text, "d.jsonl").expect("parses"));
    let traffic = Traffic {
        dataset: Some(dataset.clone()),
        ..Traffic::default()
    };
    let mut w = Workload::new(1, 100, 7).with_traffic(&traffic);
    w.calibration = words_model(1.5, 10.0);
    assert_eq!(w.records_len(), Some(3));
    let p: Vec<PromptSpec> = (0..4).map(|_| w.next_prompt()).collect();
    assert_eq!(p[0].text, "one two three");
    assert_eq!(p[0].max_tokens, 5);
    // 3 words at 1.5 tokens a word plus 10: 14.5 -> 15 (rounded half away from zero).
    assert_eq!(p[0].input_tokens_target, 15);
    assert_eq!(p[1].text, "user: hi there");
    assert_eq!(p[1].messages.as_ref().map(Vec::len), Some(1));
    assert_eq!(p[1].max_tokens, 7, "no output_len: the run's");
    assert_eq!(p[2].text, "q");
    assert_eq!(p[2].max_tokens, 4, "the answer's 4 words");
    assert_eq!(p[3], p[0], "wraps around");
    // An explicit --random-output-len wins over the ShareGPT hint, not over output_len.
    let traffic = Traffic {
        dataset: Some(dataset),
        output_len_explicit: true,
        ..Traffic::default()
    };
    let mut w = Workload::new(1, 100, 7).with_traffic(&traffic);
    let lens: Vec<u32> = (0..3).map(|_| w.next_prompt().max_tokens).collect();
    assert_eq!(lens, vec![5, 7, 7]);
    assert_eq!(Workload::new(1, 1, 1).records_len(), None);
}

/// A trace's blocks of 16 tokens at a word a token: prompts of ids
/// [0,1,2,3] and [0,1,2,4] are the same for exactly 3 x 16 = 48 words and
/// differ at the 49th; the same ids give the same text in another run of
/// the same seed; a length of 40 over [5, 6, 7] is 16 + 16 + 8 words;
/// 1.3 tokens a word makes 16 tokens 12 words (16 / 1.3 = 12.3).
#[test]
fn trace_blocks_share_exactly_their_common_prefix() {
    let mut w = Workload::new(7, 64, 8);
    let a = w.prompt_of_blocks(&[0, 1, 2, 3], 16, 64);
    let b = w.prompt_of_blocks(&[0, 1, 2, 4], 16, 64);
    let (aw, bw): (Vec<&str>, Vec<&str>) = (
        a.text.split_whitespace().collect(),
        b.text.split_whitespace().collect(),
    );
    assert_eq!((aw.len(), bw.len(), a.words), (64, 64, 64));
    assert_eq!(aw[..48], bw[..48]);
    assert_ne!(aw[48], bw[48], "a block opens with its id's own number");
    assert_eq!(a.input_tokens_target, 64);
    let again = Workload::new(7, 64, 8).prompt_of_blocks(&[0, 1, 2, 3], 16, 64);
    assert_eq!(again.text, a.text);
    let other_seed = Workload::new(8, 64, 8).prompt_of_blocks(&[0, 1, 2, 3], 16, 64);
    assert_ne!(other_seed.text, a.text);
    let short = w.prompt_of_blocks(&[5, 6, 7], 16, 40);
    assert_eq!(short.text.split_whitespace().count(), 40);
    // Past its blocks a prompt ends with unique words: 2 blocks, 48 tokens.
    let long = w.prompt_of_blocks(&[5, 6], 16, 48);
    let long_words: Vec<&str> = long.text.split_whitespace().collect();
    assert_eq!(long_words.len(), 48);
    assert_eq!(
        long_words[..32],
        short.text.split_whitespace().collect::<Vec<_>>()[..32]
    );
    w.calibration = words_model(1.3, 0.0);
    assert_eq!(w.prompt_of_blocks(&[9], 16, 16).words, 12);
}
