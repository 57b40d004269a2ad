//! The diagnoses, each on levels worked by hand.

use super::*;
use crate::engine::LengthAsk;
use crate::stats::summary::{level_stats, MinMeanMax};

fn view(concurrency: u32, stats: &LevelStats) -> LevelView<'_> {
    LevelView { concurrency, stats }
}

fn spread(min: f64, mean: f64, max: f64) -> MinMeanMax {
    MinMeanMax { min, mean, max }
}

fn stats_with(completed: usize, input_mean: f64, short: usize) -> LevelStats {
    let mut s = level_stats(&[], 1, &[50.0]);
    s.completed = completed;
    s.input_len = Some(spread(input_mean - 1.0, input_mean, input_mean + 1.0));
    s.output_len = Some(spread(10.0, 50.0, 64.0));
    s.short_outputs = short;
    s
}

/// The diagnosis says `prefix` first.
fn starts(d: &Diagnosis, prefix: &str) {
    assert!(d.message.starts_with(prefix), "{}", d.message);
}

#[test]
fn input_length_fires_only_past_five_percent() {
    // 10 requests at mean 1060 and 10 at 1090: pooled mean 1075, 4.98% over 1024 -> quiet.
    let a = stats_with(10, 1060.0, 0);
    let b = stats_with(10, 1090.0, 0);
    let levels = [view(1, &a), view(4, &b)];
    assert!(input_len_off_target(&levels, 1024).is_none());
    // 1076 is 5.08% over 1024 -> fires, and says +5%.
    let c = stats_with(10, 1076.0, 0);
    let d = input_len_off_target(&[view(1, &c)], 1024).expect("fires");
    assert_eq!(d.id, "input_len_off_target");
    assert!(d.message.contains("+5%"), "{}", d.message);
}

#[test]
fn short_outputs_and_single_level() {
    let a = stats_with(20, 128.0, 3);
    let levels = [view(4, &a)];
    let d = short_outputs(&levels, 64, LengthAsk::NoIgnoreEos).expect("fires");
    starts(&d, "3 of 20 answers ended before 64 tokens (mean 50)");
    assert_eq!(single_level(&levels).map(|d| d.id), Some("single_level"));
    // Full-length answers (mean 64 of 64): quiet.
    let mut b = stats_with(20, 128.0, 0);
    b.output_len = Some(spread(64.0, 64.0, 64.0));
    let two = [view(4, &b), view(8, &b)];
    assert!(short_outputs(&two, 64, LengthAsk::NoIgnoreEos).is_none());
    assert!(single_level(&two).is_none());
}

#[test]
fn failures_sum_classes_over_levels() {
    let mut a = stats_with(8, 10.0, 0);
    a.failed = 2;
    a.errors.insert("http_503".into(), 2);
    let mut b = stats_with(9, 10.0, 0);
    b.failed = 1;
    b.errors.insert("http_503".into(), 1);
    let levels = [view(1, &a), view(2, &b)];
    let d = failures(&levels).expect("fires");
    assert_eq!(d.message, "3 of 20 requests failed (http_503 x3)");
}

/// 170 of 400 streams' requests found no descriptor and 3 at 100 streams
/// found no local port: both the client's, named, by level; a 503 is not.
#[test]
fn client_limits_are_the_clients_and_say_where_to_raise_them() {
    let mut a = stats_with(97, 10.0, 0);
    a.errors.insert("client_ports_exhausted".into(), 3);
    let mut b = stats_with(230, 10.0, 0);
    b.errors.insert("client_fd_limit".into(), 170);
    b.errors.insert("http_503".into(), 2);
    let levels = [view(100, &a), view(400, &b)];
    let d = client_limits(&levels).expect("fires");
    assert_eq!(d.id, "client_limits");
    starts(
        &d,
        "170 requests had no file descriptor for a connection (170 at 400 streams): the client's open-file limit, not the server",
    );
    assert!(
        d.message.contains("; 3 requests had no local port to connect from (3 at 100 streams): the client's ephemeral ports")
            && d.message.contains("net.ipv4.ip_local_port_range"),
        "{}",
        d.message
    );
    assert_eq!(
        d.evidence,
        json!({"client_fd_limit": 170, "client_ports_exhausted": 3})
    );
    let mut only_503 = stats_with(9, 10.0, 0);
    only_503.errors.insert("http_503".into(), 1);
    assert!(client_limits(&[view(4, &only_503)]).is_none());
}

