//! What the tool may show of a secret: nothing. Every place that prints,
//! logs or saves a URL or a server's words about a request goes through
//! here, so the rule is checked in one file: a URL loses its user name and
//! password, a message loses the API key (docs/measure.md, keys).

/// A server root as shown and saved: no user name or password, no trailing
/// `/`. A root that does not parse (it was checked before) shows as
/// `<invalid url>`.
pub(crate) fn base_url(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(url) => url_text(&url).trim_end_matches('/').to_string(),
        Err(_) => "<invalid url>".into(),
    }
}

/// A parsed URL without its user name and password.
pub(crate) fn url_text(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    // Neither fails on an http(s) URL; on one that cannot hold credentials
    // there are none to remove.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.into()
}

/// A URL the user gave (`--gpu-metrics`), as shown and saved: parsed and
/// without its user name and password; one that does not parse, starred by
/// text as [`typed_url`] does.
pub(crate) fn url(raw: &str) -> String {
    match reqwest::Url::parse(raw.trim()) {
        // Only a URL with a host has a user name and password to drop:
        // `user:pass@host` without `//` parses as scheme `user`.
        Ok(url) if url.has_host() => url_text(&url),
        _ => typed_url(raw),
    }
}

/// `raw` as the user typed it, with everything between the scheme and its
/// last `@` replaced by `***`: by text, for input refused because it does
/// not parse. A password may hold `/`, `?` or `#` unencoded (a base64
/// secret), which is often why the URL did not parse, so the credentials
/// end at the last `@` anywhere; an `@` in a path hides the host too, which
/// an error can afford.
pub(crate) fn typed_url(raw: &str) -> String {
    let start = raw.find("://").map_or(0, |i| i + 3);
    match raw[start..].rfind('@') {
        Some(at) => format!("{}***{}", &raw[..start], &raw[start + at..]),
        None => raw.to_string(),
    }
}

/// `text` (a client error's words, which name the URL it sent to) with
/// `url` written without its credentials.
pub(crate) fn url_in(text: String, url: &reqwest::Url) -> String {
    if url.username().is_empty() && url.password().is_none() {
        return text;
    }
    text.replace(url.as_str(), &url_text(url))
}

/// `message` without `key`: a server may quote the key it got back in its
/// error ("Received API Key = ..."), and error messages are saved and shown.
/// A key cut off by the message's length cap (`...`) goes too, down to its
/// first 4 characters.
pub(crate) fn key_in(message: &str, key: &str) -> String {
    let mut out = message.replace(key, "<redacted>");
    if let Some(body) = out.strip_suffix("...") {
        let cut = (4.min(key.len())..key.len())
            .rev()
            .find(|&n| key.is_char_boundary(n) && body.ends_with(&key[..n]));
        if let Some(n) = cut {
            out = format!("{}<redacted>...", &body[..body.len() - n]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_loses_its_credentials_and_its_last_slash() {
        assert_eq!(base_url("http://user:secret@h:8000"), "http://h:8000");
        assert_eq!(base_url("https://h/"), "https://h");
        assert_eq!(base_url("not a url"), "<invalid url>");
    }

    #[test]
    fn a_given_url_loses_its_credentials_parsed_or_not() {
        assert_eq!(
            url("http://u:secret@gpu-node:9400/metrics"),
            "http://gpu-node:9400/metrics"
        );
        assert_eq!(
            url("http://u:p/w@h:99999/metrics"),
            "http://***@h:99999/metrics"
        );
        assert_eq!(url("u:secret@h:9400/metrics"), "***@h:9400/metrics");
    }

    #[test]
    fn a_typed_url_keeps_its_shape_with_the_credentials_starred() {
        assert_eq!(typed_url("http://u:p@h:99999/v1"), "http://***@h:99999/v1");
        // No scheme: the host part starts the text.
        assert_eq!(typed_url("u:p@h:8000"), "***@h:8000");
        // A password with `/`, `?` or `#` in it is hidden whole.
        assert_eq!(typed_url("http://u:pa/ss@h:8000"), "http://***@h:8000");
        assert_eq!(typed_url("http://u:p?w#d@h"), "http://***@h");
        // Without an `@` nothing is hidden; an `@` in a path hides the host
        // as well (too much, never too little).
        assert_eq!(typed_url("http://h:8000/v1"), "http://h:8000/v1");
        assert_eq!(typed_url("http://h/a@b"), "http://***@b");
    }

    #[test]
    fn a_url_in_a_message_is_written_without_credentials() {
        let url = reqwest::Url::parse("http://u:p@127.0.0.1:9/v1/completions").expect("url");
        assert_eq!(
            url_in(format!("error sending request for url ({url})"), &url),
            "error sending request for url (http://127.0.0.1:9/v1/completions)"
        );
        let plain = reqwest::Url::parse("http://127.0.0.1:9/").expect("url");
        assert_eq!(
            url_in("sent to http://127.0.0.1:9/".into(), &plain),
            "sent to http://127.0.0.1:9/"
        );
    }

    #[test]
    fn a_key_goes_whole_or_cut_off_by_the_cap() {
        let key = "sk-0123456789";
        assert_eq!(
            key_in("Received API Key = sk-0123456789.", key),
            "Received API Key = <redacted>."
        );
        // The cap cut the key after 7 characters: those 7 go.
        assert_eq!(key_in("key sk-0123...", key), "key <redacted>...");
        // Fewer than 4 characters left are not taken for the key.
        assert_eq!(key_in("a sk-...", key), "a sk-...");
    }
}
