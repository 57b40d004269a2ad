//! Each figure worked out by hand. The speed throughout: TTFT 0.2 s and 10
//! tok/s, so a 1,024-token answer takes 0.2 + 1023 / 10 = 102.5 s alone.

use std::time::Duration;

use super::*;

const SLOW: Speed = Speed {
    ttft_s: 0.2,
    decode_tok_s: 10.0,
};

/// The default plan: levels 1,4,16,32,64,128 at 10 requests a stream.
fn default_plan() -> Vec<(u32, u32)> {
    [1, 4, 16, 32, 64, 128]
        .iter()
        .map(|&c| (c, c * 10))
        .collect()
}

#[test]
fn one_request_alone_is_its_first_token_and_its_decode() {
    assert!((SLOW.request_s(1024) - 102.5).abs() < 1e-9);
    assert!((SLOW.request_s(1) - 0.2).abs() < 1e-9);
}

#[test]
fn a_level_before_any_measurement_is_one_stream_at_a_time_or_all_at_once() {
    // 8 requests one at a time: 8 x 102.5 = 820; four at a time: 2 x 102.5.
    let none = level_seconds(4, 8, 1024, SLOW, None, Gain::None);
    let full = level_seconds(4, 8, 1024, SLOW, None, Gain::Full);
    assert!((none - 820.0).abs() < 1e-9, "{none}");
    assert!((full - 205.0).abs() < 1e-9, "{full}");
}

#[test]
fn a_level_after_a_measured_one_gains_nothing_or_in_proportion() {
    // Level 4 gave 40 tok/s. Level 16 of 32 requests: 32 x 1024 = 32,768
    // tokens; at 40 tok/s 819.2 s, at 4 x 40 = 160 tok/s 204.8 s; plus the
    // first answer's 0.2 s.
    let last = Some(Measured {
        concurrency: 4,
        tok_s: 40.0,
    });
    let none = level_seconds(16, 32, 1024, SLOW, last, Gain::None);
    let full = level_seconds(16, 32, 1024, SLOW, last, Gain::Full);
    assert!((none - 819.4).abs() < 1e-9, "{none}");
    assert!((full - 205.0).abs() < 1e-9, "{full}");
}

#[test]
fn one_level_of_one_request_is_said_in_the_singular() {
    // One request of 64 tokens: 0.1 s to its first token, 6.4 s of decode.
    let (line, seconds) = estimate_line(&[(1, 1)], 64, SLOW, None);
    assert!((seconds - 6.5).abs() < 1e-9, "{seconds}");
    assert_eq!(
        line,
        "this plan: 1 level, 1 request, 64 output tokens: about 6 s at 10.0 tok/s per stream if the server serves one stream at a time"
    );
}

#[test]
fn the_default_plan_at_ten_tokens_a_second_is_about_seventy_hours() {
    // 10 + 40 + 160 + 320 + 640 + 1280 = 2,450 requests; x 1,024 =
    // 2,508,800 tokens; 2,450 x 102.5 s = 251,125 s = 69.8 h.
    let cost = plan_cost(&default_plan(), 1024, SLOW, None);
    assert_eq!(cost.levels, 6);
    assert_eq!(cost.requests, 2450);
    assert_eq!(cost.output_tokens, 2_508_800);
    assert!((cost.seconds - 251_125.0).abs() < 1e-6, "{}", cost.seconds);
    assert_eq!(
        estimate_line(&default_plan(), 1024, SLOW, None).0,
        "this plan: 6 levels, 2,450 requests, 2.5 M output tokens: about 70 h at 10.0 tok/s per stream if the server serves one stream at a time"
    );
}

#[test]
fn a_fitted_plan_counts_its_first_two_levels_as_they_end_steady() {
    // Floors: level 1 max(1 x 2, 3) = 3, level 4 max(4 x 2, 3) = 8; the
    // requests' own rates need the first wave and three past it: 1 + 3 = 4
    // and 4 + 3 = 7; the more of the two, then the other streams' requests
    // in flight finish too: 4 + 0 and 8 + 3. 15 requests, 15,360 tokens,
    // 15 x 102.5 = 1,537.5 s = 26 min.
    assert_eq!(floor_completions(1, 2), 3);
    assert_eq!(floor_completions(4, 2), 8);
    assert_eq!(fitted_requests(1, 2, 10), 4);
    assert_eq!(fitted_requests(4, 2, 40), 11);
    // Never past the level's cap.
    assert_eq!(fitted_requests(4, 2, 6), 6);
    let fitted: Vec<(u32, u32)> = default_plan()
        .iter()
        .map(|&(c, cap)| (c, fitted_requests(c, 2, cap)))
        .collect();
    let (line, seconds) = estimate_line(
        &fitted,
        1024,
        SLOW,
        Some(&budget_words(DEFAULT_BUDGET, BudgetFrom::Default)),
    );
    assert!((seconds - 1537.5).abs() < 1e-9, "{seconds}");
    assert_eq!(
        line,
        "this plan: about 26 min for levels 1 and 4 (15 requests, 15,360 output tokens) at 10.0 tok/s per stream if the server serves one stream at a time, then 16, 32, 64, 128 only while throughput still gains; each level ends once steady, within the default budget of 20m"
    );
}