#[test]
fn short_outputs_fire_below_ninety_percent_of_requested() {
    // Mean 60 of 64 asked = 93.75%: a few short answers, but quiet.
    let mut a = stats_with(20, 128.0, 3);
    a.output_len = Some(spread(30.0, 60.0, 64.0));
    let levels = [view(4, &a)];
    assert!(short_outputs(&levels, 64, LengthAsk::NoIgnoreEos).is_none());
    // Mean 57 of 64 = 89.1% < 90%: fires, still counting the short ones.
    a.output_len = Some(spread(30.0, 57.0, 64.0));
    let levels = [view(4, &a)];
    let d = short_outputs(&levels, 64, LengthAsk::NoIgnoreEos).expect("fires");
    assert_eq!(d.evidence["short"], json!(3));
    assert_eq!(d.evidence["mean_output_len"], json!(57.0));
}

#[test]
fn single_level_at_one_stream_says_so() {
    let a = stats_with(20, 128.0, 0);
    let d = single_level(&[view(1, &a)]).expect("fires");
    assert_eq!(
        d.message,
        "only concurrency 1 was measured: one stream says nothing about capacity; sweep several levels"
    );
    assert!(single_level(&[]).is_none());
}

#[test]
fn warmup_and_rounds_suggestions() {
    assert_eq!(no_warmup(0).map(|d| d.id), Some("no_warmup"));
    assert!(no_warmup(4).is_none());
    let d = single_round(1).expect("fires");
    assert_eq!(
        d.message,
        "one round per level: run --rounds 3 to see how stable the numbers are"
    );
    assert!(single_round(3).is_none());
    assert!(single_round(0).is_none());
}

#[test]
fn client_far_by_hand() {
    // 1.2 ms with TTFT p50 48 ms: 2.5% -> quiet.
    assert!(client_far(1.2, Some(48.0)).is_none());
    // 4 ms with TTFT p50 30 ms: 13% > 10% -> fires although under 5 ms.
    let d = client_far(4.0, Some(30.0)).expect("fires");
    assert_eq!(d.id, "client_far");
    starts(&d, "the client is 4.0 ms from the server (connect + first byte of a tiny request), 13% of the TTFT p50 of 30 ms");
    // 6 ms with TTFT p50 2000 ms (0.3%): over 5 ms -> fires.
    assert!(client_far(6.0, Some(2000.0)).is_some());
    // No TTFT known: only the 5 ms rule.
    assert!(client_far(4.9, None).is_none());
    assert!(client_far(f64::NAN, Some(10.0)).is_none());
}

#[test]
fn client_rx_lag_fires_over_five_ms_p99_with_the_issue_words() {
    use crate::stats::summary::RxLag;
    let with_lag = |p99: Option<f64>| {
        let mut s = stats_with(10, 100.0, 0);
        s.client_rx_lag = p99.map(|p99| RxLag {
            p50: 0.2,
            p99,
            max: p99 + 1.0,
            reads: 100,
        });
        s
    };
    let (quiet, edge, late, none) = (
        with_lag(Some(1.2)),
        with_lag(Some(5.0)),
        with_lag(Some(23.4)),
        with_lag(None),
    );
    let views = |s: &[&LevelStats]| -> Vec<(u32, LevelStats)> {
        s.iter()
            .enumerate()
            .map(|(i, s)| (1 << i, (*s).clone()))
            .collect()
    };
    let check = |stats: Vec<(u32, LevelStats)>| {
        let v: Vec<LevelView<'_>> = stats
            .iter()
            .map(|(c, s)| LevelView {
                concurrency: *c,
                stats: s,
            })
            .collect();
        client_rx_lag(&v)
    };
    assert!(check(views(&[&quiet, &edge, &none])).is_none());
    let d = check(views(&[&quiet, &late])).expect("fires");
    assert_eq!(d.id, "client_rx_lag");
    assert_eq!(
        d.message,
        "this machine delayed tokbench's reads by p99 23 ms; latencies use the kernel's \
         receive time and are unaffected"
    );
    assert_eq!(d.evidence["levels"][0]["concurrency"], 2);
    assert_eq!(d.evidence["levels"].as_array().map(Vec::len), Some(1));
}

