//! Route patterns: literal text with `*` matching any run of characters.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RoutePattern {
    text: String,
}

impl RoutePattern {
    pub fn new(text: &str) -> Self {
        RoutePattern {
            text: text.to_string(),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_exact(&self) -> bool {
        !self.text.contains('*')
    }

    /// Literal characters: between two rules of one rank, the one pinning
    /// more of the route is the more specific.
    pub fn literal_len(&self) -> usize {
        self.text.chars().filter(|&c| c != '*').count()
    }

    pub fn matches(&self, route: &str) -> bool {
        glob_match(self.text.as_bytes(), route.as_bytes())
    }

    /// Whether some route matches both patterns (used to refuse ties).
    pub fn overlaps(&self, other: &RoutePattern) -> bool {
        globs_overlap(self.text.as_bytes(), other.text.as_bytes())
    }
}

impl fmt::Display for RoutePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Greedy match with one backtrack point: the last star seen. Linear in
/// practice and never worse than O(pattern x route).
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Whether two globs accept a common string: dynamic programming over
/// (position in a, position in b), where a star may emit nothing or one
/// more character that the other side also emits.
fn globs_overlap(a: &[u8], b: &[u8]) -> bool {
    let (n, m) = (a.len(), b.len());
    // ok[i][j]: a[i..] and b[j..] share a match.
    let mut ok = vec![vec![false; m + 1]; n + 1];
    ok[n][m] = true;
    for i in (0..=n).rev() {
        for j in (0..=m).rev() {
            if i == n && j == m {
                continue;
            }
            let a_star = i < n && a[i] == b'*';
            let b_star = j < m && b[j] == b'*';
            let mut v = false;
            if a_star {
                v |= ok[i + 1][j] || (j < m && ok[i][j + 1]);
            }
            if b_star {
                v |= ok[i][j + 1] || (i < n && ok[i + 1][j]);
            }
            if i < n && j < m && !a_star && !b_star && a[i] == b[j] {
                v |= ok[i + 1][j + 1];
            }
            ok[i][j] = v;
        }
    }
    ok[0][0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RoutePattern {
        RoutePattern::new(s)
    }

    #[test]
    fn star_matches_any_run() {
        assert!(p("GET /v1/users/*").matches("GET /v1/users/42"));
        assert!(p("GET /v1/users/*").matches("GET /v1/users/"));
        assert!(!p("GET /v1/users/*").matches("POST /v1/users/42"));
        assert!(p("* /v1/charges").matches("POST /v1/charges"));
        assert!(p("*").matches(""));
        assert!(p("a*b*c").matches("aXXbYYc"));
        assert!(!p("a*b*c").matches("aXXbYY"));
        assert!(p("POST /v1/charges").matches("POST /v1/charges"));
        assert!(!p("POST /v1/charges").matches("POST /v1/charges/1"));
    }

    #[test]
    fn overlap_finds_a_common_route() {
        assert!(p("GET /a/*").overlaps(&p("GET /*/b")));
        assert!(p("*").overlaps(&p("anything")));
        assert!(!p("GET /a/*").overlaps(&p("POST /*")));
        assert!(!p("GET /a").overlaps(&p("GET /b")));
        assert!(p("GET /a").overlaps(&p("GET /a")));
        assert!(!p("a*x").overlaps(&p("b*")));
    }
}
