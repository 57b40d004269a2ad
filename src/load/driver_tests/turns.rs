//! `--turns`: conversations that carry their history.

use super::*;

#[tokio::test(start_paused = true)]
async fn turns_carry_the_conversation_on_with_its_history() {
    let server = FakeServer::new(|_| ok(10, 100));
    let mut cfg = config(vec![LevelPlan::closed(1, 6)]);
    cfg.turns = 3;
    let run = Harness::start(cfg, server).finish().await;
    let sent = run.server.sent();
    let shape: Vec<(Option<u32>, usize)> = sent.iter().map(|s| (s.turn, s.messages)).collect();
    assert_eq!(
        shape,
        vec![
            (Some(1), 1),
            (Some(2), 3),
            (Some(3), 5),
            (Some(1), 1),
            (Some(2), 3),
            (Some(3), 5)
        ]
    );
    // Each turn's prompt is the history (20 output tokens an answer) plus
    // a new user message.
    let user = sent[0].input_tokens_target;
    assert_eq!(sent[1].input_tokens_target, 2 * user + 20);
    assert_eq!(sent[2].input_tokens_target, 3 * user + 40);
    let turns: Vec<Option<u32>> = run.records().iter().map(|r| r.turn).collect();
    assert_eq!(turns, shape.iter().map(|s| s.0).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn a_failed_turn_ends_its_conversation() {
    let server = FakeServer::one_off(1, fail(5, ErrorClass::Http(500)), ok(10, 100));
    let mut cfg = config(vec![LevelPlan::closed(1, 4)]);
    cfg.turns = 3;
    let run = Harness::start(cfg, server).finish().await;
    let turns: Vec<Option<u32>> = run.server.sent().iter().map(|s| s.turn).collect();
    assert_eq!(turns, vec![Some(1), Some(2), Some(1), Some(2)]);
}
