use super::*;

/// A made-up run of a server whose step is 4 ms + 1 ms per running
/// sequence and whose prefill costs 0.02 ms a prompt token; prompts of
/// 100 tokens, answers of 50. A stream's p50 TPOT at a batch of R also
/// waits through the others' prefills, about R - 1 of them per answer:
///   R = 1: 4 + 1            = 5.00 ms
///   R = 2: 4 + 2 + 2 x 1/50 = 6.04 ms   (0.02 x 100 = 2 ms a prefill)
///   R = 4: 4 + 4 + 2 x 3/50 = 8.12 ms
/// and the streams, started together, prefill together: TTFT is one
/// admitting step of c streams, 4 + 1 x c + 2 x c, plus the client's
/// overhead `overhead`: 7, 10 and 16 ms.
fn made_up(server_prefill: Option<f64>, overhead: f64) -> Vec<Measured> {
    [(1u32, 5.0, 7.0), (2, 6.04, 10.0), (4, 8.12, 16.0)]
        .iter()
        .map(|&(c, tpot, ttft)| Measured {
            concurrency: c,
            completed: 10 * u64::from(c),
            output_tok_s: 100.0 * f64::from(c),
            ttft_p50_ms: ttft + overhead,
            tpot_p50_ms: tpot,
            input_len: 100.0,
            output_len: 50.0,
            running_mean: Some(f64::from(c)),
            running_max: Some(f64::from(c)),
            server_prefill_ms_per_token: server_prefill,
            ..Measured::default()
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn the_fit_recovers_step_and_prefill_from_the_servers_timings() {
    let (p, range, sources, _) = fit(&made_up(Some(0.02), 1.5), &Known::default()).expect("fits");
    // Less the others' prefills, TPOT is 5, 6, 8 at 1, 2, 4: the line
    // 4 + 1 x R exactly.
    assert!(close(p.step_ms, 4.0), "{p:?}");
    assert!(close(p.step_ms_per_seq, 1.0), "{p:?}");
    assert!(close(p.prefill_ms_per_token, 0.02), "{p:?}");
    // The engine's TTFT at one stream is 7 ms; the 1.5 ms more the client
    // saw is its overhead.
    assert!(close(p.overhead_ms, 1.5), "{p:?}");
    assert_eq!(p.cap, None);
    assert_eq!((range.batch_min, range.batch_max), (1.0, 4.0));
    assert!(
        sources
            .iter()
            .any(|s| s.contains("server's own prompt timings")),
        "{sources:?}"
    );
}

/// Without the server's timings the prefill comes from how TTFT grows:
/// 7, 10, 16 at 1, 2, 4 streams is a slope of 3 ms a stream, b + p x 100.
/// A first pass with no prefill fits TPOT 5, 6.04, 8.12 as 3.96 + 1.04 R,
/// so p = (3 - 1.04) / 100 = 0.0196; each pass after, b = 1.04 - 2p and
/// p = (3 - b) / 100, which settles at p = 0.02, b = 1 (the fixed point of
/// p = 0.0196 + 0.02 p). The 2 ms of overhead added to every TTFT leave
/// the slope as it was, and come back as the overhead.
#[test]
fn the_fit_recovers_prefill_from_ttft_alone() {
    let mut levels = made_up(None, 2.0);
    for l in &mut levels {
        l.running_mean = None;
        l.running_max = None;
    }
    let (p, _, sources, _) = fit(&levels, &Known::default()).expect("fits");
    assert!(close(p.step_ms, 4.0), "{p:?}");
    assert!(close(p.step_ms_per_seq, 1.0), "{p:?}");
    assert!(close(p.prefill_ms_per_token, 0.02), "{p:?}");
    assert!(close(p.overhead_ms, 2.0), "{p:?}");
    assert!(
        sources.iter().any(|s| s.contains("client's figures alone")),
        "{sources:?}"
    );
}

#[test]
fn the_fit_checks_itself_on_every_level() {
    let levels = made_up(Some(0.02), 0.0);
    let model =
        series_model(0, None, Some("vllm".into()), &levels, &Known::default()).expect("fits");
    assert_eq!(model.levels.len(), 3);
    // The TPOT the model gives back at one stream is its own 5 ms.
    assert!(
        close(model.levels[0].predicted.tpot_p50_ms, 5.0),
        "{:?}",
        model.levels[0]
    );
    assert!(model.error_pct.tpot_p50_ms >= ERROR_FLOOR_PCT);
}

#[test]
fn one_level_is_not_enough() {
    let levels = made_up(Some(0.02), 0.0);
    let err = fit(&levels[..1], &Known::default()).expect_err("refused");
    assert!(
        err.starts_with("nothing can be fitted: 1 finished level at 1 concurrency"),
        "{err}"
    );
}

#[test]
fn the_servers_slots_are_the_cap() {
    let mut levels = made_up(Some(0.02), 0.0);
    levels[2].slots_total = Some(4.0);
    let (p, ..) = fit(&levels, &Known::default()).expect("fits");
    assert_eq!(p.cap, Some(4));
    let known = Known {
        knob: Some(("np".into(), 2)),
        slot_context_tokens: Some(4096),
    };
    let (p, ..) = fit(&levels, &known).expect("fits");
    assert_eq!(
        (p.cap, p.knob.as_deref(), p.slot_context_tokens),
        (Some(2), Some("np"), Some(4096))
    );
}

/// The top level (4 streams) ran 2 at most by the server's gauge. The
/// client saw 4 streaming at once: the scrapes missed the busiest moment,
/// no cap is read. With requests waiting beside the 2, or the client never
/// seeing more than 2 streaming, the 2 is the cap.
#[test]
fn the_running_gauge_is_a_cap_only_where_nothing_contradicts_it() {
    let mut levels = made_up(Some(0.02), 0.0);
    levels[2].running_max = Some(2.0);
    levels[2].streaming_max = Some(4.0);
    let (p, ..) = fit(&levels, &Known::default()).expect("fits");
    assert_eq!(p.cap, None);
    levels[2].streaming_max = Some(2.0);
    let (p, ..) = fit(&levels, &Known::default()).expect("fits");
    assert_eq!(p.cap, Some(2));
    levels[2].streaming_max = Some(4.0);
    levels[2].server_waiting_max = Some(2.0);
    let (p, _, sources, _) = fit(&levels, &Known::default()).expect("fits");
    assert_eq!(p.cap, Some(2));
    assert!(
        sources.iter().any(|s| s.contains("running gauge")),
        "{sources:?}"
    );
}

/// (1, 3), (2, 5), (3, 7): y = 1 + 2x.
#[test]
fn least_squares_by_hand() {
    let (a, b) = line(&[(1.0, 3.0), (2.0, 5.0), (3.0, 7.0)]).expect("a line");
    assert!(close(a, 1.0) && close(b, 2.0));
    assert!(line(&[(2.0, 3.0), (2.0, 5.0)]).is_none());
}
