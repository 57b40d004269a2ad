use super::csv::utc_seconds;
use super::*;

fn opts() -> TraceOptions {
    TraceOptions::default()
}

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/traces/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn each_format_is_told_by_its_first_line() {
    let p = Path::new("x.jsonl");
    assert_eq!(
        detect(p, "{\"t\": 0, \"input_len\": 3}").ok(),
        Some(TraceFormat::Tokbench)
    );
    assert_eq!(
        detect(
            p,
            "\n{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [0]}"
        )
        .ok(),
        Some(TraceFormat::Mooncake)
    );
    assert_eq!(
        detect(
            Path::new("qwen_bailian_blksz_16.jsonl"),
            "{\"timestamp\": 0, \"input_length\": 5, \"hash_ids\": []}"
        )
        .ok(),
        Some(TraceFormat::Bailian)
    );
    assert_eq!(
        detect(
            p,
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
        )
        .ok(),
        Some(TraceFormat::BurstGpt)
    );
    assert_eq!(
        detect(p, "TIMESTAMP,ContextTokens,GeneratedTokens").ok(),
        Some(TraceFormat::Azure)
    );
    let unknown = detect(p, "when,prompt,answer")
        .expect_err("refused")
        .to_string();
    assert!(
        unknown.starts_with("line 1 is no known trace header: expected JSONL")
            && unknown.contains("Timestamp,Model,Request tokens,Response tokens")
            && unknown.contains("TIMESTAMP,ContextTokens,GeneratedTokens"),
        "{unknown}"
    );
    assert!(detect(p, "{\"x\": 1}").is_err());
    assert!(detect(p, "   \n").is_err());
}

/// The Mooncake test trace: timestamps in ms become seconds from the first;
/// its reuse worked by hand: blocks of 16, request 1 has [0,1,2,3] (64
/// tokens, none seen), request 2 [0,1,2,4] (48 of 64 seen), request 3
/// [5,6] with 20 tokens (16 + 4, none seen): 48 of 148 tokens = 0.3243.
#[test]
fn mooncake_lines_and_their_reuse() {
    let text = "{\"timestamp\": 1000, \"input_length\": 64, \"output_length\": 8, \"hash_ids\": [0, 1, 2, 3]}\n\
                {\"timestamp\": 1500, \"input_length\": 64, \"output_length\": 4, \"hash_ids\": [0, 1, 2, 4]}\n\
                {\"timestamp\": 3000, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [5, 6]}\n";
    let (entries, block) = parse(
        TraceFormat::Mooncake,
        text,
        &TraceOptions {
            block_tokens: Some(16),
            ..opts()
        },
    )
    .expect("parses");
    assert_eq!(block, Some(16));
    let t: Vec<f64> = entries.iter().map(|e| e.t).collect();
    assert_eq!(t, vec![0.0, 0.5, 2.0]);
    assert_eq!(entries[1].blocks.as_deref(), Some(&[0, 1, 2, 4][..]));
    let reuse = prefix_reuse(&entries, 16).expect("blocks");
    assert!((reuse - 48.0 / 148.0).abs() < 1e-12, "{reuse}");
    // Only a leading run counts: block 1 again after another first block is
    // no hit (Bailian hashes each block's own content).
    let e = |ids: &[u64]| ReplayEntry {
        t: 0.0,
        input_len: Some(16 * ids.len() as u32),
        output_len: Some(1),
        prompt: None,
        blocks: Some(ids.to_vec()),
    };
    let moved = [e(&[0, 1]), e(&[2, 1]), e(&[0, 1, 3])];
    // 32 + 32 + 48 tokens; only [0, 1] of the third was a prefix before.
    assert!((prefix_reuse(&moved, 16).expect("blocks") - 32.0 / 112.0).abs() < 1e-12);
    // A block past the prompt's length is dropped; the last one is short.
    let spans: Vec<(u64, u32)> = block_spans(&[5, 6, 7], 16, 20).collect();
    assert_eq!(spans, vec![(5, 16), (6, 4)]);
}

