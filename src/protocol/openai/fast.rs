//! The common chunk read in one pass over its bytes, without serde.
//!
//! Every token of a stream passes through the decoder, and the generic
//! deserializer (the chunk shape in `openai`) is most of a chunk's client cost. This reader takes
//! the shape nearly every chunk has (vLLM, SGLang, OpenAI, llama.cpp's
//! OpenAI streams): `choices` (deltas, `text`, `finish_reason`), `usage`
//! (with its details), `object`, and keys it skips. It gives up (`None`) on
//! anything else: a key only the full decoder reads (`error`, `message`,
//! `timings`, llama.cpp's native keys, TGI's native `token`), an escaped key or an escaped string
//! whose value matters, a `\u` escape of a surrogate, a duplicate known key,
//! a number it would need that is not a plain integer (or one that might not
//! fit an f64), nesting deeper than 100, or bytes that are not JSON. The
//! full decoder then reads the chunk, so the result is always the one the
//! full decoder gives (`fast_path_agrees_with_serde` checks that).

use std::borrow::Cow;

use super::{
    Carries, Choices, ChoicesSummary, Chunk, CompletionDetails, Delta, Finish, Lenient, Num,
    PromptDetails, Text, Usage,
};
use crate::record::FinishReason;

const MAX_DEPTH: usize = 100;

/// A prefix shorter than this is not worth remembering.
const MIN_PREFIX: usize = 16;

/// The bytes before the first key that matters, as the last chunk read
/// had them: in a vLLM stream every chunk starts with the same
/// `{"id":..,"object":..,"created":..,"model":..,`. A chunk that starts
/// with the same bytes is read from where they end: the reader's state
/// there (inside the object, a key next, `object` read) depends on those
/// bytes alone, and they were valid JSON up to there when first read.
#[derive(Debug, Default)]
pub(super) struct Prefix {
    bytes: Vec<u8>,
    /// Known keys among them (`Seen` bits).
    seen: u32,
    /// Where `object`'s string lies in them, when it is there.
    object: Option<(usize, usize)>,
}

impl Prefix {
    /// How many bytes are remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }
}

pub(super) fn chunk<'a>(payload: &'a str, prefix: &mut Prefix) -> Option<Chunk<'a>> {
    let mut r = Reader {
        b: payload.as_bytes(),
        i: 0,
    };
    let mut c = Chunk::default();
    let mut seen = Seen(0);
    let resumed = !prefix.bytes.is_empty() && r.b.starts_with(&prefix.bytes);
    // While only keys that can be remembered have been read: the object
    // string's place, then where the first other key starts.
    let mut plain = !resumed;
    let mut object_at = None;
    let mut boundary = None;
    if resumed {
        r.i = prefix.bytes.len();
        seen.0 = prefix.seen;
        if let Some((start, end)) = prefix.object {
            c.object = Text(Some(Cow::Borrowed(payload.get(start..end)?)));
        }
    } else {
        if !r.eat(b'{') {
            return None;
        }
        if r.eat(b'}') {
            r.ws();
            return (r.i == r.b.len()).then_some(c);
        }
    }
    loop {
        r.ws();
        let key_start = r.i;
        let (key, escaped) = r.string()?;
        if escaped || !r.eat(b':') {
            return None;
        }
        match key {
            b"choices" | b"usage" if plain => {
                plain = false;
                boundary = Some((key_start, seen.0));
            }
            _ => {}
        }
        match key {
            b"choices" => {
                seen.once(0)?;
                c.choices = r.choices()?;
            }
            b"usage" => {
                seen.once(1)?;
                c.usage = r.usage()?;
            }
            b"object" => {
                seen.once(2)?;
                c.object = r.text()?;
                if let (true, Text(Some(Cow::Borrowed(text)))) = (plain, &c.object) {
                    let start = text.as_ptr() as usize - payload.as_ptr() as usize;
                    object_at = Some((start, start + text.len()));
                }
            }
            b"error" | b"message" | b"timings" | b"content" | b"stop" | b"stop_type"
            | b"stopped_eos" | b"stopped_limit" | b"stopped_word" | b"tokens_predicted"
            | b"tokens_evaluated" | b"tokens_cached" | b"token" => return None,
            _ => r.skip(0)?,
        }
        if r.eat(b',') {
            continue;
        }
        if r.eat(b'}') {
            break;
        }
        return None;
    }
    r.ws();
    if r.i != r.b.len() {
        return None;
    }
    if let Some((end, seen)) = boundary.filter(|&(end, _)| end >= MIN_PREFIX) {
        prefix.bytes.clear();
        prefix.bytes.extend_from_slice(&r.b[..end]);
        prefix.seen = seen;
        prefix.object = object_at;
    }
    Some(c)
}

