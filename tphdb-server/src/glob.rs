//! Redis's glob patterns (`SCAN ... MATCH`): `*`, `?`, `[abc]`, `[^a-z]`
//! and `\` escapes, over bytes.

/// Whether `s` matches `pattern`, as Redis's `stringmatchlen`. A `*` that
/// fails to match retries only from the last `*`, so the time is at most
/// `pattern.len() * s.len()` steps, whatever the pattern.
pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    // Where to resume after the last `*`: pattern index past it, and the
    // next position of `s` it may swallow up to.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            if pattern[p] == b'*' {
                star = Some((p + 1, i));
                p += 1;
                continue;
            }
            if i < s.len() {
                if let Some(len) = match_one(&pattern[p..], s[i]) {
                    p += len;
                    i += 1;
                    continue;
                }
            }
        } else if i == s.len() {
            return true;
        }
        match star {
            Some((sp, si)) if si < s.len() => {
                star = Some((sp, si + 1));
                p = sp;
                i = si + 1;
            }
            _ => return false,
        }
    }
}

/// If the pattern element at the front of `pattern` (not `*`) matches `c`,
/// its length in the pattern.
fn match_one(pattern: &[u8], c: u8) -> Option<usize> {
    match pattern[0] {
        b'?' => Some(1),
        b'\\' if pattern.len() >= 2 => (pattern[1] == c).then_some(2),
        b'[' => {
            let mut j = 1;
            let not = pattern.get(j) == Some(&b'^');
            if not {
                j += 1;
            }
            let mut hit = false;
            loop {
                match pattern.get(j) {
                    // An unclosed class ends with the pattern (Redis).
                    None => break,
                    Some(b']') => {
                        j += 1;
                        break;
                    }
                    Some(b'\\') if j + 1 < pattern.len() => {
                        hit |= pattern[j + 1] == c;
                        j += 2;
                    }
                    Some(&lo) if pattern.get(j + 1) == Some(&b'-') && j + 2 < pattern.len() => {
                        let hi = pattern[j + 2];
                        let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                        hit |= (lo..=hi).contains(&c);
                        j += 3;
                    }
                    Some(&b) => {
                        hit |= b == c;
                        j += 1;
                    }
                }
            }
            (hit != not).then_some(j)
        }
        b => (b == c).then_some(1),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_pattern_cases() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "abc"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("user:*:name", "user:42:name"),
            ("a\\*b", "a*b"),
            ("*a*b*c*", "xxaxxbxxcxx"),
        ];
        let no: &[(&str, &str)] = &[
            ("h?llo", "hllo"),
            ("h[ae]llo", "hillo"),
            ("h[^e]llo", "hello"),
            ("a\\*b", "axb"),
            ("abc", "abcd"),
            ("*a*b*c*", "xxaxxcxxbxx"),
            ("", "a"),
        ];
        for (p, s) in yes {
            assert!(matches(p.as_bytes(), s.as_bytes()), "{p} ~ {s}");
        }
        for (p, s) in no {
            assert!(!matches(p.as_bytes(), s.as_bytes()), "{p} !~ {s}");
        }
    }

    #[test]
    fn a_pathological_pattern_takes_linear_steps() {
        let p = "a*".repeat(50) + "b";
        let s = "a".repeat(10_000);
        assert!(!matches(p.as_bytes(), s.as_bytes()));
    }
}
