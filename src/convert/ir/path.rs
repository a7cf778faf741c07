//! Where a value sits in a client's request (`messages[3].content[1]`), for the errors and
//! losses the request decoders report.

use std::fmt;

/// A place in the request, written out only when an error or a loss names it: a long history
/// holds thousands of blocks, and almost none is ever named, so building each one's name as it
/// is read cost more than reading some of them.
#[derive(Clone, Copy)]
pub enum Path<'a> {
    Key(&'static str),
    Index(&'a Path<'a>, usize),
    Member(&'a Path<'a>, &'static str),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Key(key) => f.write_str(key),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
            Path::Member(parent, key) => write!(f, "{parent}.{key}"),
        }
    }
}

/// A path as an error's or a loss's field name.
impl From<&Path<'_>> for String {
    fn from(path: &Path<'_>) -> String {
        path.to_string()
    }
}

impl From<Path<'_>> for String {
    fn from(path: Path<'_>) -> String {
        path.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_written_as_the_request_names_it() {
        let input = Path::Key("input");
        let item = Path::Index(&input, 3);
        let content = Path::Member(&item, "content");
        assert_eq!(Path::Index(&content, 1).to_string(), "input[3].content[1]");
        assert_eq!(String::from(input), "input");
        assert_eq!(String::from(&content), "input[3].content");
    }
}