#[test]
fn the_test_traces_of_each_format_read() {
    for (name, format, n) in [
        ("mooncake_small.jsonl", TraceFormat::Mooncake, 6),
        ("burstgpt_small.csv", TraceFormat::BurstGpt, 8),
        ("azure_small.csv", TraceFormat::Azure, 6),
    ] {
        let text = fixture(name);
        assert_eq!(detect(Path::new(name), &text).ok(), Some(format), "{name}");
        let (entries, _) = parse(format, &text, &opts()).expect(name);
        assert_eq!(entries.len(), n, "{name}");
        assert_eq!(entries[0].t, 0.0, "{name}");
        assert!(entries.windows(2).all(|w| w[0].t <= w[1].t), "{name}");
    }
}

/// BurstGPT rows picked by model; a failed row's 0 response tokens asks
/// for 1. Azure's timestamps: 18:15:46.68059 and 18:15:47.18059 are half a
/// second apart, across midnight 23:59:59.5 to 00:00:00.25 is 0.75 s.
#[test]
fn csv_rows_filters_and_timestamps() {
    let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                 5,ChatGPT,472,18,490,Conversation log\n\
                 7,GPT-4,1000,200,1200,Conversation log\n\
                 9.5,ChatGPT,30,0,30,API log\n";
    let filters = vec![parse_filter("model=chatgpt").expect("filter")];
    let (entries, block) = parse(
        TraceFormat::BurstGpt,
        burst,
        &TraceOptions { filters, ..opts() },
    )
    .expect("parses");
    assert_eq!(block, None);
    let got: Vec<(f64, Option<u32>, Option<u32>)> = entries
        .iter()
        .map(|e| (e.t, e.input_len, e.output_len))
        .collect();
    assert_eq!(
        got,
        vec![(0.0, Some(472), Some(18)), (4.5, Some(30), Some(1))]
    );
    let bad_filter = parse(
        TraceFormat::BurstGpt,
        burst,
        &TraceOptions {
            filters: vec![("colour".into(), "red".into())],
            ..opts()
        },
    )
    .expect_err("no such column")
    .to_string();
    assert!(
        bad_filter.starts_with("--trace-filter colour=...: the trace has no such column"),
        "{bad_filter}"
    );

    let a = utc_seconds("2023-11-16 18:15:46.6805900").expect("parses");
    let b = utc_seconds("2023-11-16 18:15:47.1805900").expect("parses");
    assert!((b - a - 0.5).abs() < 1e-6);
    let c = utc_seconds("2023-12-31 23:59:59.5").expect("parses");
    let d = utc_seconds("2024-01-01T00:00:00.25Z").expect("parses");
    assert!((d - c - 0.75).abs() < 1e-6);
    assert_eq!(utc_seconds("2023-13-01 00:00:00"), None);
    assert_eq!(utc_seconds("yesterday"), None);
    // 1970-01-02 is 86400 s.
    assert_eq!(utc_seconds("1970-01-02 00:00:00"), Some(86_400.0));
}

