//! Rules files: TOML read part by part into rules, and the file's own top-level keys.

use toml::de::{DeTable, DeValue};

use super::parse::{build, parse_version, top_level, Field};
use super::{Rule, RuleError, RuleSet, RulesError, RulesFile};

/// Parses a rules file. A file of many rules is parsed one `[[rule]]` at
/// a time (see [`rule_chunks`]): the TOML parser holds about 3 KB a rule
/// while it parses a document, and a hundred thousand rules in one
/// document peaked at 340 MB before the first rule was built. Each part is
/// read into the parser's own borrowed tree, not an owned `toml::Table`,
/// and dropped once its rules are built, before the next is parsed.
pub(super) fn from_toml(text: &str) -> Result<RulesFile, RulesError> {
    let file = match read_in_parts(text) {
        Some(Ok(file)) => file,
        // A rule refused in one part: unless the file does not parse as a
        // whole (a syntax error is reported first, as for any file).
        Some(Err(e)) => return Err(read_whole(text).err().unwrap_or(e)),
        None => read_whole(text)?,
    };
    Ok(RulesFile {
        set: RuleSet::new(file.version, file.rules)?,
        allow_empty: file.allow_empty,
    })
}

/// The file read part by part; None when a part does not parse alone or
/// the head holds a `rule` key of its own: then the file is read whole,
/// and its errors and its meaning are the whole document's.
fn read_in_parts(text: &str) -> Option<Result<FileDraft, RulesError>> {
    let parts = rule_chunks(text);
    let mut file = FileDraft::new();
    for (i, part) in parts.iter().enumerate() {
        let doc = DeTable::parse(part).ok()?.into_inner();
        if i == 0 && parts.len() > 1 && doc.keys().any(|k| k.get_ref() == "rule") {
            return None;
        }
        if let Err(e) = file.read(doc) {
            return Some(Err(e));
        }
    }
    Some(Ok(file))
}

/// The file read as one document.
fn read_whole(text: &str) -> Result<FileDraft, RulesError> {
    let doc = DeTable::parse(text).map_err(|e| RulesError::Syntax {
        format: "TOML",
        message: e.to_string(),
    })?;
    let mut file = FileDraft::new();
    file.read(doc.into_inner())?;
    Ok(file)
}

/// `text` cut before each line that is exactly `[[rule]]`: the head (the
/// top-level keys, maybe empty) and then one part per rule. A cut inside a
/// multi-line string, array or inline table leaves a part that does not
/// parse alone, and the caller then reads the file whole; a cut anywhere
/// else starts a part whose top-level keys are only what it would add to
/// the document.
fn rule_chunks(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "[[rule]]" {
            parts.push(&text[start..at]);
            start = at;
        }
        at += line.len();
    }
    parts.push(&text[start..]);
    parts
}

/// What the top-level keys of a rules file have said so far.
struct FileDraft {
    version: u64,
    allow_empty: bool,
    rules: Vec<Rule>,
}

impl FileDraft {
    fn new() -> FileDraft {
        FileDraft {
            version: 0,
            allow_empty: false,
            rules: Vec::new(),
        }
    }

    /// Takes the top-level keys of one part of the file. Rules are
    /// numbered across parts, so an unnamed rule is `#N` of the file.
    fn read(&mut self, doc: DeTable<'_>) -> Result<(), RulesError> {
        for (key, value) in doc {
            let value = value.into_inner();
            match key.get_ref().as_ref() {
                "version" => self.version = parse_version(toml_field(&value))?,
                "allow_empty" => {
                    self.allow_empty = match value {
                        DeValue::Boolean(b) => b,
                        _ => return Err(top_level("allow_empty", "must be true or false")),
                    }
                }
                "rule" => {
                    let DeValue::Array(tables) = value else {
                        return Err(top_level("rule", "must be an array of [[rule]] tables"));
                    };
                    for t in tables {
                        let DeValue::Table(t) = t.into_inner() else {
                            return Err(top_level("rule", "each [[rule]] must be a table"));
                        };
                        let fields: Vec<_> = t
                            .iter()
                            .map(|(k, v)| (k.get_ref().as_ref(), toml_field(v.get_ref())))
                            .collect();
                        let pos = self.rules.len() + 1;
                        self.rules.push(build(pos, &fields, None)?);
                    }
                }
                other => {
                    return Err(RuleError {
                        rule: "(rules file)".into(),
                        field: other.into(),
                        reason: "unknown top-level key; rules go in [[rule]] tables".into(),
                    }
                    .into())
                }
            }
        }
        Ok(())
    }
}

fn toml_field<'a>(v: &'a DeValue<'_>) -> Field<'a> {
    match v {
        DeValue::String(s) => Field::Str(s),
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(i) => Field::Int(i),
            Err(_) => Field::Other("integer beyond 64 bits"),
        },
        DeValue::Float(f) => Field::Float(f.as_str().parse().unwrap_or(f64::NAN)),
        DeValue::Boolean(b) => Field::Bool(*b),
        DeValue::Datetime(_) => Field::Other("date"),
        DeValue::Array(_) => Field::Other("array"),
        DeValue::Table(_) => Field::Other("table"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &str) -> Result<RuleSet, RulesError> {
        read_whole(text).and_then(|f| RuleSet::new(f.version, f.rules))
    }

    fn same(text: &str) {
        let parts = from_toml(text).map(|f| f.set.to_json());
        assert_eq!(parts, whole(text).map(|s| s.to_json()), "{text}");
    }

    const RULE: &str = "algorithm = \"fixed_window\"\nlimit = 5\nwindow = \"1s\"\n";

    /// Guard: read part by part, a file means what it means read whole,
    /// and fails as it fails read whole, wherever a `[[rule]]` line falls.
    #[test]
    fn a_file_read_in_parts_reads_as_the_whole_document() {
        let named = |n: &str| format!("[[rule]]\nname = \"{n}\"\n{RULE}");
        let texts = [
            format!("version = 4\n{}{}", named("a"), named("b")),
            format!("{}{}", named("a"), named("b")),
            // An unnamed rule is `#N` of the file, not of its part.
            format!("{}[[rule]]\n{RULE}", named("a")),
            // A `[[rule]]` line inside a multi-line string.
            format!(
                "{}description = \"\"\"\n[[rule]]\n\"\"\"\n{RULE}",
                named("a").replace(RULE, "")
            ),
            // A head with a `rule` key of its own, then a header.
            format!("rule = []\n{}", named("a")),
            // A rule refused in one part, a syntax error in a later one.
            format!(
                "{}limit = 0\n{}name = ",
                named("a").replace("limit = 5\n", ""),
                named("b")
            ),
            format!("{}[[rule]]\nname = \"b\"\nbogus\n", named("a")),
            // A table header and a key after the rules.
            format!("{}[other]\nx = 1\n", named("a")),
            format!("{}{}", named("a"), named("a")),
            String::new(),
            "allow_empty = true\n".into(),
        ];
        for t in &texts {
            same(t);
        }
        assert_eq!(
            rule_chunks(&format!("{}{}", named("a"), named("b"))).len(),
            3
        );
    }
}