/// Known keys of one object seen so far (serde fails on a duplicate).
struct Seen(u32);

impl Seen {
    fn once(&mut self, bit: u32) -> Option<()> {
        let mask = 1 << bit;
        if self.0 & mask != 0 {
            return None;
        }
        self.0 |= mask;
        Some(())
    }
}

/// A value where the full decoder calls `deserialize_any`: its kind,
/// containers drained (their entries counted).
enum Kind<'a> {
    Str(&'a [u8], bool),
    Num(&'a [u8]),
    Other,
    Container(usize),
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? == word {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    /// `{ "key": value, ... }`, calling `entry` with the cursor on each value.
    fn object(&mut self, mut entry: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let (key, escaped) = self.string()?;
            if escaped || !self.eat(b':') {
                return None;
            }
            entry(self, key)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }

    /// A string's raw bytes (between the quotes) and whether it has escapes.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        if self.peek()? != b'"' {
            return None;
        }
        self.i += 1;
        let start = self.i;
        let mut escaped = false;
        loop {
            self.i += plain_run(&self.b[self.i..]);
            match *self.b.get(self.i)? {
                b'"' => {
                    let s = &self.b[start..self.i];
                    self.i += 1;
                    return Some((s, escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *self.b.get(self.i + 1)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let hex = self.b.get(self.i + 2..self.i + 6)?;
                            let hex = std::str::from_utf8(hex).ok()?;
                            let unit = u16::from_str_radix(hex, 16).ok()?;
                            if !hex.bytes().all(|h| h.is_ascii_hexdigit())
                                || (0xD800..=0xDFFF).contains(&unit)
                            {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                0x00..=0x1F => return None,
                _ => self.i += 1,
            }
        }
    }

    /// A JSON number's bytes.
    fn number(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.i;
        let digits = |r: &mut Self| {
            let from = r.i;
            while let Some(b'0'..=b'9') = r.b.get(r.i) {
                r.i += 1;
            }
            r.i > from
        };
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !digits(self) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        Some(&self.b[start..self.i])
    }

    /// Any value, ignored (serde's `IgnoredAny`).
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|r, _| r.skip(depth + 1)),
            b'[' => self.array(|r| r.skip(depth + 1)).map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(drop),
        }
    }

    /// `[ value, ... ]`, calling `element` with the cursor on each; the count.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<usize> {
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(0);
        }
        let mut n = 0;
        loop {
            element(self)?;
            n += 1;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b']').then_some(n);
        }
    }

    /// A value the full decoder reads with `deserialize_any`. Numbers must
    /// be short and without an exponent, so they surely fit an f64 (serde
    /// fails on one that does not).
    fn any(&mut self) -> Option<Kind<'a>> {
        match self.peek()? {
            b'"' => self.string().map(|(s, e)| Kind::Str(s, e)),
            b'{' => {
                let mut n = 0;
                self.object(|r, _| {
                    n += 1;
                    r.skip(1)
                })?;
                Some(Kind::Container(n))
            }
            b'[' => self.array(|r| r.skip(1)).map(Kind::Container),
            b't' => self.literal(b"true").map(|()| Kind::Other),
            b'f' => self.literal(b"false").map(|()| Kind::Other),
            b'n' => self.literal(b"null").map(|()| Kind::Other),
            _ => {
                let n = self.number()?;
                (n.len() <= 20 && !n.iter().any(|&c| c == b'e' || c == b'E'))
                    .then_some(Kind::Num(n))
            }
        }
    }

    fn carries(&mut self) -> Option<Carries> {
        Some(Carries(Some(match self.any()? {
            Kind::Str(s, _) => !s.is_empty(),
            Kind::Container(n) => n > 0,
            Kind::Num(_) | Kind::Other => false,
        })))
    }

    fn finish(&mut self) -> Option<Finish> {
        match self.any()? {
            Kind::Str(_, true) => None,
            Kind::Str(s, false) => Some(Finish(Some(FinishReason::parse(
                std::str::from_utf8(s).ok()?,
            )))),
            _ => Some(Finish(None)),
        }
    }

    fn text(&mut self) -> Option<Text<'a>> {
        match self.any()? {
            Kind::Str(_, true) => None,
            Kind::Str(s, false) => Some(Text(Some(Cow::Borrowed(std::str::from_utf8(s).ok()?)))),
            _ => Some(Text(None)),
        }
    }

    /// A count: plain digits only (anything else goes to the full decoder,
    /// whose float parsing then decides), at most 15 so the f64 is exact.
    fn num(&mut self) -> Option<Num> {
        match self.any()? {
            Kind::Num(n) if n.len() <= 15 && n.iter().all(u8::is_ascii_digit) => {
                let v = n
                    .iter()
                    .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
                Some(Num(Some(v as f64)))
            }
            Kind::Num(_) => None,
            _ => Some(Num(None)),
        }
    }

    /// `Lenient<T>`: an object read by `fields`, anything else `None`.
    fn lenient<T: Default>(
        &mut self,
        mut fields: impl FnMut(&mut Self, &'a [u8], &mut T, &mut Seen) -> Option<()>,
    ) -> Option<Lenient<T>> {
        if self.peek()? != b'{' {
            return self.any().map(|_| Lenient(None));
        }
        let mut t = T::default();
        let mut seen = Seen(0);
        self.object(|r, key| fields(r, key, &mut t, &mut seen))?;
        Some(Lenient(Some(t)))
    }

    fn choices(&mut self) -> Option<Choices> {
        if self.peek()? != b'[' {
            return self.any().map(|_| Choices(None));
        }
        let mut s = ChoicesSummary::default();
        self.array(|r| {
            let choice = r.lenient(|r, key, ch: &mut Choice, seen| {
                match key {
                    b"delta" => {
                        seen.once(0)?;
                        ch.delta = r.delta()?;
                    }
                    b"text" => {
                        seen.once(1)?;
                        ch.text = r.carries()?;
                    }
                    b"finish_reason" => {
                        seen.once(2)?;
                        ch.finish = r.finish()?;
                    }
                    _ => r.skip(1)?,
                }
                Some(())
            })?;
            s.count += 1;
            if let Some(ch) = choice.0 {
                let (output, content) = super::Choice {
                    delta: ch.delta,
                    text: ch.text,
                    finish_reason: ch.finish,
                }
                .output();
                s.output |= output;
                s.content |= content;
                s.finish = s.finish.or(ch.finish.0);
            }
            Some(())
        })?;
        Some(Choices(Some(s)))
    }

    fn delta(&mut self) -> Option<Lenient<Delta>> {
        self.lenient(|r, key, d: &mut Delta, seen| {
            let (bit, field) = match key {
                b"content" => (0, &mut d.content),
                b"reasoning_content" => (1, &mut d.reasoning_content),
                b"reasoning" => (2, &mut d.reasoning),
                b"tool_calls" => (3, &mut d.tool_calls),
                b"function_call" => (4, &mut d.function_call),
                _ => return r.skip(2),
            };
            seen.once(bit)?;
            *field = r.carries()?;
            Some(())
        })
    }

    fn usage(&mut self) -> Option<Lenient<Usage>> {
        self.lenient(|r, key, u: &mut Usage, seen| {
            match key {
                b"prompt_tokens" => {
                    seen.once(0)?;
                    u.prompt_tokens = r.num()?;
                }
                b"completion_tokens" => {
                    seen.once(1)?;
                    u.completion_tokens = r.num()?;
                }
                b"completion_tokens_details" => {
                    seen.once(2)?;
                    u.completion_tokens_details =
                        r.lenient(|r, key, d: &mut CompletionDetails, seen| {
                            if key == b"reasoning_tokens" {
                                seen.once(0)?;
                                d.reasoning_tokens = r.num()?;
                                Some(())
                            } else {
                                r.skip(2)
                            }
                        })?;
                }
                b"prompt_tokens_details" => {
                    seen.once(3)?;
                    u.prompt_tokens_details =
                        r.lenient(|r, key, d: &mut PromptDetails, seen| {
                            if key == b"cached_tokens" {
                                seen.once(0)?;
                                d.cached_tokens = r.num()?;
                                Some(())
                            } else {
                                r.skip(2)
                            }
                        })?;
                }
                _ => r.skip(1)?,
            }
            Some(())
        })
    }
}

/// How many bytes at the start of `b` need no attention inside a string
/// (not `"`, `\\` or a control character): eight at a time (SWAR).
#[inline]
pub(super) fn plain_run(b: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // High bit set for each byte below `n` (exact for the lowest such
    // byte; bytes of 0x80 and up never count).
    let below = |w: u64, n: u64| w.wrapping_sub(ONES * n) & !w & HIGHS;
    let mut i = 0;
    while i + 8 <= b.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&b[i..i + 8]);
        let w = u64::from_le_bytes(word);
        let hits = below(w ^ (ONES * u64::from(b'"')), 1)
            | below(w ^ (ONES * u64::from(b'\\')), 1)
            | below(w, 0x20);
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i
}

/// One choice's fields, gathered before they become a `super::Choice`.
#[derive(Default)]
struct Choice {
    delta: Lenient<Delta>,
    text: Carries,
    finish: Finish,
}
