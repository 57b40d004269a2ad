//! What each request asks: the workload's next prompt, a replay entry's
//! lengths, or the next turn of a `--turns` conversation.

// One actor split over files: these are more of `Driver`'s methods.
use super::*;

/// A `--turns` conversation between its turns.
#[derive(Default)]
pub(super) struct Conversation {
    /// Turns sent so far.
    pub(super) turn: u32,
    pub(super) messages: Vec<ChatMessage>,
    /// Estimated prompt tokens of the history plus the new message.
    pub(super) input_tokens: u32,
}

impl Driver {
    /// `--turns`: the next turn of a conversation whose answer is back, or
    /// the first of a new one. Each turn re-sends the history and adds a new
    /// user message of the input length.
    pub(super) fn next_turn(&mut self) -> (PromptSpec, Conversation) {
        let mut conversation = self.ready_turns.pop_front().unwrap_or_default();
        let user = self.cfg.workload.next_prompt();
        conversation.turn += 1;
        conversation.input_tokens += user.input_tokens_target;
        conversation.messages.push(ChatMessage {
            role: "user".into(),
            content: user.text,
        });
        let prompt = PromptSpec {
            text: flatten_messages(&conversation.messages),
            words: user.words,
            input_tokens_target: conversation.input_tokens,
            max_tokens: user.max_tokens,
            messages: Some(conversation.messages.clone()),
        };
        (prompt, conversation)
    }

    /// A turn came back: its conversation goes on with the answer in its
    /// history, unless it failed or was the last turn.
    pub(super) fn continue_conversation(&mut self, record: &RequestRecord) {
        let Some(mut conversation) = self.conversations.remove(&record.id) else {
            return;
        };
        if !record.is_ok() || conversation.turn >= self.cfg.turns {
            return;
        }
        // The reply's text is not kept (the hot path keeps no content); a
        // stand-in of the same length takes its place. A prefix cache then
        // hits through the previous user message, not through the reply.
        let words = self
            .cfg
            .workload
            .calibration
            .words_for(record.output_tokens.max(1));
        let reply = self.cfg.workload.prompt_of_words(words);
        conversation.input_tokens += record.output_tokens;
        conversation.messages.push(ChatMessage {
            role: "assistant".into(),
            content: reply.text,
        });
        self.ready_turns.push_back(conversation);
    }

    /// The next measured prompt: a replay entry's lengths (or text), else
    /// the workload's.
    pub(super) fn prompt_for(&mut self, level: usize) -> PromptSpec {
        let entry = match (&self.open_loop, &self.cfg.replay) {
            (Some(open), Some(_)) if open.level == level => match &open.source {
                Schedule::Replay { next, entries, .. } => entries.get(*next).cloned(),
                Schedule::Rate(_) => None,
            },
            _ => None,
        };
        let Some(entry) = entry else {
            return self.cfg.workload.next_prompt();
        };
        let output = entry
            .output_len
            .unwrap_or(self.cfg.workload.output_len)
            .max(1);
        match entry.prompt {
            Some(text) => {
                let words = text.split_whitespace().count();
                PromptSpec {
                    input_tokens_target: entry
                        .input_len
                        .unwrap_or_else(|| self.cfg.workload.calibration.tokens_for(words)),
                    text,
                    words,
                    max_tokens: output,
                    ..self.cfg.workload.next_prompt()
                }
            }
            None if entry.blocks.is_some() => {
                let input = entry.input_len.unwrap_or(self.cfg.workload.input_len);
                let block = self
                    .cfg
                    .replay
                    .as_ref()
                    .and_then(|r| r.block_tokens)
                    .unwrap_or(1);
                let blocks = entry.blocks.as_deref().unwrap_or_default();
                let mut prompt = self.cfg.workload.prompt_of_blocks(blocks, block, input);
                prompt.max_tokens = output;
                prompt
            }
            None => {
                let input = entry.input_len.unwrap_or(self.cfg.workload.input_len);
                let words = self.cfg.workload.calibration.words_for(input);
                let mut prompt = self.cfg.workload.prompt_of_words(words);
                prompt.input_tokens_target = input + self.cfg.workload.prefix_len;
                prompt.max_tokens = output;
                prompt
            }
        }
    }
}