#[test]
fn bad_lines_name_the_line_and_the_field() {
    let err = |format, text: &str| {
        parse(format, text, &opts())
            .expect_err("refused")
            .to_string()
    };
    assert_eq!(
        err(TraceFormat::Mooncake, "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": -3, \"input_length\": 5, \"output_length\": 1}"),
        "line 2: \"timestamp\" must be milliseconds >= 0"
    );
    assert_eq!(
        err(
            TraceFormat::Mooncake,
            "{\"timestamp\": 0, \"output_length\": 1}"
        ),
        "line 1: \"input_length\" is missing"
    );
    assert_eq!(
        err(
            TraceFormat::Mooncake,
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, -2]}"
        ),
        "line 1: \"hash_ids\" must be a list of whole numbers >= 0"
    );
    assert!(err(TraceFormat::Mooncake, "{\"timestamp\": 0}\nnot json")
        .starts_with("line 1: \"input_length\" is missing"));
    assert!(err(
        TraceFormat::Mooncake,
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\nnot json"
    )
    .starts_with("line 2: not valid JSON"));
    let burst_head = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
    assert_eq!(
        err(
            TraceFormat::BurstGpt,
            &format!("{burst_head}1,ChatGPT,ten,5,15,Conversation log")
        ),
        "line 2: \"Request tokens\" must be a whole number from 1 to 10,000,000 (it is \"ten\")"
    );
    assert_eq!(
        err(TraceFormat::BurstGpt, &format!("{burst_head}1,ChatGPT")),
        "line 2: \"Request tokens\" is missing (the row has 2 fields)"
    );
    assert!(err(TraceFormat::BurstGpt, "Timestamp,Model\n1,x")
        .starts_with("line 1: no \"Request tokens\" column"));
    assert_eq!(
        err(TraceFormat::Azure, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,100,10\nlater,5,5"),
        "line 3: \"TIMESTAMP\" must be a date and time like 2023-11-16 18:15:46.6805900 (it is \"later\")"
    );
    assert_eq!(
        err(TraceFormat::BurstGpt, burst_head),
        "the replay trace has no entries"
    );
    // --trace-filter is for the CSV traces.
    let filtered = parse(
        TraceFormat::Mooncake,
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}",
        &TraceOptions {
            filters: vec![("model".into(), "x".into())],
            ..opts()
        },
    )
    .expect_err("refused")
    .to_string();
    assert!(
        filtered.starts_with("--trace-filter picks rows of a CSV trace"),
        "{filtered}"
    );
}

/// A window of 1..3 s over entries at 0, 1, 2, 3, 4 s keeps those at 1 and
/// 2, from 0; at most one of them with max_requests 1.
#[test]
fn windows_and_counts_cut_the_schedule() {
    let text: String = (0..5)
        .map(|k| format!("{{\"t\": {k}, \"input_len\": 4}}\n"))
        .collect();
    let w = TraceOptions {
        window: Some(parse_window("1..3").expect("window")),
        ..opts()
    };
    let (entries, _) = parse(TraceFormat::Tokbench, &text, &w).expect("parses");
    assert_eq!(
        entries.iter().map(|e| e.t).collect::<Vec<_>>(),
        vec![0.0, 1.0]
    );
    let one = TraceOptions {
        max_requests: Some(1),
        ..w.clone()
    };
    assert_eq!(
        parse(TraceFormat::Tokbench, &text, &one)
            .expect("parses")
            .0
            .len(),
        1
    );
    assert_eq!(parse_window("60.."), Ok((60.0, f64::INFINITY)));
    assert!(parse_window("3..1").is_err());
    assert!(parse_window("abc").is_err());
    let empty = TraceOptions {
        window: Some((100.0, 200.0)),
        ..opts()
    };
    assert!(parse(TraceFormat::Tokbench, &text, &empty)
        .expect_err("nothing left")
        .to_string()
        .starts_with("the replay window 100..200 s holds no request"));
}

/// Clipping to a context of 100: 90 + 20 keeps its 20 of output and 80 of
/// prompt; an output of 80 is cut to 50 (half) and the prompt to 50; one
/// that fits is left alone. Two of the three were over.
#[test]
fn lengths_past_the_context_are_counted_and_clipped() {
    let e = |i, o| ReplayEntry {
        t: 0.0,
        input_len: Some(i),
        output_len: Some(o),
        prompt: None,
        blocks: None,
    };
    let entries = vec![e(90, 20), e(60, 80), e(10, 10)];
    assert_eq!(over_context(&entries, 100), (2, Some(0)));
    let clipped: Vec<(Option<u32>, Option<u32>)> = entries
        .into_iter()
        .map(|mut x| {
            clip(&mut x, 100);
            (x.input_len, x.output_len)
        })
        .collect();
    assert_eq!(
        clipped,
        vec![
            (Some(80), Some(20)),
            (Some(50), Some(50)),
            (Some(10), Some(10))
        ]
    );
}