#[test]
fn client_saturated_by_level() {
    let load = |concurrency, cpu, lag| ClientLevelLoad {
        concurrency,
        cpu_percent: Some(cpu),
        loop_lag_ms_p99: Some(lag),
    };
    let quiet = load(4, 35.0, 0.8);
    assert!(client_saturated(&[quiet]).is_none());
    let cpu = load(64, 93.0, 2.0);
    let lag = load(128, 70.0, 12.0);
    let d = client_saturated(&[quiet, cpu]).expect("fires");
    starts(&d, "the client itself was saturated at 64 streams (CPU up to 93% of a core, event-loop lag p99 up to 2.0 ms)");
    let d = client_saturated(&[quiet, cpu, lag]).expect("fires");
    assert!(d
        .message
        .contains("at 64, 128 streams (CPU up to 93% of a core, event-loop lag p99 up to 12 ms)"));
    assert_eq!(d.evidence["levels"].as_array().map(Vec::len), Some(2));
    // Lag while the client's CPU stays low: something else held the core.
    let held_up = load(1, 2.0, 8.5);
    let d = client_saturated(&[quiet, held_up]).expect("fires");
    starts(&d, "the client was held up at 1 stream (CPU up to 2% of a core, event-loop lag p99 up to 8.5 ms) by other work on this machine, not its own");
    // Between low and the limit: it could be either, and the message says so.
    let d = client_saturated(&[load(256, 79.0, 40.0)]).expect("fires");
    starts(
        &d,
        "the client was busy or held up at 256 streams (CPU up to 79% of a core",
    );
    let d = client_saturated(&[load(1, 25.0, 8.0)]).expect("fires");
    starts(&d, "the client was busy or held up");
    // With one level over the CPU limit, it is the client's own load.
    let d = client_saturated(&[held_up, cpu]).expect("fires");
    assert!(d
        .message
        .starts_with("the client itself was saturated at 1, 64 streams"));
    // Exactly at the limits is not over them.
    let edge = load(8, 80.0, 5.0);
    assert!(client_saturated(&[edge]).is_none());
}

#[test]
fn buffered_stream_by_hand() {
    let shape = |reads, ttft_ms, e2el_ms| StreamShape {
        reads,
        chunks: reads,
        output_tokens: 64,
        ttft_ms,
        e2el_ms,
    };
    // Buffered: reads 1, 1, 2 (median 1); TTFT 950, 980, 1000 (median 980)
    // vs E2EL 1000, 1000, 1010 (median 1000): 20 <= 10% of 1000.
    let buffered = [
        shape(1, 950.0, 1000.0),
        shape(1, 980.0, 1000.0),
        shape(2, 1000.0, 1010.0),
    ];
    let d = buffered_stream(&buffered).expect("fires");
    assert!(d.message.starts_with(
        "the response is buffered between server and client; TTFT here is the total time"
    ));
    assert_eq!(d.evidence["median_reads"], json!(1.0));
    // Streaming: 64 reads, TTFT 50 of E2EL 1000.
    assert!(buffered_stream(&[shape(64, 50.0, 1000.0)]).is_none());
    // Two reads but TTFT 800 of 1000 (20% apart): not buffered by this rule.
    assert!(buffered_stream(&[shape(2, 800.0, 1000.0)]).is_none());
    // One-token answers say nothing.
    let one = StreamShape {
        reads: 1,
        chunks: 1,
        output_tokens: 1,
        ttft_ms: 100.0,
        e2el_ms: 100.0,
    };
    assert!(buffered_stream(&[one]).is_none());
    assert!(buffered_stream(&[]).is_none());
}

/// 3 answers: 64 tokens in 64 chunks, 64 in 16 (4 a chunk), 30 in 20:
/// 158 tokens in 100 chunks = 1.58 a chunk, 2 answers with multi-token
/// chunks. One token a chunk, or one-chunk answers: nothing said.
#[test]
fn multi_token_chunks_by_hand() {
    let shape = |chunks, output_tokens| StreamShape {
        reads: chunks,
        chunks,
        output_tokens,
        ttft_ms: 10.0,
        e2el_ms: 100.0,
    };
    let d = multi_token_chunks(&[shape(64, 64), shape(16, 64), shape(20, 30)]).expect("fires");
    assert_eq!(
        d.message,
        "answers arrived 1.58 tokens a chunk (2 answers had chunks of several tokens): ITL here is the gap between chunks, not tokens; TPOT is the per-token figure (speculative decoding, or a server that batches its stream)"
    );
    assert_eq!(d.evidence["tokens"], 158);
    assert!(multi_token_chunks(&[shape(64, 64), shape(32, 33)]).is_none());
    assert!(multi_token_chunks(&[shape(1, 64)]).is_none());
}

#[test]
fn rounds_spread_message() {
    use crate::analysis::decide::{Figures, LevelPoint};
    use crate::analysis::rounds::rounds_spread as spreads_of;
    use crate::record::Mode;
    let round = |tput: f64| LevelPoint {
        concurrency: 16,
        kind: Mode::Planned,
        partial: false,
        figures: Figures {
            output_throughput: tput,
            per_stream_tok_s: tput / 16.0,
            p50_ttft_ms: Some(100.0),
            ..Figures::default()
        },
    };
    // 1000, 1100, 1253: median 1100, (1253 - 1000) / 1100 = 23%.
    let noisy = spreads_of(&[round(1000.0), round(1100.0), round(1253.0)]);
    let d = rounds_spread(&noisy).expect("fires");
    assert_eq!(
        d.message,
        "results vary by 23% between rounds: the machine is noisy or throttling; check before trusting them"
    );
    // 1000, 1050, 1100: 100 / 1050 = 9.5% -> quiet.
    let quiet = spreads_of(&[round(1000.0), round(1050.0), round(1100.0)]);
    assert!(rounds_spread(&quiet).is_none());
}

