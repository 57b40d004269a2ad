//! Warmup: discarded requests that calibrate the prompt length.

// One actor split over files: these are more of `Driver`'s methods.
use super::*;

impl Driver {
    /// Warmup requests at the first level's concurrency, discarded but used
    /// to calibrate prompt length. Ok(false): the user stopped; Err: every
    /// warmup request failed, so the run cannot measure anything.
    pub(super) async fn warmup_phase(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<Command>,
        commands_open: &mut bool,
    ) -> Result<bool, String> {
        let total = self.cfg.warmup;
        if total == 0 {
            return Ok(true);
        }
        let concurrency = self.cfg.plan.first().map_or(1, |p| p.concurrency).max(1);
        self.emit(DriverEvent::WarmupStarted {
            requests: total,
            concurrency,
        });
        let mut words_of: HashMap<u64, usize> = HashMap::new();
        let mut records: Vec<RequestRecord> = Vec::new();
        let mut sent = 0u32;
        loop {
            while sent < total && (self.tasks.len() as u32) < concurrency && !self.stopping {
                let words = self.cfg.workload.warmup_words(sent as usize);
                let mut prompt = self.cfg.workload.prompt_of_words(words);
                if let Some(cap) = self.warmup_output_cap() {
                    prompt.max_tokens = prompt.max_tokens.min(cap);
                }
                let id = self.spawn_request(WARMUP_LEVEL, &prompt, None, None);
                // All the words sent, the shared prefix's too: fitted on the
                // unique part alone, the prefix would pass for template
                // overhead and every prompt would come out short by it.
                words_of.insert(id, prompt.words);
                sent += 1;
            }
            if self.tasks.is_empty() {
                break;
            }
            tokio::select! {
                command = commands.recv(), if *commands_open => match command {
                    Some(Command::Stop) => {
                        self.stopping = true;
                        self.cancel.send_replace(true);
                    }
                    // Kept for when the first level starts: a key pressed
                    // during warmup is not lost.
                    Some(other) => self.deferred.push(other),
                    None => *commands_open = false,
                },
                Some(joined) = self.tasks.join_next_with_id() => {
                    self.in_flight.fetch_sub(1, Ordering::Relaxed);
                    if let Ok((id, record)) = joined {
                        self.task_levels.remove(&id);
                        records.push(record);
                    }
                }
            }
        }
        if self.stopping {
            return Ok(false);
        }
        let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_ok()).collect();
        if ok.is_empty() {
            let first_error = records
                .iter()
                .find_map(|r| match r.outcome {
                    Outcome::Failed(class) => Some(format!(
                        "{class}: {}",
                        r.error_message.as_deref().unwrap_or("no message")
                    )),
                    _ => None,
                })
                .unwrap_or_else(|| "no answer".into());
            return Err(format!(
                "all {} warmup requests failed; first error: {first_error}",
                records.len()
            ));
        }
        let samples: Vec<(usize, u32)> = ok
            .iter()
            .filter_map(|r| Some((*words_of.get(&r.id)?, r.input_tokens_reported?)))
            .collect();
        if let Some(fitted) = Calibration::fit(&samples, self.cfg.workload.calibration) {
            self.cfg.workload.calibration = fitted;
        }
        self.emit(DriverEvent::WarmupFinished {
            ok: ok.len(),
            failed: records.len() - ok.len(),
            calibration: self.cfg.workload.calibration,
            reported_prompt_tokens: samples.iter().map(|s| s.1).collect(),
        });
        self.after_warmup(&records);
        Ok(true)
    }
}
