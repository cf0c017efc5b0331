//! A secret given as a flag (or its variable) or read from a file, as a
//! mounted Kubernetes Secret is.

use std::path::Path;

/// The secret `flag` or `file_flag` gives, or none. Clap refuses the two
/// together, so at most one is set here. An empty secret, an empty file and
/// an unreadable file are refused naming the flag (and the file): a node
/// that silently ran without its secret would run alone, or take no writes.
pub fn secret(
    flag: &str,
    value: Option<&str>,
    file_flag: &str,
    file: Option<&Path>,
) -> Result<Option<String>, String> {
    match (value, file) {
        (Some(_), Some(_)) => Err(format!("give {flag} or {file_flag}, not both")),
        (Some(""), None) => Err(format!("{flag} must not be empty")),
        (Some(v), None) => Ok(Some(v.to_string())),
        (None, Some(path)) => read(file_flag, path).map(Some),
        (None, None) => Ok(None),
    }
}

/// The secrets `flag` (comma separated) or `file_flag` (one a line) gives,
/// for rotations: none when neither is given. An empty entry, an empty
/// file and an unreadable one are refused naming the flag.
pub fn accepted(
    flag: &str,
    values: &[String],
    file_flag: &str,
    file: Option<&Path>,
) -> Result<Vec<String>, String> {
    let listed = match (values.is_empty(), file) {
        (false, Some(_)) => return Err(format!("give {flag} or {file_flag}, not both")),
        (false, None) => values.to_vec(),
        (true, Some(path)) => {
            let text = read(file_flag, path)?;
            // One a line; blank lines (a trailing one, say) name nothing.
            text.lines()
                .map(|l| l.strip_suffix('\r').unwrap_or(l))
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect()
        }
        (true, None) => Vec::new(),
    };
    if listed.iter().any(String::is_empty) {
        return Err(format!("{flag} has an empty entry"));
    }
    Ok(listed)
}

fn read(file_flag: &str, path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {file_flag} {}: {e}", path.display()))?;
    // One line ending, as `echo` and editors leave one; anything else in
    // the file is the secret, whitespace included.
    let secret = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |s| s.strip_suffix('\r').unwrap_or(s));
    if secret.is_empty() {
        return Err(format!("{file_flag} {} is empty", path.display()));
    }
    Ok(secret.to_string())
}