#[test]
fn diagnose_run_composes_everything() {
    use crate::analysis::decide::{decide, CapacitySlo, Figures, LevelPoint};
    use crate::record::Mode;
    let a = stats_with(20, 128.0, 0);
    let views = [view(1, &a)];
    // Lowest level's p99 TTFT 61 ms against a 50 ms SLO: no capacity.
    let point = LevelPoint {
        concurrency: 1,
        kind: Mode::Planned,
        partial: false,
        figures: Figures {
            output_throughput: 92.0,
            per_stream_tok_s: 92.0,
            stream_decode_tok_s: Some(92.0),
            p50_ttft_ms: Some(48.0),
            p99_ttft_ms: Some(61.0),
            ..Figures::default()
        },
    };
    let slo = CapacitySlo {
        ttft_p99_ms: Some(50.0),
        ..CapacitySlo::default()
    };
    let decision = decide(&[point], &slo);
    let loads = [ClientLevelLoad {
        concurrency: 1,
        cpu_percent: Some(120.0),
        loop_lag_ms_p99: None,
    }];
    let input = DiagnoseInput {
        levels: &views,
        lengths: AskedLengths::One {
            input: 128,
            output: 64,
        },
        warmup_requests: Some(0),
        connect_probe_ms: Some(20.0),
        client_loads: &loads,
        rounds: 1,
        decision: Some(&decision),
        ..DiagnoseInput::default()
    };
    let ids: Vec<&str> = diagnose_run(&input).iter().map(|d| d.id).collect();
    // Output mean 50 of 64 = 78% -> short_outputs, even with no short count.
    assert_eq!(
        ids,
        [
            "short_outputs",
            "single_level",
            "no_warmup",
            "client_far",
            "client_saturated",
            "single_round",
            "no_capacity"
        ]
    );
    // The old three-argument entry point runs only the level checks.
    let ids: Vec<&str> = diagnose(&views, 128, 64).iter().map(|d| d.id).collect();
    assert_eq!(ids, ["short_outputs", "single_level"]);
}

/// A run that asked for no one length (a dataset, a trace, turns) gets no
/// note about an asked-for length, however far its means are from the
/// flags' defaults; one that asked gets both.
#[test]
fn length_notes_only_where_one_length_was_asked_for() {
    // Mixed lengths: prompts of mean 34 tokens, answers of mean 13.
    let mut a = stats_with(3, 34.0, 0);
    a.output_len = Some(spread(4.0, 13.0, 16.0));
    let views = [view(1, &a)];
    let ids = |lengths: AskedLengths| -> Vec<&'static str> {
        diagnose_run(&DiagnoseInput {
            levels: &views,
            lengths,
            ..DiagnoseInput::default()
        })
        .iter()
        .map(|d| d.id)
        .filter(|id| matches!(*id, "input_len_off_target" | "short_outputs"))
        .collect()
    };
    // Replay, dataset, turns: each request's own lengths.
    for (dataset, replay, turns) in [(false, true, 1), (true, false, 1), (false, false, 4)] {
        let lengths = AskedLengths::of_run(64, 16, dataset, replay, turns);
        assert_eq!(lengths, AskedLengths::PerRequest);
        assert!(ids(lengths).is_empty(), "{dataset} {replay} {turns}");
        assert!(lengths.prompts_repeat_by_design());
    }
    let one = AskedLengths::of_run(64, 16, false, false, 1);
    assert!(!one.prompts_repeat_by_design());
    assert_eq!(ids(one), ["input_len_off_target", "short_outputs"]);
}

/// The short-answer note says what the engine could do: an engine that
/// cannot force lengths is told apart from one that ignored ignore_eos.
#[test]
fn short_outputs_say_what_the_engine_could_force() {
    let mut a = stats_with(20, 128.0, 12);
    a.output_len = Some(spread(10.0, 30.0, 64.0));
    let levels = [view(4, &a)];
    let cap = short_outputs(&levels, 64, LengthAsk::CapOnly("num_predict")).expect("fires");
    assert!(
        cap.message
            .contains("cannot force an answer's length (num_predict is a cap)"),
        "{}",
        cap.message
    );
    assert!(cap.message.contains("per-token figures"), "{}", cap.message);
    assert!(!cap.message.contains("use ignore_eos"), "{}", cap.message);
    let sent = short_outputs(&levels, 64, LengthAsk::IgnoreEos).expect("fires");
    assert!(
        sent.message.contains("ignore_eos was sent, yet"),
        "{}",
        sent.message
    );
}