#[test]
fn answers_are_shortened_only_when_the_first_two_levels_cannot_fit() {
    let first_two = [(1, 4), (4, 11)];
    // 1,190 s left: room 0.7 x 1190 = 833 s for 15 requests: 55.53 s each,
    // less 0.2 s of first token, is 553.3 tokens at 10 tok/s, + 1 = 554.3,
    // down to a multiple of 16: 544.
    assert_eq!(fitted_output_len(&first_two, 1024, SLOW, 1190.0), Some(544));
    // 60 s left: room 42 s, 2.8 s a request less 0.2: 26 tokens + 1 = 27,
    // below the shortest: 32.
    assert_eq!(fitted_output_len(&first_two, 1024, SLOW, 60.0), Some(32));
    // 2,200 s left: room 1,540 s >= 1,537.5 s needed: unchanged.
    assert_eq!(fitted_output_len(&first_two, 1024, SLOW, 2200.0), None);
    // Already at the shortest: never lengthened, never below it.
    assert_eq!(fitted_output_len(&first_two, 32, SLOW, 1.0), None);
}

#[test]
fn the_budget_suggested_covers_the_first_two_levels_with_slack() {
    // 1,537.5 / 0.7 = 2,196 s: up to 8 x 300 s = 40 minutes.
    assert_eq!(budget_that_fits(1537.5), Duration::from_secs(2400));
    assert_eq!(flag_words(Duration::from_secs(2400)), "40m");
    assert_eq!(flag_words(Duration::from_secs(1800)), "30m");
    assert_eq!(flag_words(Duration::from_secs(5400)), "1h30m");
    assert_eq!(flag_words(Duration::from_secs(3600)), "1h");
    assert_eq!(flag_words(Duration::from_secs(90)), "90s");
    assert_eq!(flag_words(Duration::from_secs(60)), "60s");
    assert_eq!(flag_words(Duration::from_secs(599)), "9m59s");
    assert_eq!(flag_words(Duration::from_secs(3661)), "1h1m1s");
}

#[test]
fn durations_and_tokens_read_as_a_person_would_say_them() {
    assert_eq!(duration_words(45.2), "45 s");
    assert_eq!(duration_words(1020.0), "17 min");
    assert_eq!(duration_words(9000.0), "2.5 h");
    assert_eq!(duration_words(251_125.0), "70 h");
    assert_eq!(duration_words(f64::NAN), "0 s");
    assert_eq!(tokens_words(11_264), "11,264");
    assert_eq!(tokens_words(2_508_800), "2.5 M");
}

#[test]
fn skipped_levels_say_why_in_one_line() {
    let knee = SkipReason::PastKnee { from: 8, to: 16 };
    assert_eq!(
        knee.line(&[64, 128]),
        "skipped 64, 128: past the knee at 8 -> 16"
    );
    assert_eq!(knee.as_str(), "past knee");
    let budget = SkipReason::Budget {
        left_s: 100.0,
        needs_s: 400.0,
    };
    assert_eq!(
        budget.line(&[32, 64]),
        "skipped 32, 64: the budget has 2 min left and level 32 needs at least 7 min"
    );
    let spent = |cut| SkipReason::Spent {
        budget: Duration::from_secs(60),
        cut,
    };
    assert_eq!(
        spent(Some(4)).line(&[16, 32]),
        "the budget of 60s is spent: level 4 is saved as partial; skipped 16, 32"
    );
    assert_eq!(spent(None).line(&[]), "the budget of 60s is spent");
}

#[test]
fn the_speed_comes_from_the_warmups_medians() {
    use crate::record::{Outcome, RequestRecord};
    let record = |ttft_ms: u64, tpot_ms: u64| RequestRecord {
        ttft: Some(Duration::from_millis(ttft_ms)),
        tpot: Some(Duration::from_millis(tpot_ms)),
        outcome: Outcome::Ok,
        ..RequestRecord::empty(0, 0)
    };
    // TTFT median of 100, 200, 900 ms is 200 ms; TPOT median 100 ms: 10 tok/s.
    let speed = Speed::of(&[record(100, 90), record(200, 100), record(900, 120)]);
    assert_eq!(
        speed,
        Some(Speed {
            ttft_s: 0.2,
            decode_tok_s: 10.0
        })
    );
    let failed = RequestRecord {
        outcome: Outcome::Failed(crate::record::ErrorClass::Http(500)),
        ..record(1, 1)
    };
    assert_eq!(Speed::of(&[failed]), None);
}

#[test]
fn a_budget_says_where_it_came_from() {
    let d = Duration::from_secs;
    assert_eq!(
        budget_words(d(1200), BudgetFrom::Default),
        "the default budget of 20m"
    );
    assert_eq!(
        budget_words(d(240), BudgetFrom::Given),
        "the given budget of 4m"
    );
    assert_eq!(
        budget_words(d(599), BudgetFrom::TuneShare),
        "this setting's share of the tune's budget, 9m59s"
    );
}
