//! The search walked by hand over made-up settings.

use super::*;

fn grid(text: &str) -> AutoGrid {
    AutoGrid::parse(text).expect("parses").expect("a search")
}

/// A finished setting serving `capacity` streams at `tok_s`, one round.
fn tried(value: u32, capacity: u32, tok_s: f64) -> Tried {
    Tried {
        value,
        result: SettingResult {
            label: format!("np={value}"),
            values: vec![("np".into(), value.to_string())],
            outcome: Outcome::Finished,
            capacity: Some(capacity),
            tok_s_at_capacity: Some(tok_s),
            p99_ttft_at_capacity_ms: None,
            peak_tok_s: Some(tok_s),
            spread: None,
            by_knee: false,
        },
        slots_used: Some(f64::from(value)),
        kv_usage: None,
    }
}

#[test]
fn auto_and_ranges_parse_and_bad_ones_say_why_in_one_line() {
    assert_eq!(
        grid("np=auto"),
        AutoGrid {
            name: "np".into(),
            low: 1,
            high: AUTO_TOP,
            open: true
        }
    );
    assert_eq!((grid("np=2..64").low, grid("np=2..64").high), (2, 64));
    assert_eq!(AutoGrid::parse("np=1,2,4").expect("a list"), None);
    let refused = |text: &str, want: &str| {
        let err = AutoGrid::parse(text).expect_err(want).to_string();
        assert_eq!(err, want);
    };
    refused(
        "np=64..2",
        "--grid np=64..2: the low end 64 is above the high end 2; write np=2..64",
    );
    refused(
        "q=0.5..2",
        "--grid q=0.5..2: a range takes whole numbers from 1 (q=2..64); for other values list them (q=a,b,c)",
    );
    refused(
        "np=1,2,auto",
        "--grid np=1,2,auto: auto stands alone (np=auto), not in a list",
    );
}

#[test]
fn the_doubling_ends_on_the_range_top() {
    assert_eq!(grid("np=3..64").doubling(), vec![3, 6, 12, 24, 48, 64]);
    assert_eq!(grid("np=4..4").doubling(), vec![4]);
}

#[test]
fn it_doubles_while_a_setting_serves_more_then_bisects_once() {
    let g = grid("np=auto");
    assert_eq!(next(&g, &[]), Next::Try(1));
    let one = tried(1, 1, 100.0);
    assert_eq!(next(&g, std::slice::from_ref(&one)), Next::Try(2));
    // np=2 serves 2 streams where np=1 served 1: it gained.
    let two = tried(2, 2, 190.0);
    assert_eq!(next(&g, &[one.clone(), two.clone()]), Next::Try(4));
    // np=4: still 2 streams, 200 / 190 - 1 = 5.3% under the knee's 10%:
    // no gain. Halfway between 2 and 4: 3.
    let four = tried(4, 2, 200.0);
    let so_far = [one, two, four];
    assert_eq!(next(&g, &so_far), Next::Try(3));
    let mut all = so_far.to_vec();
    all.push(tried(3, 2, 195.0));
    assert_eq!(
        next(&g, &all),
        Next::Done(
            "np=4 adds +5% over np=2 (2 streams within the SLO against 2): more np only queue"
                .into()
        )
    );
}

#[test]
fn a_gain_within_the_rounds_spread_is_no_gain() {
    let g = grid("np=2..16");
    let mut a = tried(2, 2, 200.0);
    let mut b = tried(4, 2, 230.0);
    // +15% over a spread of 20%: noise.
    a.result.spread = Some(0.2);
    b.result.spread = Some(0.1);
    assert_eq!(next(&g, &[a.clone(), b.clone()]), Next::Try(3));
    // The same +15% with one round is over the knee's 10%: a gain.
    a.result.spread = None;
    b.result.spread = None;
    assert_eq!(next(&g, &[a, b]), Next::Try(8));
}

#[test]
fn the_servers_own_account_stops_the_search_at_once() {
    let g = grid("np=4..64");
    let four = tried(4, 4, 400.0);
    // np=8: 408 / 400 = +2%, and the server never ran more than 5 at once.
    let mut eight = tried(8, 4, 408.0);
    eight.slots_used = Some(5.0);
    assert_eq!(
        next(&g, &[four.clone(), eight]),
        Next::Done(
            "np=8 adds +2% over np=4 and the server ran 5 of 8 at the knee: compute is the limit, not np; try a smaller model or quantisation"
                .into()
        )
    );
    // A gain, but the KV cache was 97% full: no further doubling.
    let mut full = tried(8, 8, 700.0);
    full.kv_usage = Some(0.97);
    assert_eq!(
        next(&g, &[four, full]),
        Next::Done(
            "np=8 adds +75% over np=4, but its KV cache was 97% full at the knee: memory is the limit, not np; a smaller model, a shorter context or quantisation leaves room for more"
                .into()
        )
    );
}

#[test]
fn the_top_of_a_range_that_still_gains_says_where_to_look() {
    let g = grid("np=2..4");
    assert_eq!(
        next(&g, &[tried(2, 2, 200.0), tried(4, 4, 400.0)]),
        Next::Done(
            "np=4 adds +100% over np=2 and is the top of the range: try a range above 4".into()
        )
    );
}

#[test]
fn a_setting_that_did_not_finish_ends_the_search_below_it() {
    let g = grid("np=auto");
    let mut two = tried(2, 2, 190.0);
    two.result.outcome = Outcome::Failed("its server did not start".into());
    assert_eq!(
        next(&g, &[tried(1, 1, 100.0), two]),
        Next::Done(
            "np=2 did not finish (its server did not start): the search stops below it".into()
        )
    );
}
