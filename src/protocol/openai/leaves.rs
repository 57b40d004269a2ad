//! The lenient serde leaves of a chunk: each reads the JSON it expects and
//! reads any other valid JSON as absent (or as what the type says), so valid
//! JSON never fails to decode on a type mismatch. Ollama's objects
//! (`protocol::ollama`) use them too.
//!
//! `others_as!` writes the visitor methods for the JSON kinds a leaf does not
//! read; each leaf writes only the ones it does.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::record::FinishReason;

/// For the leaf visitors: each listed JSON kind (`bool`, `i64`, `u64`, `f64`,
/// `str`, `unit`, `none`, `seq`, `map`) yields `$none`; an array or object
/// is read to its end first.
macro_rules! others_as {
    ($none:expr; $($kind:ident),+ $(,)?) => {
        $( others_as!(@ $kind, $none); )+
    };
    (@ bool, $none:expr) => { others_as!(@value visit_bool, bool, $none); };
    (@ i64, $none:expr) => { others_as!(@value visit_i64, i64, $none); };
    (@ u64, $none:expr) => { others_as!(@value visit_u64, u64, $none); };
    (@ f64, $none:expr) => { others_as!(@value visit_f64, f64, $none); };
    (@ str, $none:expr) => { others_as!(@value visit_str, &str, $none); };
    (@ unit, $none:expr) => { others_as!(@empty visit_unit, $none); };
    (@ none, $none:expr) => { others_as!(@empty visit_none, $none); };
    (@ seq, $none:expr) => { others_as!(@drain visit_seq, SeqAccess, drain_seq, $none); };
    (@ map, $none:expr) => { others_as!(@drain visit_map, MapAccess, drain_map, $none); };
    (@value $visit:ident, $t:ty, $none:expr) => {
        fn $visit<E: ::serde::de::Error>(self, _: $t) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
    (@empty $visit:ident, $none:expr) => {
        fn $visit<E: ::serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
    (@drain $visit:ident, $access:ident, $drain:ident, $none:expr) => {
        fn $visit<A: ::serde::de::$access<'de>>(self, a: A) -> Result<Self::Value, A::Error> {
            $crate::protocol::openai::leaves::$drain(a).map(|_| $none)
        }
    };
}

/// A leaf's `Deserialize` through `deserialize_any`: a visitor yielding
/// `$ty`, expecting `$what`, with the `visit_*` methods given (and
/// `others_as!` for the kinds it does not read).
macro_rules! leaf {
    ($ty:ident, $what:literal, { $($visits:tt)* }) => {
        impl<'de> ::serde::de::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> ::serde::de::Visitor<'de> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str($what)
                    }
                    $($visits)*
                }
                d.deserialize_any(V)
            }
        }
    };
}

pub(super) fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<usize, A::Error> {
    let mut n = 0;
    while seq.next_element::<IgnoredAny>()?.is_some() {
        n += 1;
    }
    Ok(n)
}

pub(super) fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<usize, A::Error> {
    let mut n = 0;
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// An object decoded as `T`; anything else (null, a string, an array) reads as
/// `None` instead of failing.
#[derive(Clone, Copy)]
pub(in crate::protocol) struct Lenient<T>(pub(in crate::protocol) Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Lenient<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(|t| Lenient(Some(t)))
            }
            others_as!(Lenient(None); bool, i64, u64, f64, str, unit, none, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// Whether a field carries anything: `None` absent; `Some(false)` null, `""`,
/// `[]`, `{}` or a number/bool; `Some(true)` a non-empty string, array or
/// object. Reads strings without copying them.
#[derive(Default)]
pub(in crate::protocol) struct Carries(pub(in crate::protocol) Option<bool>);

impl Carries {
    pub(in crate::protocol) fn yes(&self) -> bool {
        self.0 == Some(true)
    }
}

leaf!(Carries, "any value", {
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Carries, E> {
        Ok(Carries(Some(!s.is_empty())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Carries, A::Error> {
        drain_seq(seq).map(|n| Carries(Some(n > 0)))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Carries, A::Error> {
        drain_map(map).map(|n| Carries(Some(n > 0)))
    }
    others_as!(Carries(Some(false)); bool, i64, u64, f64, unit, none);
});

/// A number, or `None` for anything else.
#[derive(Clone, Copy, Default)]
pub(in crate::protocol) struct Num(pub(in crate::protocol) Option<f64>);

impl Num {
    /// As a count: non-negative, whole part, capped at `u32::MAX`.
    pub(in crate::protocol) fn as_u32(self) -> Option<u32> {
        self.0
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.min(u32::MAX as f64) as u32)
    }
}

leaf!(Num, "a number", {
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
        Ok(Num(Some(v as f64)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
        Ok(Num(Some(v as f64)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
        Ok(Num(Some(v)))
    }
    others_as!(Num(None); bool, str, unit, none, seq, map);
});

/// A boolean, or `None` for anything else.
#[derive(Clone, Copy, Default)]
pub(in crate::protocol) struct Flag(pub(in crate::protocol) Option<bool>);

leaf!(Flag, "a boolean", {
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
        Ok(Flag(Some(v)))
    }
    others_as!(Flag(None); i64, u64, f64, str, unit, none, seq, map);
});

/// A string (borrowed when it has no escapes), or `None` for anything else.
#[derive(Default)]
pub(in crate::protocol) struct Text<'a>(pub(in crate::protocol) Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'a>, E> {
                Ok(Text(Some(Cow::Owned(s))))
            }
            others_as!(Text(None); bool, i64, u64, f64, unit, none, seq, map);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `finish_reason`, parsed without copying; `None` for null or a non-string.
#[derive(Clone, Copy, Default)]
pub(in crate::protocol) struct Finish(pub(in crate::protocol) Option<FinishReason>);

leaf!(Finish, "a finish reason", {
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Finish, E> {
        Ok(Finish(Some(FinishReason::parse(s))))
    }
    others_as!(Finish(None); bool, i64, u64, f64, unit, none, seq, map);
});

/// The `error` field of a chunk: `"..."` (TGI) or `{"message": "..."}`
/// (OpenAI, SGLang, Ollama's `/v1`). `None` when absent, null, `false` or
/// an empty string. An object without a message falls back to its `type`.
#[derive(Default)]
pub(in crate::protocol) struct ErrorField(pub(in crate::protocol) Option<String>);

leaf!(ErrorField, "an error message or object", {
    fn visit_str<E: de::Error>(self, s: &str) -> Result<ErrorField, E> {
        Ok(ErrorField((!s.trim().is_empty()).then(|| s.to_owned())))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ErrorField, A::Error> {
        let mut message = None;
        let mut kind = None;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let Text(value) = map.next_value::<Text<'de>>()?;
            match key.as_deref() {
                Some("message") if message.is_none() => message = value,
                Some("type") if kind.is_none() => kind = value,
                _ => {}
            }
        }
        let text = message
            .filter(|m| !m.trim().is_empty())
            .or(kind)
            .map(Cow::into_owned)
            .unwrap_or_else(|| "error object without a message".to_owned());
        Ok(ErrorField(Some(text)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<ErrorField, E> {
        Ok(ErrorField(v.then(|| "error".to_owned())))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<ErrorField, E> {
        Ok(ErrorField(Some(format!("error {v}"))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<ErrorField, E> {
        Ok(ErrorField(Some(format!("error {v}"))))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<ErrorField, E> {
        Ok(ErrorField(Some(format!("error {v}"))))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ErrorField, A::Error> {
        drain_seq(seq).map(|n| ErrorField((n > 0).then(|| "error".to_owned())))
    }
    others_as!(ErrorField(None); unit, none);
});
