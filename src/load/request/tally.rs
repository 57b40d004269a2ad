//! What a stream says, folded as it arrives: the decoder for the wire, and
//! the tallies a record is built from (first output, tokens, reads).

use super::*;

/// The parts of a stream the record is built from.
#[derive(Default)]
pub(super) struct StreamTally {
    pub(super) arrivals: Vec<ChunkArrival>,
    pub(super) output_reads: u32,
    pub(super) coalesced_reads: u32,
    /// Body reads timed by the kernel, and by user space.
    pub(super) kernel_reads: u32,
    pub(super) user_reads: u32,
    pub(super) rx_lag_ms: Vec<f32>,
    pub(super) finish: Option<FinishReason>,
    pub(super) prompt_tokens: Option<u32>,
    pub(super) completion_tokens: Option<u32>,
    pub(super) timings: Option<ServerTimings>,
    pub(super) stream_error: Option<String>,
    /// The first output chunk carried only reasoning.
    pub(super) reasoning_first: bool,
    /// First content (not reasoning-only) chunk.
    pub(super) first_content: Option<Duration>,
    /// Tokens in reasoning-only chunks (the chunk's count when known, else 1).
    pub(super) reasoning_counted: u32,
    pub(super) reasoning_reported: Option<u32>,
    pub(super) cached_tokens: Option<u32>,
}

impl StreamTally {
    pub(super) fn apply(&mut self, event: StreamEvent, at: Duration) {
        match event {
            StreamEvent::Output { tokens, reasoning } => {
                if reasoning {
                    if self.arrivals.is_empty() {
                        self.reasoning_first = true;
                    }
                    self.reasoning_counted =
                        self.reasoning_counted.saturating_add(tokens.unwrap_or(1));
                } else if self.first_content.is_none() {
                    self.first_content = Some(at);
                }
                self.arrivals.push(ChunkArrival { at, tokens })
            }
            StreamEvent::NoOutput | StreamEvent::Done => {}
            StreamEvent::Finish(reason) => self.finish = Some(reason),
            StreamEvent::Usage {
                prompt_tokens,
                completion_tokens,
                reasoning_tokens,
                cached_tokens,
            } => {
                self.prompt_tokens = prompt_tokens.or(self.prompt_tokens);
                self.completion_tokens = completion_tokens.or(self.completion_tokens);
                self.reasoning_reported = reasoning_tokens.or(self.reasoning_reported);
                self.cached_tokens = cached_tokens.or(self.cached_tokens);
            }
            StreamEvent::Timings(t) => self.timings = Some(t),
            StreamEvent::Error(message) => {
                if self.stream_error.is_none() {
                    self.stream_error = Some(message);
                }
            }
        }
    }

    /// Time to first content token, only when reasoning came first (else it
    /// is the TTFT).
    pub(super) fn ttfc(&self) -> Option<Duration> {
        self.first_content.filter(|_| self.reasoning_first)
    }

    /// Reasoning tokens as the server reported them, else as counted.
    pub(super) fn reasoning_tokens(&self) -> Option<u32> {
        self.reasoning_reported
            .or((self.reasoning_counted > 0).then_some(self.reasoning_counted))
    }

    /// Output token count and where it came from, most trusted source first.
    pub(super) fn output_tokens(&self) -> (u32, TokenSource) {
        // Ollama's eval_count arrives as usage; its timings carry a total.
        let ollama = self.timings.is_some_and(|t| t.total_ms > 0.0);
        if let Some(n) = self.completion_tokens {
            (
                n,
                if ollama {
                    TokenSource::OllamaEvalCount
                } else {
                    TokenSource::Usage
                },
            )
        } else if let Some(n) = self.timings.and_then(|t| t.predicted_n) {
            (n, TokenSource::LlamacppTimings)
        } else {
            (self.arrivals.len() as u32, TokenSource::ChunkCount)
        }
    }
}

/// The decoder of a run's wire format, chosen once per request.
pub(super) enum Decoder {
    OpenAi(OpenAiDecoder),
    Ollama(OllamaDecoder),
    Tgi(TgiDecoder),
}

impl Decoder {
    pub(super) fn new(wire: Wire) -> Decoder {
        match wire {
            Wire::OpenAi(_) => Decoder::OpenAi(OpenAiDecoder::new()),
            Wire::Ollama(_) => Decoder::Ollama(OllamaDecoder::new()),
            Wire::Tgi => Decoder::Tgi(TgiDecoder::new()),
        }
    }

    pub(super) fn feed(&mut self, bytes: &[u8], out: &mut Vec<StreamEvent>) -> Result<(), String> {
        match self {
            Decoder::OpenAi(d) => d.feed(bytes, out).map_err(|e| e.to_string()),
            Decoder::Ollama(d) => d.feed(bytes, out).map_err(|e| e.to_string()),
            Decoder::Tgi(d) => d.feed(bytes, out).map_err(|e| e.to_string()),
        }
    }

    pub(super) fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), String> {
        match self {
            Decoder::OpenAi(d) => d.finish(out).map_err(|e| e.to_string()),
            Decoder::Ollama(d) => d.finish(out).map_err(|e| e.to_string()),
            Decoder::Tgi(d) => d.finish(out).map_err(|e| e.to_string()),
        }
    }
}
