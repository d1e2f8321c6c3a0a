//! The test vectors of a specification in `docs/spec/`, read from the
//! document itself, so that the unit tests recomputing them check the
//! document and the code cannot drift apart.
//!
//! Where the vectors are, one way for every document: the document has
//! exactly one second-level heading whose title ends in `Test vectors`
//! (`## 9. Test vectors`), and its section (up to the next `## ` heading,
//! or the end) holds exactly one fenced block opened by the line
//! `` ```text ``: the vector block, one `name: value` per line. The files
//! the section shows whole are its fenced `` ```json `` blocks, in order.
//! A document without that section, with two, or whose section has no
//! `text` block or two, is an error naming the document: a vector block is
//! never guessed at. Headings and fences inside fenced blocks are content.

/// A specification's test vectors, as [`SpecVectors::read`] found them.
#[derive(Debug)]
pub struct SpecVectors {
    document: &'static str,
    text: &'static str,
    json: Vec<&'static str>,
}

impl SpecVectors {
    /// The vectors of `spec`, a document's text (`include_str!` of it), which
    /// errors call `document` (its path, say).
    pub fn read(document: &'static str, spec: &'static str) -> Result<SpecVectors, String> {
        let section = vectors_section(document, spec)?;
        let blocks = fenced_blocks(section);
        let mut text = blocks.iter().filter(|(info, _)| *info == "text");
        let (Some((_, vectors)), None) = (text.next(), text.next()) else {
            return Err(format!(
                "{document}: its test vectors section needs exactly one ```text block"
            ));
        };
        let json = blocks
            .iter()
            .filter(|(info, _)| *info == "json")
            .map(|(_, content)| *content)
            .collect();
        Ok(SpecVectors {
            document,
            text: vectors,
            json,
        })
    }

    /// The value of the first `name: value` line of the vector block.
    pub fn value(&self, name: &str) -> Result<&'static str, String> {
        self.text
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
            .ok_or_else(|| format!("{}: the vectors lack `{name}`", self.document))
    }

    /// The section's `json` blocks, each with its final newline, in order.
    pub fn json_blocks(&self) -> &[&'static str] {
        &self.json
    }
}

/// The text of the one `## … Test vectors` section of `spec`.
fn vectors_section(document: &str, spec: &'static str) -> Result<&'static str, String> {
    let headings: Vec<(usize, &str)> = lines_outside_fences(spec)
        .filter(|(_, line)| line.starts_with("## "))
        .collect();
    let mut found = headings
        .iter()
        .enumerate()
        .filter(|(_, (_, line))| line.trim_end().ends_with("Test vectors"));
    let (Some((index, (start, _))), None) = (found.next(), found.next()) else {
        return Err(format!(
            "{document}: needs exactly one `## … Test vectors` heading"
        ));
    };
    let end = headings.get(index + 1).map_or(spec.len(), |(at, _)| *at);
    Ok(&spec[*start..end])
}

/// Each line of `text` that is not inside a fenced block (fences
/// included), with its byte offset.
fn lines_outside_fences(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fenced = false;
    lines_with_offsets(text).filter(move |(_, line)| {
        let fence = line.starts_with("```");
        let outside = !fenced || fence;
        if fence {
            fenced = !fenced;
        }
        outside
    })
}

/// The fenced blocks of `section`: each one's info string (`text`,
/// `json`, empty) and content, the lines between its fences.
fn fenced_blocks(section: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut blocks = Vec::new();
    let mut open: Option<(&str, usize)> = None;
    for (at, line) in lines_with_offsets(section) {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        match open.take() {
            // The content starts after the opening fence's newline.
            None => open = Some((info.trim_end(), (at + line.len() + 1).min(section.len()))),
            Some((info, start)) => blocks.push((info, &section[start..at])),
        }
    }
    blocks
}

/// Each line of `text` with its byte offset, the line's newline dropped
/// and kept in the offsets (so a block's content ends with its newline).
fn lines_with_offsets(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_inclusive('\n')
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line))
        })
        .map(|(start, line)| (start, line.strip_suffix('\n').unwrap_or(line)))
}

#[cfg(test)]
mod tests {
    use super::SpecVectors;

    const SPEC: &str = "# Doc\n\n## 1. Format\n\n```text\nnot: this\n```\n\n## 2. Test vectors\n\n```text\n# vectors\nkey: value\nlonger_key: other\n```\n\n```json\n{\"a\": 1}\n```\n\n```yaml\n## not a heading\n```\n";

    #[test]
    fn finds_the_one_text_block_under_the_heading() {
        let vectors = SpecVectors::read("doc", SPEC).unwrap();
        assert_eq!(vectors.value("key").unwrap(), "value");
        assert_eq!(vectors.value("longer_key").unwrap(), "other");
        assert!(vectors.value("not").is_err());
        assert_eq!(vectors.json_blocks(), ["{\"a\": 1}\n"]);
    }

    #[test]
    fn refuses_a_missing_or_doubled_section_or_block() {
        let no_section = "## 1. Format\n```text\nkey: value\n```\n";
        let two_sections = format!("{SPEC}\n## 3. Test vectors\n```text\nk: v\n```\n");
        let two_blocks = "## 9. Test vectors\n```text\nk: v\n```\n```text\nk: w\n```\n";
        let no_block = "## 9. Test vectors\n```json\n{}\n```\n";
        for spec in [no_section, &two_sections, two_blocks, no_block] {
            let spec: &'static str = String::leak(spec.to_owned());
            assert!(SpecVectors::read("doc", spec).is_err(), "{spec}");
        }
    }
}
